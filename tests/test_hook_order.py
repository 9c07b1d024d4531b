"""The exact order of the run hooks, with their arguments, pinned by rlkit.testing.HookRecorder:
a fresh fit and its resume here; a multi-learner run's in tests/test_hook_order_learners.py."""

from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.testing import HookRecorder
from rlkit.training.run import resume, train

PER_UPDATE = ["rlkit_sync_gradients", "rlkit_after_optimizer_step"]


class Counter:
    """A stateful run-scoped plugin: counts updates and keeps the count in the checkpoint."""

    def __init__(self):
        self.updates = 0

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update):
        self.updates += 1

    @hookimpl
    def rlkit_state_dict(self, run, module):
        return {"counter": self.updates}


def _overrides(tmp_path):
    # 8 envs x 5 steps = 40 agent steps per update; metrics at updates 1, 2 and 4; a periodic
    # checkpoint every 2 updates (80 agent steps)
    return ["algo.total_steps=160", "trainer.log_every_n_updates=2", "trainer.progress_bar=false",
            "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=order", "checkpoint.every_steps=80"]


def test_hook_order_of_a_short_fit_then_of_its_resume(tmp_path):
    manager = build_plugin_manager()
    manager.pm.register(Counter(), name="counter")
    with HookRecorder(manager) as fresh:
        train("a2c-cartpole-local", _overrides(tmp_path), manager)
    assert fresh.names() == (
        ["rlkit_learner_layout", "rlkit_configure", "rlkit_make_rollout_source", "rlkit_learner_start"]
        + PER_UPDATE + ["rlkit_metrics"]                                  # update 1
        + PER_UPDATE + ["rlkit_metrics", "rlkit_state_dict"]              # update 2, checkpoint update-2
        + PER_UPDATE                                                      # update 3
        + PER_UPDATE + ["rlkit_metrics", "rlkit_state_dict"]              # update 4, checkpoint update-4
        + ["rlkit_train_end", "rlkit_state_dict"]                         # last.ckpt at the end of training
        + ["rlkit_learner_end", "rlkit_unconfigure"])
    assert [c["update"] for c in fresh.of("rlkit_after_optimizer_step")] == [1, 2, 3, 4]
    run = fresh.of("rlkit_configure")[0]["run"]
    assert all(c.kwargs["run"] is run for c in fresh.calls if "run" in c.kwargs)  # one Run object for the whole run
    assert fresh.of("rlkit_unconfigure") == [{"run": run, "error": None}]

    # Resumed: the plugins' state is loaded before the rollout source is made and the learner starts.
    manager = build_plugin_manager()
    with HookRecorder(manager) as resumed:
        resume(tmp_path / "order", ["algo.total_steps=240"], manager)
    assert resumed.names() == (
        ["rlkit_learner_layout", "rlkit_configure", "rlkit_load_state_dict", "rlkit_make_rollout_source",
         "rlkit_learner_start"]
        + PER_UPDATE + PER_UPDATE + ["rlkit_metrics", "rlkit_state_dict"]  # updates 5 and 6, checkpoint update-6
        + ["rlkit_train_end", "rlkit_state_dict", "rlkit_learner_end", "rlkit_unconfigure"])
    assert resumed.of("rlkit_load_state_dict")[0]["state"] == {"counter": 4}  # what last.ckpt kept
    assert [c["update"] for c in resumed.of("rlkit_after_optimizer_step")] == [5, 6]


def test_unconfigure_passes_only_the_arguments_an_implementation_names(tmp_path):
    """pluggy lets an implementation take a subset of the spec's arguments; unconfigure, which calls
    every implementation itself (so that one raising does not stop the others), must too."""
    from rlkit.config.runtime import Run
    from rlkit.hooks.records import hookimpl
    from rlkit.training.runhooks import RunHooks

    released = []

    class TakesRunOnly:
        @hookimpl
        def rlkit_unconfigure(self, run):
            released.append(("run", run))

    class TakesBoth:
        @hookimpl
        def rlkit_unconfigure(self, error, run):
            released.append(("both", run, error))

    manager = build_plugin_manager()
    manager.pm.register(TakesRunOnly(), name="run-only")
    manager.pm.register(TakesBoth(), name="both")
    run = object.__new__(Run)
    error = RuntimeError("x")
    RunHooks(manager, run).unconfigure(error)
    assert ("run", run) in released and ("both", run, error) in released
