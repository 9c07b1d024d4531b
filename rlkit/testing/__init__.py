"""Helpers for testing rlkit and its plugins: a hook recorder and a conformance test class.

A plugin's test module subclasses :class:`CommunicatorConformance`, sets ``communicator`` (and,
if needed, ``overrides``), and pytest collects the inherited tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rlkit.hooks.records import hookimpl
from rlkit.infra.processes import child_pids, processes_of_run, snapshot_tree, start_time, still_alive  # noqa: F401  (re-exported)

def plugin_env(directory: Path, module: str, source: str, **env: str) -> dict[str, str]:
    """The environment of a CLI run in which ``source`` is an installed rlkit plugin: it is written
    as ``<module>.py`` with a ``*.dist-info`` carrying its ``[rlkit]`` entry point into
    ``directory/site``, which goes first on PYTHONPATH, so every learner process finds it the way it
    finds a pip-installed plugin. ``env`` adds variables (e.g. where the plugin writes)."""
    import os
    import textwrap

    site = Path(directory) / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    dist = module.replace("_", "-")
    info = site / f"{module}-0.0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[rlkit]\n{dist} = {module}\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **env)


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
    from rlkit.hooks.manager import build_plugin_manager
    from rlkit.config.recipes import build_config, validate_options
    from rlkit.training.runhooks import RunHooks
    from rlkit.config.runtime import Run

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


class WatchedRun:
    """A CLI run in a subprocess whose process tree is recorded while it runs (every
    ``period_s``), so a leak check also sees forked env workers and processes that were re-parented
    or left the run's environment."""

    def __init__(self, args: list[str], cwd: Path, env: dict | None = None, period_s: float = 0.25):
        import os
        import subprocess
        import sys
        import threading

        import tempfile

        # output goes to files, not pipes: a process the run leaks may hold them open for ever
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", *args], stdout=self._out,
                                     stderr=self._err, text=True, cwd=cwd,
                                     env=dict(os.environ, WANDB_MODE="offline", **(env or {})))
        self.tree: dict[int, int] = {}
        self._period_s = period_s
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        import time

        while self.proc.poll() is None:
            self.tree.update(snapshot_tree(self.proc.pid))
            time.sleep(self._period_s)

    def communicate(self, timeout: float = 600.0) -> tuple[str, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self._watcher.join(5)
        out = []
        for fh in (self._out, self._err):
            fh.seek(0)
            out.append(fh.read())
            fh.close()
        return out[0], out[1]


def assert_no_leak(tree: dict[int, int], run_dir: Path, within_s: float = 10.0) -> None:
    """No process of the run (recorded in ``tree``, or carrying its RLKIT_RUN_DIR) is alive
    ``within_s`` seconds from now."""
    import time

    deadline = time.monotonic() + within_s
    while (still_alive(tree) or processes_of_run(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = sorted(set(still_alive(tree)) | set(processes_of_run(run_dir)))
    assert not left, f"processes of the run outlived it by {within_s:g} s: {left} ({_cmdlines(left)})"


def _cmdlines(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80])
        except OSError:
            out.append("?")
    return "; ".join(out)


def assert_checkpoint_of_a_trained_learner(path: Path, learner: int = 0) -> dict:
    """A checkpoint that Lightning can resume from: this learner's, after some training."""
    from rlkit.training.checkpoints import load_checkpoint

    state = load_checkpoint(path)
    assert state["global_step"] > 0 and state["rlkit"]["agent_steps"] > 0, (path, state["global_step"])
    assert state["rlkit"]["learner"] == learner, path
    assert state["state_dict"] and state["optimizer_states"], path
    return state


class CommunicatorConformance:
    """What every communicator must do, built-in or third-party. Subclass it in a test module, set
    ``communicator`` and describe the run with the attributes below; pytest collects the tests.

    * ``recipe`` / ``overrides``: a short CPU run of the communicator (CartPole by default).
    * ``learners``: learner processes the run has; ``independent_checkpoints``: learner r > 0
      writes its own ``checkpoints/learner<r>/`` (the independent topology);
      ``own_optimizer_state``: synchronous learner r > 0 writes its optimizer state there
      (``LearnerLayout.own_optimizer_state``), at the same update as learner 0's checkpoint.
    * ``in_process``: False for communicators that launch learner processes (Lightning re-runs
      the CLI there), which the in-process run test cannot host.
    * ``learner_killed``: what SIGKILL of a launched learner does: ``"fails"`` (one line naming
      it, exit code 1), ``"continues"`` (the others finish, exit code 0) or None (not tested);
      ``kill_overrides`` for that run (a shorter peer timeout).
    * ``env``: extra environment for the CLI runs (e.g. PYTHONPATH of a plugin under test).
    * ``check_run(result)``: protocol-specific checks on a finished run, called for every run the
      suite completes (in-process and CLI); ``result`` has ``run_dir`` and result.json's fields.
    """

    communicator: str = ""
    recipe: str = QUICK_RECIPE
    overrides: tuple[str, ...] = ()
    in_process: bool = True
    learners: int = 1
    independent_checkpoints: bool = False
    own_optimizer_state: bool = False
    learner_killed: str | None = None
    kill_overrides: tuple[str, ...] = ()  # e.g. a shorter peer timeout for the kill test
    env: dict = {}

    def _args(self, tmp_path: Path, steps: int = 2000) -> list[str]:
        return [f"communication.name={self.communicator}", *quick_overrides(tmp_path, steps), *self.overrides]

    def _cli(self, args: list[str], cwd: Path) -> WatchedRun:
        return WatchedRun(args, cwd, self.env)

    @staticmethod
    def _result(run_dir: Path) -> Any:
        import json
        from types import SimpleNamespace

        return SimpleNamespace(**{**json.loads((run_dir / "result.json").read_text()), "run_dir": run_dir})

    def check_run(self, result: Any) -> None:
        """Protocol-specific assertions on a finished short run; override in a subclass."""

    # -- registration and options ---------------------------------------------------------------

    def test_discovered_through_entry_points(self):
        from rlkit.hooks.manager import build_plugin_manager

        spec = build_plugin_manager().communicator(self.communicator)
        assert spec.name == self.communicator and spec.summary

    def test_default_options_validate(self):
        from rlkit.hooks.manager import build_plugin_manager
        from rlkit.config.recipes import validate_options

        spec = build_plugin_manager().communicator(self.communicator)
        options = validate_options(spec.options_schema, {}, "communication.options")
        assert dataclasses.is_dataclass(options)

    def test_unknown_option_is_refused(self):
        import pytest

        from rlkit.infra.errors import UserError
        from rlkit.hooks.manager import build_plugin_manager
        from rlkit.training.run import prepare

        with pytest.raises(UserError, match="communication.options.no_such_option"):
            prepare(self.recipe, [f"communication.name={self.communicator}", "communication.options.no_such_option=1",
                                  *self.overrides], build_plugin_manager())

    # -- runs -----------------------------------------------------------------------------------

    def test_cli_run_exits_cleanly_and_leaves_no_process(self, tmp_path):
        run = self._cli(["run", self.recipe, *self._args(tmp_path)], tmp_path)
        out, err = run.communicate()
        assert run.proc.returncode == 0, err[-3000:]
        run_dir = tmp_path / "conformance"
        result = self._result(run_dir)
        assert result.agent_steps >= 2000 and (run_dir / "checkpoints" / "last.ckpt").is_file()
        assert out.count("agent steps") == 1, "one summary line per run, not per process"
        assert len(run.tree) >= self.learners, f"{self.learners} learner processes expected in {run.tree}"
        assert_no_leak(run.tree, run_dir)
        self.check_run(result)

    def test_short_run_trains_checkpoints_and_shuts_down(self, tmp_path):
        import pytest

        from rlkit.hooks.manager import build_plugin_manager
        from rlkit.training.run import train

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

    def test_ctrl_c_checkpoints_then_resume_finishes_and_no_process_is_left(self, tmp_path):
        """Ctrl-C (SIGINT to the process the user started): exit code 1, each learner's checkpoint
        written, every process gone within 10 s; then ``rlkit resume`` finishes the run from it."""
        import signal
        import time

        run_dir = tmp_path / "conformance"
        run = self._cli(["run", self.recipe, *self._args(tmp_path, 4_000_000), "algo.stop_at_score=null"], tmp_path)
        try:
            wait_for_log_rows(run_dir, 5)
            time.sleep(0.5)  # one more look at the tree while every process is up
            run.proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            _, err = run.communicate(timeout=120)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert run.proc.returncode == 1, err[-3000:]
        assert time.monotonic() - sent < 60, "the run took over a minute to stop after Ctrl-C"
        assert f"continue with: rlkit resume {run_dir}" in err, err[-3000:]
        ckpts = [run_dir / "checkpoints" / "interrupted.ckpt"]
        if self.independent_checkpoints:
            ckpts += [run_dir / "checkpoints" / f"learner{r}" / "interrupted.ckpt" for r in range(1, self.learners)]
        states = [assert_checkpoint_of_a_trained_learner(path, r) for r, path in enumerate(ckpts)]
        if self.own_optimizer_state:  # every learner stopped at learner 0's update and wrote its part
            import torch

            for r in range(1, self.learners):
                own = torch.load(run_dir / "checkpoints" / f"learner{r}" / "interrupted.ckpt", weights_only=True)
                assert own["global_step"] == states[0]["global_step"] and own["optimizer_states"], (r, own["global_step"])
        assert_no_leak(run.tree, run_dir)

        done = max(s["rlkit"]["agent_steps"] for s in states) * self.learners
        budget = done + 1000 * self.learners
        resumed = self._cli(["resume", str(run_dir), f"algo.total_steps={budget}"], tmp_path)
        _, err = resumed.communicate()
        assert resumed.proc.returncode == 0, err[-3000:]
        result = self._result(run_dir)
        assert result.updates > states[0]["global_step"], "the resumed run did not continue from the checkpoint"
        assert_no_leak(resumed.tree, run_dir)
        self.check_run(result)

    def test_killing_a_learner(self, tmp_path):
        """SIGKILL of a launched learner: the run fails with one line naming it, or the others
        finish, as the protocol says (``learner_killed``); no process is left either way."""
        import os
        import signal
        import pytest

        if self.learner_killed is None or self.learners < 2:
            pytest.skip("no launched learner to kill, or the protocol does not say what happens")
        run_dir = tmp_path / "conformance"
        run = self._cli(["run", self.recipe, *self._args(tmp_path, 40_000 * self.learners), "algo.stop_at_score=null",
                         *self.kill_overrides], tmp_path)
        try:
            wait_for_log_rows(run_dir, 5)
            launched = sorted(child_pids(run.proc.pid) & set(processes_of_run(run_dir)))
            learners = [p for p in launched if b"rlkit" in Path(f"/proc/{p}/cmdline").read_bytes()]
            assert learners, f"no launched learner among {launched}"
            os.kill(learners[0], signal.SIGKILL)
            _, err = run.communicate(timeout=240)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        if self.learner_killed == "fails":
            assert run.proc.returncode == 1, err[-3000:]
            failed = [line for line in err.splitlines() if line.startswith("rlkit: run failed:")]
            assert len(failed) == 1 and "learner" in failed[0], err[-3000:]
        else:
            assert run.proc.returncode == 0, err[-3000:]
            assert self._result(run_dir).updates > 0
        assert_no_leak(run.tree, run_dir)


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
