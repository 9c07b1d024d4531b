"""The plugin authors' test kit: what a communicator's tests import from rlkit, beside rlkit.api.

docs/writing-a-plugin.md ("Testing a plugin") documents every name and setting. A plugin's test
module subclasses :class:`CommunicatorConformance`, sets ``communicator`` (and the settings its
docstring lists), and pytest collects the inherited tests; :class:`HookRecorder` pins the order of
the hooks the core calls, with their arguments; the run fixtures start, watch and check runs.
"""

from rlkit.testing.conformance import CommunicatorConformance, learner_pid
from rlkit.testing.recorder import HookCall, HookRecorder, RecordingPlugin
from rlkit.testing.runs import (
    QUICK_RECIPE,
    WatchedRun,
    assert_checkpoint_of_a_trained_learner,
    assert_no_leak,
    child_pids,
    check_options,
    configure_run,
    learner_model,
    load_recipe,
    make_run,
    metric_column,
    plugin_env,
    plugin_manager,
    processes_of_run,
    quick_overrides,
    read_wandb_history,
    snapshot_tree,
    torchrun_nodes,
    wait_for_log_rows,
)

__all__ = [
    "learner_pid",
    "CommunicatorConformance", "HookCall", "HookRecorder", "RecordingPlugin", "QUICK_RECIPE", "WatchedRun",
    "assert_checkpoint_of_a_trained_learner", "assert_no_leak", "check_options", "child_pids", "configure_run",
    "learner_model", "load_recipe", "make_run", "metric_column", "plugin_env", "plugin_manager", "processes_of_run",
    "quick_overrides", "read_wandb_history", "snapshot_tree", "torchrun_nodes", "wait_for_log_rows",
]
