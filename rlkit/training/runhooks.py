"""The one caller of the run hooks. Each method shows the fallback used when no plugin answers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Mapping

from rlkit.config.runtime import Run
from rlkit.hooks.layout import LearnerLayout
from rlkit.training.placement import build_strategy, check_placement

if TYPE_CHECKING:
    from rlkit.hooks.manager import RlkitPluginManager
    from rlkit.learner.module import ActorCriticModule


class RunHooks:
    def __init__(self, manager: "RlkitPluginManager", run: Run):
        self.hook = manager.hook
        self.run = run
        self._layout: LearnerLayout | None = None
        self.strategy: Any = None
        self._env_start: Any = None  # rlkit.learner.envs.EnvStart, until the rollout source takes it

    @property
    def layout(self) -> LearnerLayout:
        if self._layout is None:
            layout = self.hook.rlkit_learner_layout(run=self.run) or LearnerLayout()
            if not isinstance(layout, LearnerLayout):
                raise TypeError(f"rlkit_learner_layout returned {layout!r}; it must return an rlkit.api.LearnerLayout")
            self._layout = layout
        return self._layout

    def configure(self) -> None:
        """The placement is checked against the layout first, then the plugins' own checks run."""
        check_placement(self.layout, self.run.recipe)
        self.hook.rlkit_configure(run=self.run)

    def make_strategy(self) -> Any:
        self.strategy = build_strategy(self.layout, self.run.recipe)
        return self.strategy

    def wait_for_learners(self) -> None:
        """The launching process of independent learners, and of synchronous ones a signal stopped,
        waits a bounded time (``LearnerLayout.child_grace_s``) for the learners it started, and kills
        any left."""
        if not self.run.launcher or self.strategy is None:
            return
        for rank, code in self.strategy.wait_for_children():
            if code is None:
                print(f"rlkit: learner {rank} did not exit in time and was killed", file=sys.stderr)

    def start_envs(self) -> None:
        """Build the learner's Atari envs now and reset them in the background
        (:class:`rlkit.learner.envs.EnvStart`) where the default rollout source will take them: a new run of
        one learner in this process, and no plugin that makes its own rollout source."""
        from rlkit.learner.envs import EnvStart, is_atari

        cfg = self.run.recipe
        if (self.layout.multi or not self.run.launcher or not is_atari(cfg.env.id)
                or self.hook.rlkit_make_rollout_source.get_hookimpls()):
            return
        self._env_start = EnvStart(cfg.env, cfg.seed)

    def close_started_envs(self) -> None:
        """Close envs started early that no rollout source took (a run that failed before it)."""
        started, self._env_start = self._env_start, None
        if started is not None:
            started.close()

    def make_rollout_source(self, module: "ActorCriticModule") -> Any:
        started, self._env_start = self._env_start, None
        try:
            source = self.hook.rlkit_make_rollout_source(run=self.run, module=module)
            if source is None:
                from rlkit.learner.rollout import LocalRollout

                source = LocalRollout(self.run.recipe, module.model, module.device, module.env_seed(), started)
            return source
        finally:
            if started is not None:
                started.close()  # nothing to do where the source took the env

    def learner_start(self, module: "ActorCriticModule") -> None:
        self.hook.rlkit_learner_start(run=self.run, module=module)

    def learner_end(self, module: "ActorCriticModule") -> None:
        self.hook.rlkit_learner_end(run=self.run, module=module)

    def sync_gradients(self, module: "ActorCriticModule") -> bool:
        return self.hook.rlkit_sync_gradients(run=self.run, module=module) is not None

    def after_optimizer_step(self, module: "ActorCriticModule", update: int) -> None:
        self.hook.rlkit_after_optimizer_step(run=self.run, module=module, update=update)

    def train_end(self, module: "ActorCriticModule") -> None:
        self.hook.rlkit_train_end(run=self.run, module=module)

    def metrics(self, module: "ActorCriticModule") -> dict[str, float]:
        merged: dict[str, float] = {}
        for answer in reversed(self.hook.rlkit_metrics(run=self.run, module=module)):
            merged.update(answer or {})
        return merged

    def state_dict(self, module: "ActorCriticModule") -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for answer in reversed(self.hook.rlkit_state_dict(run=self.run, module=module)):
            merged.update(answer or {})
        return merged

    def load_state_dict(self, module: "ActorCriticModule", state: Mapping[str, Any]) -> None:
        self.hook.rlkit_load_state_dict(run=self.run, module=module, state=state)

    def learner_exit(self, rank: int, returncode: int, restarting: bool) -> None:
        """Every implementation runs, even when an earlier one raises (the supervisor goes on)."""
        for impl in reversed(self.hook.rlkit_learner_exit.get_hookimpls()):
            try:
                impl.function(**{name: {"run": self.run, "rank": rank, "returncode": returncode,
                                        "restarting": restarting}[name] for name in impl.argnames})
            except Exception as exc:
                print(f"rlkit: warning: {impl.plugin_name}.rlkit_learner_exit failed: {exc!r}", file=sys.stderr)

    def unconfigure(self, error: BaseException | None) -> None:
        """Every implementation runs, even when an earlier one raises."""
        given = {"run": self.run, "error": error}
        for impl in reversed(self.hook.rlkit_unconfigure.get_hookimpls()):
            try:
                # as pluggy calls it: only the arguments the implementation names
                impl.function(*[given[name] for name in impl.argnames])
            except Exception as exc:
                print(f"rlkit: warning: {impl.plugin_name}.rlkit_unconfigure failed: {exc!r}", file=sys.stderr)
