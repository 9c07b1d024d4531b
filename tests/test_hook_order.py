"""The exact order of run hooks in one short fit, pinned by a recording plugin."""

from rlkit.hooks.manager import build_plugin_manager
from rlkit.training.run import train
from rlkit.testing import RecordingPlugin

PER_UPDATE = ["rlkit_sync_gradients", "rlkit_after_optimizer_step"]


def test_hook_order_of_a_short_fit(tmp_path):
    recorder = RecordingPlugin()
    manager = build_plugin_manager()
    manager.pm.register(recorder, name="recorder")
    # 8 envs x 5 steps = 40 agent steps per update; 4 updates; metrics at updates 1 and 2, 4.
    train("a2c-cartpole-local", ["algo.total_steps=160", "trainer.log_every_n_updates=2",
                                 "trainer.progress_bar=false", "logging.backends=[csv]",
                                 f"logging.root={tmp_path}", "logging.run_name=order"], manager)
    expected = (["rlkit_learner_layout", "rlkit_configure", "rlkit_make_rollout_source",
                 "rlkit_learner_start"]
                + PER_UPDATE + ["rlkit_metrics"]          # update 1
                + PER_UPDATE + ["rlkit_metrics"]          # update 2
                + PER_UPDATE                              # update 3
                + PER_UPDATE + ["rlkit_metrics"]          # update 4
                + ["rlkit_train_end", "rlkit_state_dict"]  # last.ckpt at the end of training
                + ["rlkit_learner_end", "rlkit_unconfigure"])
    assert recorder.calls == expected


def test_unconfigure_passes_only_the_arguments_an_implementation_names(tmp_path):
    """pluggy lets an implementation take a subset of the spec's arguments; unconfigure, which calls
    every implementation itself (so that one raising does not stop the others), must too."""
    from rlkit.hooks.records import hookimpl
    from rlkit.training.runhooks import RunHooks
    from rlkit.config.runtime import Run

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
