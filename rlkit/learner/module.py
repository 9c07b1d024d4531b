"""ActorCriticModule: the Lightning learner. Policy/value network, A2C loss, optimizer; the run
hooks are called from its training step at the points where the protocols differ."""

from __future__ import annotations

import collections
import math
import sys
import time
from typing import Any, Iterator

import lightning.pytorch as pl
import torch
from gymnasium import spaces

from rlkit.config.schema import RunConfig
from rlkit.hooks.batch import Batch
from rlkit.hooks.layout import Topology
from rlkit.hooks.protocols import RolloutSource
from rlkit.infra import upstream
from rlkit.infra.errors import RunFailed
from rlkit.infra.files import AppendOnlyCSV
from rlkit.infra.startup import end_startup
from rlkit.learner import rng
from rlkit.learner.envs import is_atari
from rlkit.learner.group import LearnerGroup, total_agent_steps
from rlkit.learner.losses import (
    a2c_loss,
    explained_variance,
    normalize,
    returns_and_advantages,
    update_size,
)
from rlkit.learner.models import ActorCritic
from rlkit.learner.optim import make_optimizer

MAX_NONFINITE_IN_A_ROW = 100


class ActorCriticModule(pl.LightningModule):
    def __init__(self, recipe: RunConfig, obs_space: spaces.Space, action_space: spaces.Space,
                 hooks: Any = None, recipe_dict: dict | None = None):
        super().__init__()
        self.recipe = recipe
        self.hooks = hooks
        self.automatic_optimization = False
        if recipe_dict is not None:
            self.save_hyperparameters({"recipe": recipe_dict}, logger=False)
        bf16 = recipe.trainer.precision == "bf16-mixed"
        self.model = ActorCritic(obs_space, action_space, recipe.model, torch.bfloat16 if bf16 else None)
        self.frames_per_step = recipe.env.atari.frameskip if is_atari(recipe.env.id) else 1
        self.agent_steps = 0  # this learner's
        self.nonfinite_skipped = self.nonfinite_in_a_row = 0
        self.nonfinite_scores = 0  # games whose score was NaN/inf (an env's reward): left out of every mean
        self._resumed_at = 0  # the update a resumed run continues from
        self.learner_finals: dict[int, dict] = {}  # learner 0 of independent learners: every learner's end
        self.recent_scores: collections.deque = collections.deque(maxlen=recipe.algo.score_window)
        self._source: Any = None
        self._window = _Window()
        self.stop_reason: str | None = None  # this learner's request to stop the run (request_stop)
        self._peer_stop = False  # synchronous learners: another learner asked, seen in the shared scores
        self.learner_started = False  # rlkit_learner_start has run (and rlkit_learner_end has not yet)
        self._own_log: LearnerLog | None = None  # csv/learner<r>.csv of a multi-learner run, once logged
        self._update_size: dict[str, float] | None = None  # the last logged update's size diagnostics
        self._last: tuple | None = None  # the last batch's values, returns, head and features (diagnostics)

    # -- what a plugin may read and do (rlkit.api.Learner) ------------------------------------

    @property
    def topology(self) -> Topology:
        return self.hooks.layout.topology if self.hooks is not None else Topology.SINGLE

    @property
    def observation_space(self) -> spaces.Space:
        return self.model.obs_space

    @property
    def action_space(self) -> spaces.Space:
        return self.model.action_space

    @property
    def discrete(self) -> bool:
        return self.model.discrete

    def request_stop(self, reason: str) -> None:
        """Stop the run after this update, as a stop_at_score would: every learner stops
        (synchronous ones after the same update; independent ones within about a second, told
        through the run's store). The reason is printed once, by the learner that asks."""
        if self.stop_reason is None:
            self.stop_reason = reason
            print(f"rlkit: learner {self.global_rank} stops the run: {reason}", file=sys.stderr, flush=True)
        if self.group.announce_stop():
            self.trainer.should_stop = True

    @property
    def stop_requested(self) -> bool:
        """True once this learner knows the run is stopping at its end of this update (its own
        request or target, or another learner's)."""
        return bool(self.trainer.should_stop)

    @property
    def interrupted(self) -> bool:
        """Training is ending by Ctrl-C or SIGTERM (a checkpoint is being written to resume from)."""
        return bool(self.trainer.interrupted)

    def lost_peers(self) -> str:
        """After a failed collective: which learner processes have exited, in words."""
        return self.group.lost_peers()

    @property
    def group(self) -> LearnerGroup:
        """The run's learners, as this learner sees them (its Lightning strategy)."""
        return self.trainer.strategy

    # -- data ---------------------------------------------------------------------------------

    def env_seed(self) -> int:
        """Per learner; a resumed run's envs get new seeds (they restart, and should not replay the
        episodes the run began with)."""
        return self.recipe.seed + 10_000 * self.global_rank + 7_919 * self._resumed_at

    def setup(self, stage: str) -> None:
        # Every process built the same initial model from recipe.seed; from here each learner
        # samples its own actions (learner 0 keeps the stream it had).
        if self.global_rank > 0:
            torch.manual_seed(self.env_seed())

    def train_dataloader(self):
        self._source = self.hooks.make_rollout_source(self)
        return self._source

    def on_train_start(self) -> None:
        end_startup()  # set-up is done: freeze its heap, collect again (rlkit/infra/startup.py)
        self._window = _Window()  # throughput counts from here, not from construction
        if self.hooks is not None:
            self.hooks.learner_start(self)
            self.learner_started = True
        self.group.training_started()

    def teardown(self, stage: str) -> None:
        if self.learner_started:
            self.learner_started = False
            self.group.publish_final(self.final_summary())
            self.hooks.learner_end(self)
            if self.global_rank == 0:  # the communicator has waited for the others
                self.learner_finals = self.group.gather_finals()
        own_log, self._own_log = self._own_log, None
        if own_log is not None:
            own_log.close()
        source, self._source = self._source, None
        if isinstance(source, RolloutSource):  # any iterable may be one; the protocol's have close()
            source.close()

    # -- optimisation -------------------------------------------------------------------------

    def configure_optimizers(self):
        a = self.recipe.algo
        opt = make_optimizer(self.parameters(), a)
        total = self.recipe.updates_per_learner()
        if a.lr_schedule == "linear":
            schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: max(0.0, 1.0 - u / total))
        else:
            schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def training_step(self, dataloader_iter: Iterator[tuple[Batch, int, int]]):
        # Taking the iterator (not a batch) stops Lightning from prefetching: each rollout is
        # collected with the parameters of the previous update, as A2C requires.
        batch, _, _ = next(dataloader_iter)
        losses = self.compute_loss(batch)
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        self.manual_backward(losses.total)
        self.hooks.sync_gradients(self)
        grad_norm = self._clip_gradients()
        if not self._finite(losses.total, grad_norm, batch):
            self._account(batch)  # the env steps happened; the update did not
            return
        logged = (self.global_step + 1) % self.recipe.trainer.log_every_n_updates == 0 or self.global_step == 0
        params = [p for p in self.parameters() if p.grad is not None] if logged else []
        before, lr = [p.detach().clone() for p in params], opt.param_groups[0]["lr"]
        opt.step()
        self._update_size = update_size(before, params, lr) if logged else None
        self.lr_schedulers().step()
        update = self.global_step
        self.hooks.after_optimizer_step(self, update)
        self._account(batch)
        if update % self.recipe.trainer.log_every_n_updates == 0 or update == 1:
            self._log_metrics(losses, grad_norm)
        self._maybe_stop()

    def _finite(self, loss: torch.Tensor, grad_norm: torch.Tensor, batch: Batch) -> bool:
        """False (after stopping or counting a skip, per ``algo.on_nonfinite``) when the loss or the
        gradient norm is NaN/inf. Checked after the gradient exchange, so learners that share
        gradients see the same norm and decide alike; the parameters are untouched either way. The
        message says whether the rollout itself (the env's rewards or observations) held the NaN."""
        if bool(torch.isfinite(loss) & torch.isfinite(grad_norm)):
            self.nonfinite_in_a_row = 0
            return True
        self.nonfinite_skipped += 1
        self.nonfinite_in_a_row += 1
        what = f"loss {loss.item()}, gradient norm {grad_norm.item()} at update {self.global_step + 1}"
        what += nonfinite_inputs(batch)
        if self.recipe.algo.on_nonfinite == "stop" or self.nonfinite_in_a_row >= MAX_NONFINITE_IN_A_ROW:
            why = ("" if self.recipe.algo.on_nonfinite == "stop"
                   else f"{MAX_NONFINITE_IN_A_ROW} non-finite updates in a row; last: ")
            raise RunFailed(f"learner {self.global_rank}: {why}{what}; the parameters were not updated and the "
                            "last good checkpoint is kept (algo.on_nonfinite=skip skips such updates)")
        if self.nonfinite_in_a_row == 1:
            print(f"rlkit: learner {self.global_rank}: skipped an update ({what})", file=sys.stderr, flush=True)
        return False

    def compute_loss(self, batch: Batch):
        """A forward pass with gradients over the T*N observations s_0..s_{T-1}, and one without over
        the N observations s_T for the bootstrap value. Acting needs no values, so the rollout does
        one forward pass per step and none for the bootstrap. (Backward over s_T in one pass over
        all T+1 would cost more than the no-grad pass saves: docs/benchmarks.md.)"""
        a = self.recipe.algo
        T, N = batch.rewards.shape
        obs = batch.obs
        head, values, features = self.model.forward_with_features(obs[:T].reshape(T * N, *obs.shape[2:]))
        with torch.no_grad():
            _, last_value = self.model(obs[T])
        flat_actions = batch.actions.reshape(T * N, *batch.actions.shape[2:])
        ev = self.model.evaluate_head(head, values, flat_actions, a.log_prob_floor)
        detached = values.detach().reshape(T, N)
        returns, advantages = returns_and_advantages(batch.rewards, detached, batch.dones, last_value,
                                                     a.gamma, a.gae_lambda)
        # kept (no copies) for the diagnostics logged at the log interval
        self._last = (detached, returns, head.detach(), features.detach())
        if a.normalize_advantages:
            advantages = normalize(advantages)
        return a2c_loss(ev.log_probs, ev.entropy, ev.values, returns.reshape(-1),
                        advantages.reshape(-1), a.value_coef, a.entropy_coef, a.loss_reduction)

    def diagnostics(self) -> dict[str, float]:
        """What tells a stuck critic from a stuck policy, on the last update's batch:
        ``value/explained_variance`` (about 0 while the critic ignores the screen),
        ``value/mean`` and ``value/return_mean`` (the critic's scale against its targets) and, for
        discrete actions, ``policy/max_prob`` (1/A for a uniform policy, near 1 for a greedy one);
        ``model/dead_units``: the fraction of the body's last hidden units that are 0 on every
        observation of the batch (1.0 is a network whose outputs no longer depend on the state).
        All are read off the training pass (the parameters the update started from): no second
        forward pass."""
        if self._last is None:
            return {}
        values, returns, head, features = self._last
        out_dead = float((features.max(0).values <= 0).float().mean())
        out = {"value/explained_variance": explained_variance(values.reshape(-1), returns.reshape(-1)),
               "value/mean": values.mean().item(), "value/return_mean": returns.mean().item(),
               "model/dead_units": out_dead}
        if self.model.discrete:
            out["policy/max_prob"] = torch.softmax(head.float(), -1).max(-1).values.mean().item()
        return out

    def _clip_gradients(self) -> torch.Tensor:
        """The pre-clip norm, left on the device: it is read only at the log interval."""
        max_norm = self.recipe.algo.max_grad_norm
        params = [p for p in self.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm else math.inf)

    # -- bookkeeping --------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if upstream.has_trainer(self) else 1

    def total_agent_steps(self) -> int:
        """Agent steps summed over learners, by the run's one rule (:func:`total_agent_steps`);
        learner 0's after the end, once it has every learner's numbers."""
        return total_agent_steps(self.agent_steps, self.recipe.placement.learners, self.learner_finals)

    def final_summary(self) -> dict:
        """This learner's end-of-run numbers: agent steps and its score window."""
        return {"agent_steps": self.agent_steps, "scores": list(self.recent_scores),
                "window": self.recent_scores.maxlen, "updates": int(self.global_step)}

    def _account(self, batch: Batch) -> None:
        self.agent_steps += batch.steps
        scores, lengths = self._episodes(batch)
        if not all(math.isfinite(s) for s in scores):  # a NaN reward (on_nonfinite=skip): that game has no score
            kept = [(s, n) for s, n in zip(scores, lengths) if math.isfinite(s)]
            self.nonfinite_scores += len(scores) - len(kept)
            scores, lengths = [s for s, _ in kept], [n for _, n in kept]
        self.recent_scores.extend(scores)
        self._window.add(batch.steps, scores, lengths)

    def _episodes(self, batch: Batch) -> tuple[list[float], list[float]]:
        """The episodes (raw score, length) that ended in this update: every learner's when the
        learners step together (one score window, one stop decision, one run log), this learner's
        own otherwise (:meth:`LearnerGroup.share_episodes`)."""
        capacity = batch.rewards.numel()  # at most one episode end per agent step
        scores, lengths, peer_stop = self.group.share_episodes(batch.scores, batch.lengths, self.stop_reason is not None,
                                                               capacity)
        self._peer_stop = self._peer_stop or peer_stop
        return scores, lengths

    def _log_metrics(self, losses, grad_norm: torch.Tensor) -> None:
        steps = self.total_agent_steps()
        metrics = {
            "agent_steps": float(steps), "frames": float(steps * self.frames_per_step),
            "loss/total": losses.total.item(), "loss/policy": losses.policy.item(),
            "loss/value": losses.value.item(), "loss/entropy": losses.entropy.item(),
            "grad_norm": grad_norm.item(), "lr": self.optimizers().param_groups[0]["lr"],
        }
        metrics.update(self.diagnostics())
        metrics.update(self._update_size or {})
        if self.nonfinite_skipped:
            metrics["nonfinite/skipped"] = float(self.nonfinite_skipped)
        if self.nonfinite_scores:
            metrics["nonfinite/scores"] = float(self.nonfinite_scores)
        metrics.update(self._window.flush(self.recipe.placement.learners, self.frames_per_step))
        if self.recent_scores:
            metrics["score_mean"] = sum(self.recent_scores) / len(self.recent_scores)
        metrics.update(self.hooks.metrics(self))
        if self.world_size > 1 and self.hooks is not None:
            self._learner_log().write(self.global_step, {k: metrics[k] for k in LEARNER_COLUMNS if k in metrics}
                                      | {"learner_agent_steps": float(self.agent_steps)})
        # Straight to the loggers at the log interval: self.log would repeat stale values every step.
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
            logger.save()
        bar = {"agent_steps": steps, "sps": metrics["sps"], "score": metrics.get("score_mean", float("nan"))}
        self.log_dict(bar, on_step=True, prog_bar=True, logger=False, batch_size=1)

    def _learner_log(self) -> "LearnerLog":
        if self._own_log is None:
            path = self.hooks.run.run_dir / "csv" / f"learner{self.global_rank}.csv"
            self._own_log = LearnerLog(path, keep_up_to=self._resumed_at)
        return self._own_log

    def _maybe_stop(self) -> None:
        """The run-wide stop after this update. Synchronous learners share one score window and
        every learner's stop request (both travel in the score all-gather), so each decides the
        same; an independent learner says its own stop through the store and looks, at most every
        quarter second, whether another has, without waiting for anyone."""
        target = self.recipe.algo.stop_at_score
        full = len(self.recent_scores) == self.recent_scores.maxlen
        reached = target is not None and full and sum(self.recent_scores) / len(self.recent_scores) >= target
        stop = reached or self.stop_reason is not None or self._peer_stop
        if self.group.any_learner_stops(stop):
            self.trainer.should_stop = True

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rlkit"] = {"learner": self.global_rank, "agent_steps": self.agent_steps,
                               "recent_scores": list(self.recent_scores), "rng": rng.capture(),
                               "nonfinite_skipped": self.nonfinite_skipped, "nonfinite_scores": self.nonfinite_scores,
                               "plugins": self.hooks.state_dict(self) if self.hooks else {}}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("rlkit", {})
        self.agent_steps = int(state.get("agent_steps", 0))
        self.recent_scores.clear()
        self.recent_scores.extend(state.get("recent_scores", []))
        self.nonfinite_skipped = int(state.get("nonfinite_skipped", 0))
        self.nonfinite_scores = int(state.get("nonfinite_scores", 0))
        self._resumed_at = int(checkpoint.get("global_step", 0))
        if "rng" in state and state.get("learner", 0) == self.global_rank:
            rng.restore(state["rng"])
        else:  # another learner's checkpoint: not its random stream
            torch.manual_seed(self.env_seed())
        if self.hooks:
            self.hooks.load_state_dict(self, state.get("plugins", {}))


# What every learner of a multi-learner run writes to csv/learner<r>.csv at the log interval (the
# loggers see rank 0's numbers only): enough to tell, per learner, a stuck critic from a stuck policy.
LEARNER_COLUMNS = ("agent_steps", "loss/value", "loss/entropy", "loss/policy", "grad_norm", "value/explained_variance",
                   "value/mean", "value/return_mean", "policy/max_prob", "model/dead_units", "optim/update_ratio",
                   "optim/step_per_lr", "score_mean", "sps")


class LearnerLog:
    """One learner's own CSV: a row per log interval, appended when logged. A resumed run keeps
    the rows up to the update it resumed from (later ones are redone); see :class:`AppendOnlyCSV`."""

    def __init__(self, path, keep_up_to: int = 0):
        self._file = AppendOnlyCSV(path, keep_up_to=keep_up_to or None, fields=[*LEARNER_COLUMNS, "learner_agent_steps"])

    def write(self, step: int, row: dict[str, float]) -> None:
        self._file.write({"step": step, **row})

    def close(self) -> None:
        self._file.close()


class _Window:
    """Throughput and episode statistics since the last log."""

    def __init__(self):
        self.start = time.perf_counter()
        self.steps, self.scores, self.lengths = 0, [], []

    def add(self, steps: int, scores: list[float], lengths: list[float]) -> None:
        self.steps += steps
        self.scores += scores
        self.lengths += lengths

    def flush(self, learners: int, frames_per_step: int) -> dict[str, float]:
        now = time.perf_counter()
        sps = self.steps * learners / max(now - self.start, 1e-9)
        out = {"sps": sps, "fps": sps * frames_per_step}
        if self.scores:
            out["episode/score"] = sum(self.scores) / len(self.scores)
            out["episode/length"] = sum(self.lengths) / len(self.lengths)
            out["episode/count"] = float(len(self.scores))
        self.start, self.steps, self.scores, self.lengths = now, 0, [], []
        return out


def nonfinite_inputs(batch: Batch) -> str:
    """Where a non-finite loss came from when it is the rollout itself (a broken env, a reward
    function that divides by zero): the first NaN/inf in the rewards or the observations, as a
    clause of the message; "" when both are finite (the network or the optimizer then made it)."""
    for name, values in (("rewards", batch.rewards), ("observations", batch.obs)):
        if not values.is_floating_point():
            continue
        bad = ~torch.isfinite(values)
        if bool(bad.any()):
            step, env = (int(i) for i in bad.nonzero()[0][:2])
            return (f"; the rollout's {name} hold {int(bad.sum())} non-finite value(s), the first from env {env} at "
                    f"step {step} of the rollout (the env produced them)")
    return ""
