"""Run fixtures for plugin tests: a plugin installed for a CLI run, what the core does before a run
(``configure_run``), short-run overrides, a CLI run whose process tree is watched, the leak check,
checkpoint and W&B-history readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.infra.processes import child_pids, processes_of_run, snapshot_tree, still_alive  # noqa: F401 (child_pids: kit)

QUICK_RECIPE = "a2c-cartpole-local"



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



def metric_column(run_dir: Path | str, key: str, log: str = "metrics.csv") -> list[float]:
    """Every logged value of ``key`` in a run's CSV log (``csv/<log>``: the run's, or a learner's own
    ``learner<r>.csv``), in order; rows without it are left out."""
    import csv

    with open(Path(run_dir) / "csv" / log, newline="") as fh:
        return [float(row[key]) for row in csv.DictReader(fh) if row.get(key)]


def load_recipe(name: str, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """A bundled recipe (by name) or a YAML file, with ``key=value`` overrides, validated as
    ``rlkit run`` validates it: the ``recipe`` a communicator's factory receives."""
    from rlkit.config.recipes import load_recipe as load

    return load(name, list(overrides))


def check_options(schema: type, options: dict) -> Any:
    """``options`` validated against a plugin's options dataclass as the core validates a recipe's
    ``communication.options`` (a ``UserError`` naming the key where it refuses them)."""
    from rlkit.config.recipes import validate_options

    return validate_options(schema, options, "communication.options")


def learner_model(recipe: Any) -> Any:
    """The model the core's learner builds for ``recipe`` (a loaded recipe, :func:`load_recipe`):
    what ``Learner.model`` is in a run, with its ``obs_space``, ``action_space``, ``discrete``,
    ``act(obs)`` and ``env_actions(actions)``; built without a run, for a plugin's own pieces."""
    from rlkit.learner.envs import env_spaces
    from rlkit.learner.models import ActorCritic

    obs_space, action_space = env_spaces(recipe.env)
    return ActorCritic(obs_space, action_space, recipe.model)


def make_run(recipe: dict, options: Any, run_dir: Path | str = ".", overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """The :class:`rlkit.api.Run` a plugin's hooks receive, for ``recipe`` (a dict, as in a YAML
    recipe, with ``overrides``) and validated ``options``, writing under ``run_dir``."""
    from rlkit.config.recipes import build_config
    from rlkit.config.runtime import Run

    return Run(build_config(recipe, list(overrides)), options, Path(run_dir))


def plugin_manager(*plugins: Any) -> Any:
    """A fresh plugin manager with only ``plugins`` registered (no installed entry points)."""
    from rlkit.hooks.manager import build_plugin_manager

    manager = build_plugin_manager(load_entry_points=False)
    for plugin in plugins:
        manager.pm.register(plugin)
    return manager


def configure_run(plugin: Any, recipe: dict, overrides: list[str] | tuple[str, ...] = (),
                  run_dir: Path | str = ".") -> tuple[Any, Any]:
    """What the core does before anything is written, for a plugin's unit tests: register the
    plugin module, validate ``recipe`` (a dict, as in a YAML recipe) with ``overrides``, build the
    communicator, check the placement against its layout and call its ``rlkit_configure``.
    Returns (run, communicator); raises ``UserError`` where ``rlkit run`` would refuse."""
    from rlkit.config.recipes import build_config, validate_options
    from rlkit.config.runtime import Run
    from rlkit.hooks.manager import build_plugin_manager
    from rlkit.training.runhooks import RunHooks

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
                   timeout_s: float = 300.0, max_restarts: int | None = None) -> list[tuple[int, str, str]]:
    """The documented multi-node launch, on one machine: one ``torchrun`` per node, all on
    127.0.0.1, each running ``rlkit run recipe``; returns (exit code, stdout, stderr) per
    node. ``max_restarts``: the elastic launch instead (c10d rendezvous, ``--max-restarts``; node
    ranks are handed out by the rendezvous). Nodes still running after ``timeout_s`` are killed
    (exit code -9) and their output returned, so a test can show where they were."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")

    def launch(rank: int) -> list[str]:
        if max_restarts is None:
            return ["--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port)]
        return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"rlkit-{port}",
                "--max-restarts", str(max_restarts)]

    procs = [subprocess.Popen([torchrun, "--nnodes", str(nodes), *launch(rank), "--nproc_per_node", str(per_node),
                               "-m", "rlkit.cli", "run", recipe, f"trainer.num_nodes={nodes}",
                               f"trainer.devices={per_node}", f"placement.learners={nodes * per_node}", *overrides],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env=dict(os.environ, WANDB_MODE="offline"), start_new_session=True)
             for rank in range(nodes)]

    def kill_all() -> None:  # each node's torchrun and its learners (a session of their own)
        import signal

        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    import time

    deadline = time.monotonic() + timeout_s
    outs = []
    try:
        for proc in procs:
            try:
                outs.append((*proc.communicate(timeout=max(1.0, deadline - time.monotonic())),))
            except subprocess.TimeoutExpired:  # past the deadline: every node is killed, its output kept
                kill_all()
                outs.append((*proc.communicate(),))
    finally:
        kill_all()
    # a node killed at the deadline ends with -9, and its stderr says how far it got
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
        import tempfile
        import threading

        # output goes to files, not pipes: a process the run leaks may hold them open for ever
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        # a suite started in the background (nohup, `&`) has SIGINT ignored, which the run would
        # inherit: its Ctrl-C tests would test nothing but fail; the run gets the default back
        self.proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", *args], stdout=self._out,
                                     stderr=self._err, text=True, cwd=cwd, preexec_fn=_default_sigint,
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

    def stderr_so_far(self) -> str:
        """What the run wrote to stderr until now (read without moving the run's file offset)."""
        import os

        return os.pread(self._err.fileno(), 1 << 24, 0).decode(errors="replace")

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



def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
