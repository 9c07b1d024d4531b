"""GossipCommunicator: the run hooks of GALA-A2C. Learners are the ranks of an independent
:class:`~rlkit.training.strategies.LearnerProcesses` layout (no collective during training); after each
optimizer step the parameters go through :class:`~rlkit_gossip.protocol.GossipAgent`.

Consensus distance (the paper's epsilon-ball) is measured without stopping anyone: every
``consensus_every`` updates each learner leaves a snapshot of its parameters for learner 0 in a
mailbox, and learner 0 logs every learner's L2 distance from the average of the latest snapshots
(its own parameters included), with how many updates apart the snapshots are.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rlkit.api import LearnerLayout, RunFailed, Topology, UserError, hookimpl, run_store
from rlkit_gossip import graphs
from rlkit_gossip.protocol import (
    GossipAgent,
    GossipSettings,
    Membership,
    PeerFailure,
    consensus_distances,
    declare_gone,
)
from rlkit_gossip.transports import HEADER, DistTransport, ShmTransport, shm_root


def resolve_mixing(options, learners: int) -> str:
    if options.mixing != "auto":
        return options.mixing
    outs = {p: graphs.peers_at(list(range(learners)), p, options.graph, options.peers_per_itr,
                               options.rotate_peers, 0)[0] for p in range(learners)}
    return "uniform" if graphs.is_regular(outs) else "push_sum"


def log(message: str) -> None:
    print(f"rlkit: {message}", file=sys.stderr, flush=True)


def resolve_transport(options, num_nodes: int) -> str:
    if options.transport != "auto":
        return options.transport
    return "shm" if num_nodes == 1 else "dist"


class GossipCommunicator:
    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.agent: GossipAgent | None = None
        self.device = torch.device("cpu")  # where parameters are mixed (the transport's device)
        self.snapshots: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.comm_s = 0.0
        self.window_start = time.perf_counter()
        self._restored: dict = {}  # this learner's gossip state from the checkpoint it resumed from

    # -- launching process ------------------------------------------------------------------

    @hookimpl
    def rlkit_learner_layout(self, run) -> LearnerLayout:
        o, t = self.options, run.recipe.trainer
        nccl = resolve_transport(o, t.num_nodes) == "dist" and o.dist_backend == "nccl"
        # a learner restarted after a death rejoins through shared memory; the dist transport's
        # process groups cannot take a new process in, so there the others go on without it
        rejoins = resolve_transport(o, t.num_nodes) == "shm"
        return LearnerLayout(Topology.INDEPENDENT, backend="nccl" if nccl else "gloo", timeout_s=o.timeout_s,
                             child_grace_s=o.peer_timeout_s, min_learners=2, rejoins=rejoins)

    @hookimpl
    def rlkit_configure(self, run) -> None:
        t, p = run.recipe.trainer, run.recipe.placement
        o = self.options
        if t.num_nodes > 1 and o.transport == "shm":
            raise UserError(f"communication.options.transport: shm is not allowed with trainer.num_nodes="
                            f"{t.num_nodes} (shared memory joins learners on one host); use dist or auto")
        if o.dist_backend == "nccl" and resolve_transport(o, t.num_nodes) == "dist":
            if t.accelerator not in ("gpu", "cuda"):
                raise UserError(f"communication.options.dist_backend: nccl is not allowed with trainer.accelerator="
                                f"{t.accelerator} (NCCL moves GPU tensors); use gloo or trainer.accelerator=gpu")
            if p.learners_per_device != 1:
                raise UserError(f"communication.options.dist_backend: nccl is not allowed with "
                                f"placement.learners_per_device={p.learners_per_device} (NCCL needs one learner "
                                "per GPU); use gloo or placement.learners_per_device=1")

    @hookimpl
    def rlkit_unconfigure(self, run, error) -> None:
        if not run.launcher:
            return  # a launched learner runs the CLI too: only the launching process cleans up
        # the core has waited for the learners (LearnerLayout.child_grace_s) before this
        ShmTransport(shm_root(str(run.run_dir.resolve())), 0).close(remove=True)

    @hookimpl
    def rlkit_learner_exit(self, run, rank: int, returncode: int, restarting: bool) -> None:
        """The supervisor saw learner ``rank`` die: the others drop it from the graph at their next
        poll (within a second) instead of after peer_timeout_s of silence."""
        how = f"killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
        declare_gone(run_store(), rank, f"died: {how}" + ("; restarting" if restarting else ""))

    # -- every learner --------------------------------------------------------------------------

    @hookimpl
    def rlkit_learner_start(self, run, module) -> None:
        o = self.options
        rank, world = module.global_rank, module.world_size
        numel = sum(p.numel() for p in module.parameters())
        settings = GossipSettings(graph=o.graph, peers_per_itr=o.peers_per_itr, rotate_peers=o.rotate_peers,
                                  mixing=resolve_mixing(o, world), sync_freq=o.sync_freq,
                                  peer_timeout_s=o.peer_timeout_s, on_peer_failure=o.on_peer_failure)
        store = run_store()
        if resolve_transport(o, run.recipe.trainer.num_nodes) == "dist":
            device = module.device if o.dist_backend == "nccl" else "cpu"
            transport = DistTransport(numel, rank, store, device=device, timeout_s=o.peer_timeout_s)
        else:
            transport = ShmTransport(shm_root(str(run.run_dir.resolve())), numel)
        self.device = getattr(transport, "device", torch.device("cpu"))
        if rank == 0:
            log(f"gossip: {world} learners, {o.graph} graph, transport {transport.name}"
                + (f" ({o.dist_backend})" if transport.name == "dist" else ""))
        self.agent = GossipAgent(rank, world, transport, Membership(store, rank, world), settings,
                                 log=log)
        self.store = store
        self.window_start = time.perf_counter()
        if self.agent.membership.rejoin():  # a restarted learner: it was declared gone when it died
            log(f"gossip: learner {rank} rejoined the graph at update {module.global_step:,}")
        if self._restored:  # a resumed learner: its push-sum weight and counters go on
            r = self._restored
            self.agent.weight = float(r.get("weight", 1.0))
            c = self.agent.counters
            c.sent, c.mixed, c.skipped = int(r.get("sent", 0)), int(r.get("mixed", 0)), int(r.get("skipped", 0))

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update: int) -> None:
        agent = self.agent
        start = time.perf_counter()
        params = list(module.parameters())
        with torch.no_grad():
            flat = parameters_to_vector(params).detach().to(self.device, torch.float32)
            try:
                mixed = agent.step(flat, update)
            except PeerFailure as exc:
                self._stop(module, str(exc))
                return
            if mixed is not flat:
                vector_to_parameters(mixed.to(params[0].device, params[0].dtype), params)
            if update % self._consensus_every(run) == 0:
                self._snapshot(module, mixed, update)
        self.comm_s += time.perf_counter() - start

    def _consensus_every(self, run) -> int:
        return self.options.consensus_every or run.recipe.trainer.log_every_n_updates

    def _snapshot(self, module, params: torch.Tensor, update: int) -> None:
        agent = self.agent
        if agent.rank != 0:
            agent.send_snapshot(params, self._header(module, update))
        else:
            self.snapshots.update(agent.take_snapshots())
            self.snapshots[0] = (self._header(module, update), params.clone())

    def _header(self, module, update: int) -> torch.Tensor:
        c = self.agent.counters
        scores = list(module.recent_scores)
        h = torch.zeros(HEADER, dtype=torch.float64)
        h[0], h[1], h[2] = self.agent.weight, update, module.agent_steps
        h[3] = sum(scores) / len(scores) if scores else float("nan")
        h[4], h[5], h[6] = c.sent, c.mixed, c.skipped
        h[7] = max(self.agent.staleness.values(), default=0)
        return h

    @hookimpl
    def rlkit_train_end(self, run, module) -> None:
        """The run stopped early because a learner failed (on_peer_failure=stop; the stop reaches
        every learner through the core): learner 0 makes that the run's error."""
        if self.agent is not None and self.agent.rank == 0:
            failure = self.agent.membership.failure()
            if failure:
                raise RunFailed(failure)

    def _stop(self, module, reason: str) -> None:
        module.request_stop(reason + " (on_peer_failure=stop)")
        if self.agent.rank == 0:
            raise RunFailed(reason + "; the run stops (on_peer_failure=stop)")

    @hookimpl
    def rlkit_metrics(self, run, module):
        agent = self.agent
        now = time.perf_counter()
        c = agent.counters
        updates = run.recipe.trainer.log_every_n_updates if module.global_step > 1 else 1
        out = {"comm/gossip_ms": 1000.0 * self.comm_s / updates,
               "comm/gossip_frac": self.comm_s / max(now - self.window_start, 1e-9),
               "gossip/sent": float(c.sent), "gossip/mixed": float(c.mixed), "gossip/skipped": float(c.skipped),
               "gossip/waits": float(c.waits), "gossip/wait_s": c.wait_s,
               "gossip/staleness_max": float(max(agent.staleness.values(), default=0)),
               "gossip/weight": agent.weight, "gossip/live_learners": float(len(agent.membership.alive)),
               "gossip/rejoined": float(c.rejoined)}
        if c.aged:  # how old the parameters it mixed were: send to mix, mean over the interval
            out["gossip/msg_age_ms"] = 1000.0 * c.age_s / c.aged
        c.age_s, c.aged = 0.0, 0
        self.comm_s, self.window_start = 0.0, now
        if agent.rank == 0 and len(self.snapshots) > 1:
            out.update(self._consensus(module))
        return out

    def _consensus(self, module) -> dict[str, float]:
        alive = set(self.agent.membership.alive)
        snaps = {r: s for r, s in self.snapshots.items() if r in alive}
        dist = consensus_distances({r: data for r, (_, data) in snaps.items()})
        updates = [float(h[1]) for h, _ in snaps.values()]
        out = {"consensus/dist_max": max(dist.values()), "consensus/dist_mean": sum(dist.values()) / len(dist),
               "consensus/snapshot_spread": max(updates) - min(updates), "consensus/learners": float(len(dist))}
        for r, d in dist.items():
            out[f"consensus/dist_{r}"] = d
            score = float(snaps[r][0][3])
            if score == score:
                out[f"learner{r}/score_mean"] = score
        return out

    @hookimpl
    def rlkit_learner_end(self, run, module) -> None:
        agent = self.agent
        if agent is None:
            return
        try:
            if agent.rank == 0 and module.interrupted:
                # learners the signal did not reach (other nodes, torchrun) stop through the store
                module.request_stop("learner 0 was interrupted")
            agent.leave("finished")
            if agent.rank == 0 and not run.supervised:  # learner 0 hosts the store the others use
                self._wait_for_peers_to_leave()
        finally:
            agent.transport.close()
            self.agent = None

    def _wait_for_peers_to_leave(self) -> None:
        """Learner 0 hosts the store the others use: it stays until they have left, as long as one
        of them is alive (its heartbeat in the store moved within peer_timeout_s). Learner 0 has
        left the graph, so no snapshot comes to it any more: the heartbeat is the sign of life."""
        agent, membership = self.agent, self.agent.membership
        while True:
            membership.refresh(force=True)
            others = [r for r in membership.alive if r != agent.rank]
            if not others or min(membership.silent_for(r) for r in others) > self.options.peer_timeout_s:
                return
            time.sleep(0.05)

    @hookimpl
    def rlkit_load_state_dict(self, run, module, state):
        self._restored = dict(state.get("gossip", {}))

    @hookimpl
    def rlkit_state_dict(self, run, module):
        if self.agent is None:
            return {}
        return {"gossip": {"weight": self.agent.weight, "sent": self.agent.counters.sent,
                           "mixed": self.agent.counters.mixed, "skipped": self.agent.counters.skipped}}
