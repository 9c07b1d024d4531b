"""Helpers for testing rlkit and its plugins: a hook recorder and a conformance test class.

A plugin's test module subclasses :class:`CommunicatorConformance`, sets ``communicator`` (and,
if needed, ``overrides``), and pytest collects the inherited tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rlkit.plugin import hookimpl
from rlkit.processes import child_pids, processes_of_run, snapshot_tree, still_alive  # noqa: F401  (re-exported for tests)

QUICK_RECIPE = "a2c-cartpole-local"


class RecordingPlugin:
    """Records every run hook call, in order; answers none of them (defaults stay in force).

    Its hooks run first, so it sees firstresult hooks even when a later plugin answers them."""

    def __init__(self):
        self.calls: list[str] = []

    def _record(self, name: str) -> None:
        self.calls.append(name)

    @hookimpl(tryfirst=True)
    def rlkit_configure(self, run):
        self._record("rlkit_configure")

    @hookimpl(tryfirst=True)
    def rlkit_learner_layout(self, run):
        self._record("rlkit_learner_layout")

    @hookimpl(tryfirst=True)
    def rlkit_make_rollout_source(self, run, module):
        self._record("rlkit_make_rollout_source")

    @hookimpl(tryfirst=True)
    def rlkit_learner_start(self, run, module):
        self._record("rlkit_learner_start")

    @hookimpl(tryfirst=True)
    def rlkit_learner_end(self, run, module):
        self._record("rlkit_learner_end")

    @hookimpl(tryfirst=True)
    def rlkit_sync_gradients(self, run, module):
        self._record("rlkit_sync_gradients")

    @hookimpl(tryfirst=True)
    def rlkit_after_optimizer_step(self, run, module, update):
        self._record("rlkit_after_optimizer_step")

    @hookimpl(tryfirst=True)
    def rlkit_train_end(self, run, module):
        self._record("rlkit_train_end")

    @hookimpl(tryfirst=True)
    def rlkit_metrics(self, run, module):
        self._record("rlkit_metrics")
        return {}

    @hookimpl(tryfirst=True)
    def rlkit_state_dict(self, run, module):
        self._record("rlkit_state_dict")
        return {}

    @hookimpl(tryfirst=True)
    def rlkit_load_state_dict(self, run, module, state):
        self._record("rlkit_load_state_dict")

    @hookimpl(tryfirst=True)
    def rlkit_unconfigure(self, run, error):
        self._record("rlkit_unconfigure")

    def compressed(self) -> list[str]:
        """Calls with consecutive repeats of the same per-update pattern folded: handy to pin."""
        out: list[str] = []
        for name in self.calls:
            if not out or out[-1] != name:
                out.append(name)
        return out


def configure_run(plugin: Any, recipe: dict, overrides: list[str] | tuple[str, ...] = (),
                  run_dir: Path | str = ".") -> tuple[Any, Any]:
    """What the core does before anything is written, for a plugin's unit tests: register the
    plugin module, validate ``recipe`` (a dict, as in a YAML recipe) with ``overrides``, build the
    communicator, check the placement against its layout and call its ``rlkit_configure``.
    Returns (run, communicator); raises ``UserError`` where ``rlkit run`` would refuse."""
    from rlkit.manager import build_plugin_manager
    from rlkit.recipes import build_config, validate_options
    from rlkit.runhooks import RunHooks
    from rlkit.runtime import Run

    manager = build_plugin_manager(load_entry_points=False)
    manager.pm.register(plugin)
    cfg = build_config(recipe, list(overrides))
    spec = manager.communicator(cfg.communication.name)
    options = validate_options(spec.options_schema, cfg.communication.options, "communication.options")
    run = Run(cfg, options, Path(run_dir))
    communicator = spec.factory(options, cfg)
    manager.pm.register(communicator)
    RunHooks(manager, run).configure()
    return run, communicator


def wait_for_log_rows(run_dir: Path, rows: int, timeout_s: float = 120.0) -> None:
    """Wait until the run's CSV log holds more than ``rows`` lines (its learners are training)."""
    import time

    deadline = time.monotonic() + timeout_s
    metrics = Path(run_dir) / "csv" / "metrics.csv"
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) > rows:
            return
        time.sleep(0.5)


def torchrun_nodes(tmp_path: Path, recipe: str, nodes: int, per_node: int, overrides: list[str],
                   timeout_s: float = 300.0) -> list[tuple[int, str, str]]:
    """The documented multi-node launch, on one machine: one ``torchrun`` per node, all on
    127.0.0.1, each running ``rlkit run recipe``; returns (exit code, stdout, stderr) per node."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    procs = [subprocess.Popen([torchrun, "--nnodes", str(nodes), "--node_rank", str(rank), "--nproc_per_node",
                               str(per_node), "--master_addr", "127.0.0.1", "--master_port", str(port), "-m",
                               "rlkit.cli", "run", recipe, f"trainer.num_nodes={nodes}", f"trainer.devices={per_node}",
                               f"placement.learners={nodes * per_node}", *overrides],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env=dict(os.environ, WANDB_MODE="offline"))
             for rank in range(nodes)]
    outs = []
    try:
        for proc in procs:
            outs.append((*proc.communicate(timeout=timeout_s),))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outs)]


def quick_overrides(tmp_path: Path, steps: int = 2000) -> list[str]:
    return [f"algo.total_steps={steps}", "trainer.progress_bar=false", "logging.backends=[csv]",
            f"logging.root={tmp_path}", "logging.run_name=conformance", "trainer.log_every_n_updates=10"]


class CommunicatorConformance:
    """What every communicator must do. Subclass it in a test module and set ``communicator``."""

    communicator: str = ""
    recipe: str = QUICK_RECIPE
    overrides: tuple[str, ...] = ()
    in_process: bool = True  # False for communicators that launch learner processes (Lightning re-runs argv)

    def _args(self, tmp_path: Path) -> list[str]:
        return [f"communication.name={self.communicator}", *quick_overrides(tmp_path), *self.overrides]

    def test_discovered_through_entry_points(self):
        from rlkit.manager import build_plugin_manager

        spec = build_plugin_manager().communicator(self.communicator)
        assert spec.name == self.communicator and spec.summary

    def test_default_options_validate(self):
        from rlkit.manager import build_plugin_manager
        from rlkit.recipes import validate_options

        spec = build_plugin_manager().communicator(self.communicator)
        options = validate_options(spec.options_schema, {}, "communication.options")
        assert dataclasses.is_dataclass(options)

    def test_unknown_option_is_refused(self):
        import pytest

        from rlkit.errors import UserError
        from rlkit.run import prepare
        from rlkit.manager import build_plugin_manager

        with pytest.raises(UserError, match="communication.options.no_such_option"):
            prepare(self.recipe, [f"communication.name={self.communicator}", "communication.options.no_such_option=1",
                                  *self.overrides], build_plugin_manager())

    def test_cli_run_exits_cleanly_and_leaves_no_process(self, tmp_path):
        import json
        import subprocess
        import sys

        out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", self.recipe, *self._args(tmp_path)],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        run_dir = tmp_path / "conformance"
        result = json.loads((run_dir / "result.json").read_text())
        assert result["agent_steps"] >= 2000 and (run_dir / "checkpoints" / "last.ckpt").is_file()
        assert out.stdout.count("agent steps") == 1, "one summary line per run, not per process"
        assert processes_of_run(run_dir) == [], "processes of the run are still alive"

    def test_short_run_trains_checkpoints_and_shuts_down(self, tmp_path):
        import pytest

        from rlkit.manager import build_plugin_manager
        from rlkit.run import train

        if not self.in_process:
            pytest.skip("multi-process communicator: covered by the CLI run test")

        before = child_pids()
        recorder = RecordingPlugin()
        manager = build_plugin_manager()
        manager.pm.register(recorder, name="recorder")
        result = train(self.recipe, self._args(tmp_path), manager)
        assert result.agent_steps >= 2000 and result.updates > 0
        assert (result.run_dir / "checkpoints" / "last.ckpt").is_file()
        assert recorder.calls[:2] == ["rlkit_learner_layout", "rlkit_configure"]
        assert recorder.calls[-1] == "rlkit_unconfigure"
        assert child_pids() <= before, "the run left child processes behind"
        self.check_run(result)

    def check_run(self, result: Any) -> None:
        """Protocol-specific assertions on a finished short run; override in a subclass."""


def read_wandb_history(run_file: str | Path) -> list[dict[str, Any]]:
    """The history rows of an offline W&B run file (``run-<id>.wandb``).

    The file is a LevelDB-style log (32 KiB blocks; records of checksum, length, type) after a
    7-byte ``:W&B`` header, holding serialized ``wandb_internal_pb2.Record`` messages.
    """
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(run_file).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{run_file}: not a W&B run file")
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the rest of a block too small for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows
