"""``rlkit sweep``: seeds, plans, the CartPole sweep that is interrupted, resumed and compared, and
bad input (one line, exit code 2)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlkit.commands.sweep import open_sweep, parse_seeds
from rlkit.commands.sweep_status import sweep_owner
from rlkit.infra.errors import UserError
from rlkit.infra.processes import descendants

TINY = ["algo.total_steps=12000", "checkpoint.every_steps=400", "algo.stop_at_score=null", "logging.backends=[csv]",
        "trainer.log_every_n_updates=20"]


def rlkit(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=dict(os.environ, WANDB_MODE="offline"))


@pytest.mark.parametrize("text, seeds", [("0-4", [0, 1, 2, 3, 4]), ("3", [3]), ("0,2,5-6", [0, 2, 5, 6]),
                                         ("1-1", [1]), ("2,2,1", [2, 1])])
def test_seed_lists(text, seeds):
    assert parse_seeds(text) == seeds


def test_same_name_continues_the_same_sweep_and_refuses_another(tmp_path):
    plan, sweep_dir = open_sweep(["a2c-cartpole-local", "algo.lr=0.001"], "0-1", "s", str(tmp_path), None)
    assert (plan.recipes, plan.seeds, plan.overrides, sweep_dir) == (["a2c-cartpole-local"], [0, 1],
                                                                     ["algo.lr=0.001"], tmp_path / "s")
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text(json.dumps(plan.__dict__))
    again, _ = open_sweep(["a2c-cartpole-local", "algo.lr=0.001"], "0-1", "s", str(tmp_path), None)
    assert again.created == plan.created
    with pytest.raises(UserError, match="holds another sweep"):
        open_sweep(["a2c-cartpole-local"], "0-2", "s", str(tmp_path), None)
    resumed, where = open_sweep([], None, None, "ignored", str(sweep_dir))
    assert resumed.same_sweep(plan) and where == sweep_dir


@pytest.mark.parametrize("args, needle", [
    (["sweep", "a2c-cartpole-local", "--seeds", "3-1"], "--seeds: 3-1 is an empty range"),
    (["sweep", "a2c-cartpole-local", "--seeds", "two"], "--seeds: 'two' is not a seed list"),
    (["sweep", "no-such-recipe", "--seeds", "0-1"], "unknown recipe 'no-such-recipe'"),
    (["sweep", "--resume", "."], "sweep --resume: . is not a sweep folder (no sweep.json)"),
    (["sweep", "--resume", "no-such-dir"], "sweep --resume: no-such-dir is not a sweep folder"),
    (["sweep", "a2c-cartpole-local", "seed=3"], "the sweep sets seed, logging.root"),
    (["sweep", "a2c-cartpole-local", "algo.lrr=1"], "algo.lrr: unknown key 'lrr'"),
    (["sweep", "a2c-cartpole-local", "env.id=NoSuchEnv-v0"], "env.id: unknown environment 'NoSuchEnv-v0'"),
    (["sweep", "a2c-cartpole-local", "--cores", "0"], "--cores: 0 is not allowed"),
    (["sweep", "a2c-cartpole-local", "--bogus"], "unrecognized arguments: --bogus"),
    (["sweep"], "sweep: give at least one recipe"),
    (["sweep", "--status", "no-such-dir"], "sweep --status: no-such-dir is not a sweep folder (no sweep.json)"),
    (["sweep", "--cancel", "."], "sweep --cancel: . is not a sweep folder (no sweep.json)"),
    (["sweep", "--status", ".", "a2c-cartpole-local"], "sweep --status: give only the sweep folder"),
])
def test_bad_sweep_input_is_one_line_exit_2(args, needle, tmp_path):
    out = rlkit(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs").exists()


def test_a_sweep_folder_runs_one_sweep_at_a_time(tmp_path):
    import fcntl

    from rlkit.commands.sweep import sweep

    plan, folder = open_sweep(["a2c-cartpole-local"], None, "s", str(tmp_path), None)
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(plan.__dict__))
    with open(folder / ".lock", "w") as held:  # as a running sweep holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UserError, match="is being run by another rlkit sweep"):
            sweep(["a2c-cartpole-local"], name="s", root=str(tmp_path))
        with pytest.raises(UserError, match="is being run by another rlkit sweep"):
            sweep([], resume=str(folder))
        assert sweep_owner(folder) == os.getpid()  # what --status and --cancel find
    assert sweep_owner(folder) is None
    assert not (folder / "a2c-cartpole-local").exists()


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_cartpole_sweep_is_interrupted_resumed_and_compared(tmp_path):
    """Two seeds one after the other (--cores 1). Ctrl-C to the sweep while seed 1 runs: every
    process stops; the re-run keeps seed 0 as it was and resumes seed 1 from its checkpoint."""
    runs = tmp_path / "runs" / "cp" / "a2c-cartpole-local"
    cmd = [sys.executable, "-m", "rlkit.cli", "sweep", "a2c-cartpole-local", "--seeds", "0-1", "--cores", "1",
           "--name", "cp", *TINY]
    sweep = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for(lambda: any((runs / "seed1" / "checkpoints").glob("update-*.ckpt")), 300, "seed 1's first checkpoint")
        assert (runs / "seed0" / "result.json").is_file() and not (runs / "seed1" / "result.json").exists()
        children = descendants(sweep.pid)
        assert children, "the run is a child process of the sweep"
        status = rlkit("sweep", "--status", "runs/cp", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[0] == f"sweep runs/cp: 2 runs: 1 done, 1 running; followed by rlkit sweep (pid {sweep.pid})", lines
        seed0, seed1 = (line.split() for line in lines[2:])
        done = json.loads((runs / "seed0" / "result.json").read_text())
        assert seed0 == ["a2c-cartpole-local", "0", "done", f"{done['agent_steps']:,}", f"{done['score_mean']:.1f}"]
        assert seed1[:3] == ["a2c-cartpole-local", "1", "running"] and int(seed1[3]) in children and int(seed1[4].replace(",", "")) > 0
        sweep.send_signal(signal.SIGINT)
        out, _ = sweep.communicate(timeout=150)
    finally:
        sweep.kill()
    assert sweep.returncode == 130, out
    assert "continue with: rlkit sweep --resume runs/cp" in out
    assert not [p for p in children if Path(f"/proc/{p}").exists()], "a run outlived the sweep"
    assert (runs / "seed1" / "checkpoints" / "interrupted.ckpt").is_file()
    assert not (runs / "seed1" / "result.json").exists()
    status = rlkit("sweep", "--status", "runs/cp", cwd=tmp_path).stdout.splitlines()
    assert status[0] == "sweep runs/cp: 2 runs: 1 done, 1 stopped; no rlkit sweep is following it", status
    kept = (runs / "seed0" / "result.json").stat().st_mtime_ns

    again = rlkit("sweep", "--resume", "runs/cp", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 finished (kept), 1 to resume, 0 to start" in again.stdout
    assert "resume a2c-cartpole-local seed 1" in again.stdout
    assert (runs / "seed0" / "result.json").stat().st_mtime_ns == kept
    result = json.loads((runs / "seed1" / "result.json").read_text())
    assert result["agent_steps"] >= 12000
    log = (runs / "seed1" / "sweep.log").read_text()
    assert log.count("=== ") == 2 and " new\n" in log and " resume\n" in log
    recipe = (runs / "seed1" / "recipe.yaml").read_text()
    assert "group: cp" in recipe and "seed: 1" in recipe

    table = rlkit("compare", "runs/cp", "--target", "100", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    md = (tmp_path / "runs" / "cp" / "compare.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| a2c-cartpole-local")]
    assert len(rows) == 1 and "| 2 |" in rows[0]
    assert "CartPole-v1" in md and (tmp_path / "runs" / "cp" / "curves.png").stat().st_size > 1000


@pytest.mark.slow
def test_cancel_stops_a_running_local_sweep_and_status_follows_it(tmp_path):
    run = tmp_path / "runs" / "c" / "a2c-cartpole-local" / "seed0"
    sweep = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "sweep", "a2c-cartpole-local", "--name", "c",
                              *TINY, "algo.total_steps=10000000"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for(lambda: any((run / "checkpoints").glob("update-*.ckpt")), 300, "the first checkpoint")
        children = descendants(sweep.pid)
        status = rlkit("sweep", "--status", "runs/c", cwd=tmp_path).stdout.splitlines()
        assert status[0] == f"sweep runs/c: 1 runs: 1 running; followed by rlkit sweep (pid {sweep.pid})", status
        cancel = rlkit("sweep", "--cancel", "runs/c", cwd=tmp_path, timeout=200)
        out, _ = sweep.communicate(timeout=30)  # --cancel returns once the sweep has stopped
    finally:
        sweep.kill()
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.splitlines() == [f"sweep --cancel: rlkit sweep (pid {sweep.pid}) stopped",
                                          "sweep --cancel: 1 runs unfinished; continue with: rlkit sweep --resume runs/c"]
    assert sweep.returncode == 130 and "sweep: SIGTERM: stopping 1 runs" in out, out
    assert not [p for p in children if Path(f"/proc/{p}").exists()], "a run outlived the sweep"
    assert (run / "checkpoints" / "interrupted.ckpt").is_file()
    status = rlkit("sweep", "--status", "runs/c", cwd=tmp_path).stdout.splitlines()
    assert status[0] == "sweep runs/c: 1 runs: 1 stopped; no rlkit sweep is following it", status
    again = rlkit("sweep", "--cancel", "runs/c", cwd=tmp_path)
    assert again.stdout.splitlines()[0] == "sweep --cancel: nothing is running"


@pytest.mark.slow
def test_runs_stop_when_the_sweep_is_killed_outright(tmp_path):
    """SIGKILL gives the sweep no chance to stop its runs: the kernel sends them SIGTERM (their
    graceful stop), so none outlives it and the run left a checkpoint to resume from."""
    run = tmp_path / "runs" / "k" / "a2c-cartpole-local" / "seed0"
    sweep = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "sweep", "a2c-cartpole-local", "--name", "k", *TINY],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for(lambda: any((run / "checkpoints").glob("update-*.ckpt")), 300, "the first checkpoint")
        children = descendants(sweep.pid)
        sweep.kill()
        sweep.wait(timeout=10)
    finally:
        sweep.kill()
    wait_for(lambda: not [p for p in children if Path(f"/proc/{p}").exists()], 150, "the runs to stop")
    assert (run / "checkpoints" / "interrupted.ckpt").is_file()
    assert "rlkit: stopped by SIGTERM" in (run / "sweep.log").read_text()
