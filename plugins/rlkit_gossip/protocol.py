"""The gossip protocol of one learner (GALA-A2C), independent of Lightning.

After each optimizer step, :meth:`GossipAgent.step` sends the learner's parameters to its
out-peers whose mailbox is free, then mixes in every message waiting from its in-peers. It waits
only when the staleness bound says so: for an in-peer it has gone ``sync_freq`` updates without a
message from, and for an out-peer whose mailbox it has found full ``sync_freq`` updates in a row
(``sync_freq = 0`` is lock-step). A wait longer than ``peer_timeout_s`` means the peer has left or
failed: it is dropped from the graph (the graph is rebuilt over the live learners) or the run
stops, as ``on_peer_failure`` says. Who is alive is kept in a key-value store (the process
group's), so every learner rebuilds the same graph.

Waiting is not failing: a learner that waits for a dead peer would look just as silent to the
learners waiting for it, and one death would cascade round the ring. So every learner beats a
counter in the store (also while it waits), and a peer is declared failed only when its counter has
not moved for ``peer_timeout_s``; a wait is bounded all the same, at ``_WAIT_CAP`` x the timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rlkit_gossip import graphs, mixing
from rlkit_gossip.transports import GOSSIP, HEADER, SNAPSHOT

_MEMBERSHIP_POLL_S = 0.5
_WAIT_CAP = 4  # a wait on a peer that still beats ends after this many peer_timeout_s


class PeerFailure(RuntimeError):
    """A peer stopped answering and on_peer_failure=stop."""


class Membership:
    """Live learners, through a c10d store: ``gossip/gone/<rank>`` = why it left, and a version
    counter bumped on every departure so a poll is one round trip."""

    def __init__(self, store, rank: int, world: int, beat_every_s: float = 1.0):
        self.store, self.rank, self.world = store, rank, world
        self.alive = list(range(world))
        self.reasons: dict[int, str] = {}
        self._version = 0
        self._last_poll = 0.0
        self.beat_every_s = beat_every_s
        self._last_beat = -float("inf")
        self._seen: dict[int, tuple[int, float, float]] = {}  # peer -> (beat, first seen, last polled)
        self.rejoined: list[int] = []  # learners seen back since the caller last took them

    def beat(self) -> None:
        """Say "alive" (at most every beat_every_s; cheap to call often)."""
        now = time.monotonic()
        if now - self._last_beat >= self.beat_every_s:
            self._last_beat = now
            self.store.add(f"gossip/beat/{self.rank}", 1)

    def silent_for(self, peer: int) -> float:
        """Seconds since ``peer``'s beat was last seen to move (0 the first time it is looked at)."""
        now = time.monotonic()
        beat, since, polled = self._seen.get(peer, (-1, now, -float("inf")))
        if now - polled >= self.beat_every_s / 2:
            current = self.store.add(f"gossip/beat/{peer}", 0)
            if current != beat:
                beat, since = current, now
            polled = now
        self._seen[peer] = (beat, since, polled)
        return now - since

    def refresh(self, force: bool = False) -> list[tuple[int, str]]:
        """Poll the store (at most every 0.5 s unless forced); returns the newly gone learners.
        Learners that came back (a restarted learner, :meth:`rejoin`) are put back in ``alive``
        and collected in ``rejoined`` for the caller to take."""
        now = time.monotonic()
        if not force and now - self._last_poll < _MEMBERSHIP_POLL_S:
            return []
        self._last_poll = now
        version = self.store.add("gossip/version", 0)
        if version == self._version:
            return []
        self._version = version
        gone = []
        for r in range(self.world):
            if r == self.rank:
                continue
            is_gone = self.store.check([f"gossip/gone/{r}"])
            if is_gone and r in self.alive:
                reason = self.store.get(f"gossip/gone/{r}").decode()
                self.alive.remove(r)
                self.reasons[r] = reason
                gone.append((r, reason))
            elif not is_gone and r not in self.alive:
                self.alive = sorted([*self.alive, r])
                self.reasons.pop(r, None)
                self._seen.pop(r, None)
                self.rejoined.append(r)
        return gone

    def rejoin(self) -> bool:
        """A restarted learner takes its place again: its ``gone`` record is removed (True where
        there was one) and every learner sees it back at its next poll."""
        key = f"gossip/gone/{self.rank}"
        if not self.store.check([key]):
            return False
        self.store.delete_key(key)
        self.store.add("gossip/version", 1)
        return True

    def declare_gone(self, rank: int, reason: str) -> None:
        declare_gone(self.store, rank, reason)

    def stop_run(self, reason: str) -> None:
        """Record why the run stops; the caller asks the core to stop it (``request_stop``)."""
        self.store.set("gossip/failed", reason)

    def failure(self) -> str | None:
        return self.store.get("gossip/failed").decode() if self.store.check(["gossip/failed"]) else None


def declare_gone(store, rank: int, reason: str) -> None:
    """Record that learner ``rank`` left the graph (why), for every learner's next poll."""
    if not store.check([f"gossip/gone/{rank}"]):
        store.set(f"gossip/gone/{rank}", reason)
        store.add("gossip/version", 1)


@dataclass
class GossipSettings:
    graph: str = "ring"
    peers_per_itr: int = 1
    rotate_peers: bool = False
    mixing: str = "uniform"  # uniform | push_sum (auto is resolved before)
    sync_freq: int = 0
    peer_timeout_s: float = 60.0
    on_peer_failure: str = "drop"  # drop | stop


@dataclass
class Counters:
    sent: int = 0
    mixed: int = 0
    skipped: int = 0
    waits: int = 0
    wait_s: float = 0.0
    dropped: list = field(default_factory=list)
    age_s: float = 0.0  # summed over mixed messages: seconds from the sender's send to this mix
    aged: int = 0  # messages in age_s
    rejoined: int = 0  # peers taken back into the graph after a restart


class GossipAgent:
    def __init__(self, rank: int, world: int, transport, membership: Membership, settings: GossipSettings,
                 log=print):
        self.rank, self.world = rank, world
        self.transport, self.membership, self.s = transport, membership, settings
        membership.beat_every_s = min(membership.beat_every_s, settings.peer_timeout_s / 4)
        self.log = log
        self.weight = 1.0  # push-sum weight (stays 1 under uniform mixing)
        self.staleness: dict[int, int] = {}  # in-peer -> updates since its last mixed message
        self.send_skips: dict[int, int] = {}  # out-peer -> consecutive updates its mailbox was full
        self.counters = Counters()
        self.last_in: list[int] = []
        self.last_heard: dict[int, float] = {}  # in-peer -> when its last message was mixed
        self.draining: set[int] = set()  # peers gone from the graph whose last messages may wait

    # -- one update ---------------------------------------------------------------------------

    def step(self, params: torch.Tensor, update: int) -> torch.Tensor:
        """Gossip the flat parameter vector ``params`` (CPU float32) after update ``update``."""
        self.membership.beat()
        self._membership()
        alive = self.membership.alive
        if len(alive) < 2:
            return params
        outs, ins = graphs.peers_at(alive, self.rank, self.s.graph, self.s.peers_per_itr, self.s.rotate_peers,
                                    update)
        self.last_in = ins
        params = self._send(params, outs, update)
        return self._receive(params, ins, update)

    def _send(self, params: torch.Tensor, outs: list[int], update: int) -> torch.Tensor:
        ready = []
        for j in outs:
            if self.transport.ready(self.rank, j, GOSSIP):
                ready.append(j)
            elif self.send_skips.get(j, 0) >= self.s.sync_freq:
                if self._wait(lambda j=j: self.transport.ready(self.rank, j, GOSSIP), j, "to take its message"):
                    ready.append(j)
            else:
                self.send_skips[j] = self.send_skips.get(j, 0) + 1
                self.counters.skipped += 1
        ready = [j for j in ready if j in self.membership.alive]
        if not ready:
            return params
        if self.s.mixing == "push_sum":
            self.weight, (numerator, weight) = mixing.push_sum_split(params, self.weight, len(ready))
        else:
            numerator, weight = mixing.uniform_message(params)
        header = torch.zeros(HEADER, dtype=torch.float64)
        header[0], header[1], header[2] = weight, update, time.time()  # wall clock: comparable across hosts
        for j in ready:
            self.transport.send(self.rank, j, GOSSIP, header, numerator)
            self.send_skips[j] = 0
            self.counters.sent += 1
        return params

    def _receive(self, params: torch.Tensor, ins: list[int], update: int) -> torch.Tensor:
        for j in ins:
            if self.staleness.get(j, 0) >= self.s.sync_freq and not self.transport.waiting(j, self.rank, GOSSIP):
                self._wait(lambda j=j: self.transport.waiting(j, self.rank, GOSSIP), j, "to send a message")
        messages = []
        # live in-peers, and peers that left with messages still waiting (a learner's last
        # messages are mixed even when it finishes before they are taken)
        senders = set(graphs.all_in_peers(self.membership.alive, self.rank, self.s.graph)) | self.draining
        for j in sorted(senders):
            got = self.transport.take(j, self.rank, GOSSIP)
            if got is not None:
                header, data = got
                messages.append((data, float(header[0])))
                self.counters.age_s += max(0.0, time.time() - float(header[2]))
                self.counters.aged += 1
                if j not in self.draining:
                    self.staleness[j] = 0
                    self.last_heard[j] = time.monotonic()
            elif j in self.draining:
                self.draining.discard(j)  # nothing left from it
            elif j in ins:
                self.staleness[j] = self.staleness.get(j, 0) + 1
                silent = time.monotonic() - self.last_heard.setdefault(j, time.monotonic())
                if silent > self.s.peer_timeout_s:  # asynchronous learners never wait: notice silence
                    self._peer_timed_out(j, "to send a message", silent, self.membership.silent_for(j))
        self.counters.mixed += len(messages)
        if self.s.mixing == "push_sum":
            params, self.weight = mixing.push_sum_mix(params, self.weight, messages)
            return params
        return mixing.uniform_mix(params, messages)

    # -- waiting and failures -------------------------------------------------------------------

    def _wait(self, condition, peer: int, what: str) -> bool:
        """Wait for ``condition`` up to peer_timeout_s; False when the peer is gone (dropped)."""
        start = time.monotonic()
        self.counters.waits += 1
        pause = 1e-5
        self.membership.silent_for(peer)  # start watching its beat
        try:
            while True:
                if condition():
                    return True
                if peer not in self.membership.alive:
                    return False
                waited = time.monotonic() - start
                if waited > self.s.peer_timeout_s:
                    silent = self.membership.silent_for(peer) if waited < _WAIT_CAP * self.s.peer_timeout_s else waited
                    if self._peer_timed_out(peer, what, waited, silent):
                        return False
                self.membership.beat()
                self._membership()
                time.sleep(pause)
                pause = min(pause * 2, 2e-3)
        finally:
            self.counters.wait_s += time.monotonic() - start

    def _peer_timed_out(self, peer: int, what: str, waited: float, silent: float) -> bool:
        """``peer`` kept this learner waiting ``waited`` s and its beat has not moved for ``silent``
        s: drop it (True), stop the run (raise), or, while it still beats, keep waiting (False)."""
        self.membership.refresh(force=True)
        if peer not in self.membership.alive:
            self._forget(peer, self.membership.reasons.get(peer, "left"))
            return True
        if silent <= self.s.peer_timeout_s:
            return False
        reason = (f"learner {peer} did not answer for {waited:.0f} s (waiting for it {what}; "
                  f"communication.options.peer_timeout_s={self.s.peer_timeout_s:g})")
        if self.s.on_peer_failure == "stop":
            self.membership.stop_run(reason + "; the run stops (on_peer_failure=stop)")
            raise PeerFailure(reason)
        self.membership.declare_gone(peer, "failed: " + reason)
        self.membership.refresh(force=True)
        self._forget(peer, "failed: " + reason)
        return True

    def _membership(self) -> None:
        for r, reason in self.membership.refresh():
            self._forget(r, reason)
        back, self.membership.rejoined = self.membership.rejoined, []
        for r in back:
            self._take_back(r)

    def _take_back(self, peer: int) -> None:
        """A learner that died and was restarted is in the graph again: the graph is rebuilt over
        the live learners (it has its place back) and it is waited for and mixed as before."""
        self.draining.discard(peer)
        self.staleness.pop(peer, None)
        self.send_skips.pop(peer, None)
        self.last_heard.pop(peer, None)
        if peer in self.counters.dropped:
            self.counters.dropped.remove(peer)
        self.counters.rejoined += 1
        self.log(f"gossip: learner {self.rank} took learner {peer} back into the graph; "
                 f"live learners: {self.membership.alive}")

    def _forget(self, peer: int, reason: str) -> None:
        self.draining.add(peer)
        self.last_heard.pop(peer, None)
        if peer in self.membership.alive:
            self.membership.alive.remove(peer)
        self.staleness.pop(peer, None)
        self.send_skips.pop(peer, None)
        if peer not in self.counters.dropped:
            self.counters.dropped.append(peer)
            self.log(f"gossip: learner {self.rank} dropped learner {peer} from the graph ({reason}); "
                     f"live learners: {self.membership.alive}")

    # -- snapshots for the consensus distance ---------------------------------------------------

    def send_snapshot(self, params: torch.Tensor, header: torch.Tensor, to: int = 0) -> bool:
        if to not in self.membership.alive or not self.transport.ready(self.rank, to, SNAPSHOT):
            return False
        self.transport.send(self.rank, to, SNAPSHOT, header, params)
        return True

    def take_snapshots(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        out = {}
        for r in self.membership.alive:
            if r != self.rank:
                got = self.transport.take(r, self.rank, SNAPSHOT)
                if got is not None:
                    out[r] = got
        return out

    def leave(self, reason: str = "finished", flush_s: float = 10.0) -> None:
        """Leave the graph; with a transport whose messages die with their sender, first give the
        receivers up to ``flush_s`` to take what this learner sent (they mix it even after it left)."""
        self.membership.declare_gone(self.rank, reason)
        flush = getattr(self.transport, "flush", None)
        if flush is not None:
            def alive(peer: int) -> bool:
                self.membership.refresh()
                return peer in self.membership.alive

            flush(alive, min(flush_s, self.s.peer_timeout_s))


def consensus_distances(vectors: dict[int, torch.Tensor]) -> dict[int, float]:
    """Each learner's L2 distance from the average of all learners' parameter vectors."""
    if not vectors:
        return {}
    mean = torch.stack(list(vectors.values())).double().mean(0)
    return {r: float(torch.linalg.vector_norm(v.double() - mean)) for r, v in vectors.items()}
