"""`rlkit sweep --executor slurm` against a real one-node SLURM (scripts/slurm-up: Debian's slurm-wlm
and munge, slurmctld and slurmd on localhost). Skipped, with the reason, only where the packages
cannot be installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    import fcntl

    # two xdist workers may both start the cluster: one at a time (slurm-up is idempotent)
    with open(Path(tempfile.gettempdir()) / "rlkit-slurm-up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run([str(ROOT / "scripts" / "slurm-up")], capture_output=True, text=True, timeout=900)
    if out.returncode == 3:
        pytest.skip(f"no SLURM here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert shutil.which("sbatch") and shutil.which("squeue")
    yield
    # cancel what these tests left queued, not another worker's jobs: by the jobs' working folder
    ours = str(tmp_path_factory.getbasetemp())
    listed = subprocess.run(["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True, timeout=60).stdout
    left = [line.split()[0] for line in listed.splitlines() if len(line.split()) == 2 and line.split()[1].startswith(ours)]
    if left:
        subprocess.run(["scancel", *left], capture_output=True, timeout=60)


def rlkit(*args, cwd, timeout=900):
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, "WANDB_MODE": "offline"})


def test_a_sweep_runs_as_slurm_job_arrays_and_compares_like_a_local_one(slurm, tmp_path):
    out = rlkit("sweep", "a2c-cartpole-local", "a2c-cartpole-gossip", "--seeds", "0-2", "--executor", "slurm",
                "--name", "sw", "--time", "20", "algo.total_steps=3000", "algo.stop_at_score=null",
                "logging.backends=[csv]", "checkpoint.every_steps=1000", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    sweep_dir = tmp_path / "runs" / "sw"
    jobs = json.loads((sweep_dir / "slurm-jobs.json").read_text())
    assert len(jobs) == 6 and len(set(jobs.values())) == 6
    arrays = {job.split("_")[0] for job in jobs.values()}
    assert len(arrays) == 2, f"one job array per resource need (1 CPU local, 2 CPUs gossip): {jobs}"
    for label in ("a2c-cartpole-local", "a2c-cartpole-gossip"):
        for seed in range(3):
            run_dir = sweep_dir / label / f"seed{seed}"
            result = json.loads((run_dir / "result.json").read_text())
            assert result["agent_steps"] >= 3000
            log = (run_dir / "sweep.log").read_text()
            assert f"slurm job {jobs[str(run_dir)]}: run" in log, log[-2000:]
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    assert plan["executor"] == "slurm" and plan["slurm"]["time_min"] == 20
    assert out.stdout.count("sweep: done") == 6 and "srun" not in out.stderr
    compared = rlkit("compare", str(sweep_dir), cwd=tmp_path, timeout=300)
    assert compared.returncode == 0, compared.stderr
    assert "a2c-cartpole-local" in compared.stdout and "a2c-cartpole-gossip" in compared.stdout
    assert (sweep_dir / "compare.md").is_file()


def test_a_run_that_fails_its_job_is_reported_not_requeued(slurm, tmp_path):
    """A run that fails for a reason of its own (here: the env id is unknown only inside the job,
    through a recipe file removed after submission) fails its job; the sweep says so, exit code 1."""
    recipe = tmp_path / "doomed.yaml"
    recipe.write_text((ROOT / "recipes" / "a2c-cartpole-local.yaml").read_text())
    out = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "sweep", str(recipe), "--executor", "slurm",
                            "--name", "bad", "algo.total_steps=2000", "logging.backends=[csv]"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           env={**os.environ, "WANDB_MODE": "offline"})
    line = ""
    while "submitted" not in line:
        line = out.stdout.readline()
        assert line, out.stderr.read()
    recipe.unlink()  # the job's `rlkit run` finds no recipe
    stdout, stderr = out.communicate(timeout=600)
    assert out.returncode == 1, stdout + stderr
    assert "FAILED doomed seed 0" in stdout and "without a result" in stdout
    log = (tmp_path / "runs" / "bad" / "doomed" / "seed0" / "sweep.log").read_text()
    assert "recipe file not found" in log and log.count("slurm job") == 1, "run once, not requeued"



def _wait_for(predicate, timeout_s: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.5)


def test_a_preempted_job_writes_its_checkpoint_is_requeued_and_resumes_to_the_budget(slurm, tmp_path):
    """USR2 to the running job, as SLURM's preemption (and submitit's time-limit signal) sends it
    to every process of the job: the run stops as on Ctrl-C (interrupted.ckpt), submitit requeues
    the job, the job resumes the run, which ends at its budget with one CSV row per logged update."""
    import csv

    sweep = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "sweep", "a2c-cartpole-local", "--executor", "slurm",
                              "--name", "pre", "algo.total_steps=120000", "algo.stop_at_score=null",
                              "logging.backends=[csv]", "trainer.log_every_n_updates=20"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                             env={**os.environ, "WANDB_MODE": "offline"})
    run_dir = tmp_path / "runs" / "pre" / "a2c-cartpole-local" / "seed0"
    metrics = run_dir / "csv" / "metrics.csv"
    try:
        _wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) > 5, 240, "rows logged")
        job = json.loads((tmp_path / "runs" / "pre" / "slurm-jobs.json").read_text())[str(run_dir.resolve())]
        subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)
        stdout, stderr = sweep.communicate(timeout=600)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, stdout + stderr
    log = (run_dir / "sweep.log").read_text()
    assert f"slurm job {job}: run" in log and f"slurm job {job}: resume" in log, log[-3000:]
    stopped = int(log.split("Ctrl-C: stopping at update ")[1].split(";")[0])
    assert 0 < stopped < 3000, "the job was preempted mid-run"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["agent_steps"] == 120_000 and result["updates"] == 3000
    with open(metrics, newline="") as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert steps == [1, *range(20, 3001, 20)], "a row per logged update, none twice, none missing"


def test_scancel_stops_every_job_with_its_checkpoint_and_resume_finishes_the_sweep(slurm, tmp_path):
    """scancel (SLURM's SIGTERM to each job): every run writes its interrupted.ckpt and the sweep
    says so (exit 1); `rlkit sweep --resume` submits them again and they resume to their budget."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    sweep = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "sweep", "a2c-cartpole-local", "--seeds", "0-1",
                              "--executor", "slurm", "--name", "cut", "algo.total_steps=120000",
                              "algo.stop_at_score=null", "logging.backends=[csv]", "trainer.log_every_n_updates=20"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    sweep_dir = tmp_path / "runs" / "cut"
    runs = [sweep_dir / "a2c-cartpole-local" / f"seed{s}" for s in (0, 1)]
    try:
        for run_dir in runs:
            metrics = run_dir / "csv" / "metrics.csv"
            _wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) > 5, 240, "rows logged")
        jobs = json.loads((sweep_dir / "slurm-jobs.json").read_text())
        status = rlkit("sweep", "--status", str(sweep_dir), cwd=tmp_path, timeout=60).stdout.splitlines()
        assert status[0] == f"sweep {sweep_dir}: 2 runs: 2 running; followed by rlkit sweep (pid {sweep.pid})", status
        for seed, line in enumerate(status[2:]):
            cells = line.split()
            assert cells[:4] == ["a2c-cartpole-local", str(seed), "running", jobs[str(runs[seed])]], status
            assert int(cells[4].replace(",", "")) > 0, status  # agent steps so far
        subprocess.run(["scancel", *jobs.values()], check=True, timeout=30)
        stdout, stderr = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 1, stdout + stderr
    assert stdout.count("was cancelled; the run wrote its interrupted.ckpt") == 2, stdout
    for run_dir in runs:
        assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file() and not (run_dir / "result.json").exists()
    _wait_for(lambda: not _processes_naming(sweep_dir), 15, "every process of the cancelled jobs to end")
    status = rlkit("sweep", "--status", str(sweep_dir), cwd=tmp_path, timeout=60).stdout.splitlines()
    assert status[0] == f"sweep {sweep_dir}: 2 runs: 2 stopped; no rlkit sweep is following it", status
    resumed = rlkit("sweep", "--resume", str(sweep_dir), cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for run_dir in runs:
        assert json.loads((run_dir / "result.json").read_text())["agent_steps"] == 120_000
        assert "resume" in (run_dir / "sweep.log").read_text().split("=== ")[-1].splitlines()[0]


def _processes_naming(folder: Path) -> list[int]:
    """Live processes whose command line or environment names ``folder``: a job's submitit
    wrapper, the run it started, and the env workers and learners that run forked (a forked
    process keeps its parent's command line)."""
    marker, found = str(folder).encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes() or marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


TASK_RECORDER = '''
import json, os
from rlkit.hooks.records import hookimpl

@hookimpl
def rlkit_learner_start(run, module):
    keys = ("SLURM_PROCID", "SLURM_STEP_ID", "SLURM_JOB_ID", "LOCAL_RANK")
    seen = {"rank": module.global_rank, "world": module.trainer.world_size, "pid": os.getpid(),
            "ppid": os.getppid(), **{k: os.environ.get(k) for k in keys}}
    with open(os.path.join(os.environ["TASKS_SEEN"], f"rank{module.global_rank}.json"), "w") as fh:
        json.dump(seen, fh)
'''


def test_allreduce_learners_as_two_slurm_tasks_train_as_one_group(slurm, tmp_path):
    """docs/slurm/learners-as-tasks.sbatch: each learner is its own SLURM task (srun), the process
    group formed from SLURM's variables, not launched by rlkit; the two train in lockstep to the
    budget (that allreduce learns CartPole is test_allreduce.py's; here, that the tasks are one run)."""
    from rlkit.testing import plugin_env

    seen = tmp_path / "seen"
    seen.mkdir()
    env = plugin_env(tmp_path, "task_recorder", TASK_RECORDER, TASKS_SEEN=str(seen), RLKIT_PYTHON=sys.executable)
    run_dir = tmp_path / "runs" / "ar"
    out = subprocess.run(["sbatch", "--parsable", "--wait", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                          f"--output={tmp_path / 'job.out'}", str(ROOT / "docs" / "slurm" / "learners-as-tasks.sbatch"),
                          str(run_dir), "a2c-cartpole-allreduce", "logging.backends=[csv]",
                          "algo.total_steps=20000", "algo.stop_at_score=null"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").is_file() else ""
    assert out.returncode == 0, out.stderr + log[-3000:]
    job = out.stdout.strip().split(";")[0]
    tasks = sorted((json.loads(p.read_text()) for p in seen.glob("rank*.json")), key=lambda t: t["rank"])
    assert [(t["rank"], t["world"], t["SLURM_PROCID"], t["SLURM_JOB_ID"]) for t in tasks] == \
        [(0, 2, "0", job), (1, 2, "1", job)], tasks
    assert all(t["SLURM_STEP_ID"] not in (None, "batch") for t in tasks), "each learner is a task of an srun step"
    assert tasks[0]["pid"] != tasks[1]["ppid"] and tasks[1]["pid"] != tasks[0]["ppid"], "no learner launched the other"
    result = json.loads((run_dir / "result.json").read_text())
    # one group: 500 updates of 2 learners x 4 envs x 5 steps (two runs alone would each count 20 per update)
    assert (result["agent_steps"], result["updates"]) == (20_000, 500), result
    assert log.count("CartPole-v1: mean raw score") == 1, log  # one summary: rank 0's
    assert "srun" not in log and "Traceback" not in log, log[-3000:]


def test_a_job_reaching_its_time_limit_is_requeued_and_resumes_to_the_budget(slurm, tmp_path):
    """--time 2: the job asks SLURM for USR2 30 s before its limit (rlkit.commands.slurm.signal_delay_s),
    so a run that needs more than one 2-minute job is stopped and requeued by SLURM's own clock and
    still ends at its budget with one CSV row per logged update; no job is killed at its limit. The
    budget must not fit in one job's 90 s on the fastest host: 800k steps once did (74 s, AMD EPYC,
    2026-12-08); 1.6M would need 18k agent steps/s."""
    import csv

    out = rlkit("sweep", "a2c-cartpole-local", "--executor", "slurm", "--name", "tl", "--time", "2",
                "algo.total_steps=1600000", "algo.stop_at_score=null", "logging.backends=[csv]",
                "trainer.log_every_n_updates=20", cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = tmp_path / "runs" / "tl" / "a2c-cartpole-local" / "seed0"
    log = (run_dir / "sweep.log").read_text()
    job = json.loads((tmp_path / "runs" / "tl" / "slurm-jobs.json").read_text())[str(run_dir.resolve())]
    segments = log.count(f"slurm job {job}: ")
    assert segments >= 2 and "Ctrl-C: stopping at update" in log, log[-3000:]  # stopped by the limit's signal
    result = json.loads((run_dir / "result.json").read_text())
    assert result["agent_steps"] == 1_600_000 and result["updates"] == 40_000
    with open(run_dir / "csv" / "metrics.csv", newline="") as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert steps == [1, *range(20, 40_001, 20)], "a row per logged update, none twice, none missing"
    job_logs = "".join(p.read_text() for p in (tmp_path / "runs" / "tl" / ".submitit").rglob("*.err"))
    assert "DUE TO TIME LIMIT" not in job_logs, job_logs[-2000:]
