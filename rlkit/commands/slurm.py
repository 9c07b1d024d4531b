"""``rlkit sweep --executor slurm``: the sweep's runs as SLURM job arrays, submitted through submitit.

One job per recipe x seed, in the folders, names and W&B group of a local sweep; runs that need the
same resources share one job array. Each job runs ``rlkit run`` (or ``rlkit resume`` where the run
has a checkpoint) as a child process: the run, not the job, owns Lightning's launch, so a run of K
learner processes in one job starts them as it does on a workstation (the job's SLURM variables are
not passed on). A job SLURM preempts or times out gets submitit's signal (USR2): the run is stopped
as by Ctrl-C (it writes ``interrupted.ckpt``) and submitit requeues the job, which resumes it. A run
that fails for a reason of its own fails its job, which is reported, not requeued.

The sweep follows its jobs in ``squeue`` and in each run's folder (``result.json``), not through
accounting, so a cluster without slurmdbd works: a job gone from the queue without a result failed.
Ctrl-C cancels the sweep's jobs (SLURM sends them SIGTERM: each run writes its ``interrupted.ckpt``);
``rlkit sweep --resume`` submits what did not finish.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.infra.errors import UserError
from rlkit.infra.files import read_json_map, write_atomic
from rlkit.infra.processes import die_with_parent

JOBS_FILE = "slurm-jobs.json"
POLL_S = 2.0
MAX_TIME_LIMITS = 100  # a run may reach its job's time limit this often, requeued each time (submitit's default: 3)
STOP_TIMEOUT_S = 120.0  # a run's own graceful stop, inside a job that is being preempted


@dataclass
class SlurmOptions:
    """What ``--executor slurm`` asks of the cluster; kept in sweep.json for ``--resume``."""

    partition: str | None = None
    time_min: int = 60
    account: str | None = None
    qos: str | None = None
    mem_gb: float | None = None
    array_parallelism: int = 256
    sbatch: dict[str, str] = field(default_factory=dict)  # extra sbatch flags: name -> value

    @classmethod
    def from_cli(cls, partition, time_min, account, qos, mem_gb, array_parallelism, sbatch) -> "SlurmOptions":
        if time_min is not None and time_min < 1:
            raise UserError(f"--time: {time_min} is not allowed; must be >= 1 (minutes)")
        if array_parallelism is not None and array_parallelism < 1:
            raise UserError(f"--array-parallelism: {array_parallelism} is not allowed; must be >= 1")
        if mem_gb is not None and mem_gb <= 0:
            raise UserError(f"--mem-gb: {mem_gb} is not allowed; must be > 0")
        flags = {}
        for item in sbatch or []:
            key, sep, value = item.partition("=")
            key = key.strip().lstrip("-")
            if not key:
                raise UserError(f"--sbatch: '{item}' is not an sbatch flag; write NAME=VALUE, e.g. --sbatch "
                                "constraint=avx2")
            flags[key] = value if sep else ""
        return cls(partition, time_min or 60, account, qos, mem_gb, array_parallelism or 256, flags)


class RunJob:
    """What one SLURM job runs: one sweep run through the CLI, resumed where it has a checkpoint.
    ``checkpoint`` is submitit's preemption / time-limit hook: stop the run gracefully, requeue."""

    def __init__(self, run_dir: str, run_args: list[str]):
        self.run_dir, self.run_args = run_dir, list(run_args)
        self._proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        cli = [sys.executable, "-m", "rlkit.cli"]
        if any((Path(self.run_dir) / "checkpoints").glob("*.ckpt")):
            return [*cli, "resume", self.run_dir]
        return [*cli, "run", *self.run_args]

    def __call__(self) -> dict:
        Path(self.run_dir).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        env["RLKIT_SLURM_JOB_ID"] = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", ""))
        command = self.command()
        with open(Path(self.run_dir) / "sweep.log", "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} slurm job {_job_id()}: {command[3]}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True, preexec_fn=_prepare_run)
            previous = signal.signal(signal.SIGTERM, self._pass_on)  # scancel: the run's graceful stop
            try:
                while self._proc.poll() is None:  # polled, not wait(): checkpoint() may run in between
                    time.sleep(0.5)
            finally:
                signal.signal(signal.SIGTERM, previous)
        code = self._proc.returncode
        result = Path(self.run_dir) / "result.json"
        if code != 0 or not result.is_file():
            raise RuntimeError(f"rlkit {command[3]} exited with code {code}; see {self.run_dir}/sweep.log")
        return json.loads(result.read_text())

    def _pass_on(self, signum, frame) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)

    def checkpoint(self, *args, **kwargs):
        """submitit calls this on USR2 (preemption, the time limit near): Ctrl-C to the run, which
        writes its interrupted.ckpt, then the same job again (it resumes the run)."""
        import submitit

        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        return submitit.helpers.DelayedSubmission(RunJob(self.run_dir, self.run_args))

    def __getstate__(self):
        return {"run_dir": self.run_dir, "run_args": self.run_args}

    def __setstate__(self, state):
        self.__init__(state["run_dir"], state["run_args"])


def _prepare_run() -> None:
    """In the run's process, before exec. SLURM sends a preemption's USR2 to every process of the
    job step: the run (and all it starts) ignores it, so that only submitit's handler acts on it
    (:meth:`RunJob.checkpoint`: Ctrl-C to the run, which writes its interrupted.ckpt). And the run
    gets SIGTERM, its graceful stop, if the job's process dies however it dies."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent(signal.SIGTERM)


def _job_id() -> str:
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return os.environ.get("SLURM_JOB_ID", "?")


def node_cpus() -> int:
    """The most CPUs one node of the cluster has (a run's job asks for at most that many)."""
    out = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, timeout=30)
    counts = [int(x.rstrip("+")) for x in out.stdout.split() if x.rstrip("+").isdigit()]
    if out.returncode != 0 or not counts:
        raise UserError(f"--executor slurm: sinfo did not list the cluster's nodes ({out.stderr.strip() or 'none'})")
    return max(counts)


def has_slurm() -> bool:
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def check_cluster() -> None:
    if not has_slurm():
        raise UserError("--executor: slurm is not allowed here: sbatch and squeue are not on PATH (use local, or run "
                        "scripts/slurm-up for a one-node SLURM on this machine)")


def submit(runs, sweep_dir: Path, plan_name: str, options: SlurmOptions) -> dict[str, str]:
    """One job array per distinct resource need (CPUs, GPUs); returns {run folder: job id}, also
    kept in slurm-jobs.json."""
    import submitit

    groups = defaultdict(list)
    for r in runs:
        groups[(r.cores, r.gpus)].append(r)
    jobs: dict[str, str] = {}
    for (cpus, gpus), group in groups.items():
        executor = submitit.AutoExecutor(folder=sweep_dir / ".submitit" / "%j", cluster="slurm",
                                         slurm_max_num_timeout=MAX_TIME_LIMITS)
        extra = dict(options.sbatch)
        params = {"name": plan_name, "timeout_min": options.time_min, "nodes": 1, "tasks_per_node": 1,
                  "slurm_signal_delay_s": signal_delay_s(options.time_min),
                  "cpus_per_task": cpus, "slurm_array_parallelism": options.array_parallelism,
                  "slurm_additional_parameters": extra}
        if gpus:
            params["gpus_per_node"] = gpus
        if options.mem_gb:
            params["mem_gb"] = options.mem_gb
        for key, value in (("slurm_partition", options.partition), ("slurm_account", options.account),
                           ("slurm_qos", options.qos)):
            if value:
                params[key] = value
        executor.update_parameters(**params)
        with executor.batch():
            submitted = [executor.submit(RunJob(str(r.run_dir), list(r.run_args))) for r in group]
        for r, job in zip(group, submitted):
            jobs[str(r.run_dir)] = job.job_id
    known = read_jobs(sweep_dir)
    known.update(jobs)
    write_atomic(sweep_dir / JOBS_FILE, json.dumps(known, indent=2) + "\n")
    return jobs


def signal_delay_s(time_min: int) -> int:
    """How long before its time limit a job gets USR2: submitit's 90 s, but at most a quarter of the
    limit. SLURM may deliver the signal up to a minute early, so with 90 s a job of a 2-minute limit
    was signalled within seconds of starting, every time, and never trained (measured: 4 segments of
    2-6 s, then submitit gave up)."""
    return max(10, min(90, time_min * 60 // 4))


def read_jobs(sweep_dir: Path) -> dict[str, str]:
    return read_json_map(sweep_dir / JOBS_FILE)


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """SLURM's state of each job still in the queue (PENDING, RUNNING, ...); a job not listed has left it."""
    if not job_ids:
        return {}
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    listed = dict(line.split(None, 1) for line in out.stdout.splitlines() if line.strip())
    return {j: listed[j].strip() for j in job_ids if j in listed}


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=60)


class SlurmSweep:
    """Submits the sweep's unfinished runs and follows them until each has left the queue."""

    def __init__(self, runs, sweep_dir: Path, plan_name: str, options: SlurmOptions):
        self.runs, self.sweep_dir = runs, sweep_dir
        self.plan_name, self.options = plan_name, options

    def run(self) -> int:
        pending = [r for r in self.runs if r.state() != "done"]
        kept = len(self.runs) - len(pending)
        say(f"sweep {self.sweep_dir}: {len(self.runs)} runs as SLURM jobs; {kept} finished (kept), "
            f"{len(pending)} to submit")
        jobs = submit(pending, self.sweep_dir, self.plan_name, self.options) if pending else {}
        for r in pending:
            say(f"sweep: submitted {r.label} seed {r.seed} as job {jobs[str(r.run_dir)]} "
                f"({r.cores} CPU{'s' * (r.cores > 1)}) -> {r.run_dir}")
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            failed = self._follow(pending, jobs)
        except KeyboardInterrupt:
            live = list(queue_states(list(jobs.values())))
            say(f"sweep: stopping: cancelling {len(live)} jobs (each run writes its interrupted.ckpt)")
            cancel(live)
            say(f"sweep: cancelled; continue with: rlkit sweep --resume {self.sweep_dir}")
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        done = sum(r.state() == "done" for r in self.runs)
        say(f"sweep: {done}/{len(self.runs)} runs finished; compare with: rlkit compare {self.sweep_dir}")
        if failed:
            say(f"sweep: {len(failed)} failed: " + ", ".join(f"{r.label} seed {r.seed}" for r in failed))
            return 1
        return 0

    def _follow(self, pending, jobs: dict[str, str]) -> list:
        waiting = {jobs[str(r.run_dir)]: r for r in pending}
        seen: dict[str, str] = {}
        failed = []
        while waiting:
            time.sleep(POLL_S)
            states = queue_states(list(waiting))
            for job_id, r in list(waiting.items()):
                state = states.get(job_id)
                if state is not None:
                    if seen.get(job_id) != state and state == "RUNNING":
                        say(f"sweep: running {r.label} seed {r.seed} (job {job_id})")
                    seen[job_id] = state
                    continue
                del waiting[job_id]
                if r.state() == "done":
                    result = json.loads((r.run_dir / "result.json").read_text())
                    score = result.get("score_mean")
                    shown = "no episode finished" if score is None else f"score {score:.2f}"
                    say(f"sweep: done {r.label} seed {r.seed} (job {job_id}): {shown}, "
                        f"{result['agent_steps']:,} agent steps in {result['seconds']:.0f} s")
                elif (r.run_dir / "checkpoints" / "interrupted.ckpt").is_file():
                    failed.append(r)  # cancelled (scancel): the run stopped the graceful way
                    say(f"sweep: STOPPED {r.label} seed {r.seed} (job {job_id} was cancelled; the run wrote its "
                        f"interrupted.ckpt): continue with rlkit sweep --resume {self.sweep_dir}")
                else:
                    failed.append(r)
                    say(f"sweep: FAILED {r.label} seed {r.seed} (job {job_id} left the queue without a result); "
                        f"see {r.run_dir / 'sweep.log'} and {self.sweep_dir / '.submitit'}")
        return failed


def say(line: str) -> None:
    print(line, flush=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
