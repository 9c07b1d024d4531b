"""Launching learner processes: the run folder is written by the launching process only, and
replaced, never rewritten in place (a launched learner of `rlkit resume` reads recipe.yaml while
the others start: one that read a file cut short died before joining, and the run waited out the
process group's timeout); a learner that dies before the process group forms is named."""

import json
import os
import subprocess
import sys

import pytest

from rlkit.infra.files import write_atomic
from rlkit.testing import plugin_env, processes_of_run

BASE = ["trainer.progress_bar=false", "logging.backends=[csv]", "algo.stop_at_score=null",
        "placement.learners=2", "trainer.devices=2", "checkpoint.every_steps=1000000"]

# each launched learner records what recipe.yaml is when it begins its set-up (the launching process
# has written it), and every learner what it is when it starts training
STAT_PLUGIN = '''
import json, os
from rlkit.hooks.records import hookimpl

def record(run, when, rank):
    st = os.stat(run.run_dir / "recipe.yaml")
    with open(os.environ["RLKIT_TEST_STATS"], "a") as fh:
        fh.write(json.dumps([when, rank, st.st_ino, st.st_mtime_ns]) + "\\n")

@hookimpl
def rlkit_configure(run):
    if not run.launcher:
        record(run, "configure", int(os.environ["LOCAL_RANK"]))

@hookimpl
def rlkit_learner_start(run, module):
    record(run, "start", module.global_rank)
'''

# learner 1 dies while it sets up, before it joins the process group
DIE_PLUGIN = '''
import os
from rlkit.hooks.records import hookimpl

@hookimpl
def rlkit_configure(run):
    if not run.launcher and os.environ.get("LOCAL_RANK") == "1":
        os._exit(3)
'''


def test_a_reader_of_a_replaced_file_sees_the_old_text_whole(tmp_path):
    path = tmp_path / "recipe.yaml"
    write_atomic(path, "old: 1\n" * 500)
    with open(path) as reader:  # a reader that opened it before the write
        write_atomic(path, "new: 2\n" * 300)
        assert reader.read() == "old: 1\n" * 500  # rewritten in place, it would read the new text
    assert path.read_text() == "new: 2\n" * 300
    assert [p.name for p in tmp_path.iterdir()] == ["recipe.yaml"]  # no temporary file left


def _cli(tmp_path, *args, env):
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_launched_learners_never_rewrite_the_run_folder(tmp_path):
    stats = tmp_path / "stats.jsonl"
    env = plugin_env(tmp_path, "rlkit_test_stat", STAT_PLUGIN, RLKIT_TEST_STATS=str(stats))
    run_dir = tmp_path / "g"
    first = _cli(tmp_path, "run", "a2c-cartpole-gossip", *BASE, f"logging.root={tmp_path}", "logging.run_name=g",
                 "algo.total_steps=800", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    again = _cli(tmp_path, "resume", str(run_dir), "algo.total_steps=1600", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    seen = [json.loads(line) for line in stats.read_text().splitlines()]
    # gossip's launching process trains nothing (it supervises): learner 0 is a launched learner too
    assert sorted((w, r) for w, r, _, _ in seen) == sorted([("configure", 0), ("configure", 1), ("start", 0),
                                                            ("start", 1)] * 2), seen
    # each phase: from learner 1's set-up to both learners' start, recipe.yaml is the one file the
    # launching process wrote (a learner that rewrote it would have left a later one)
    phases = [[], []]
    for rec in seen:
        phases[len(phases[0]) >= 4].append(rec)
    for phase in phases:
        assert len({(ino, mtime) for _, _, ino, mtime in phase}) == 1, seen
    final = os.stat(run_dir / "recipe.yaml")
    assert [final.st_ino, final.st_mtime_ns] == seen[-1][2:]
    assert "total_steps: 1600" in (run_dir / "recipe.yaml").read_text()
    assert not processes_of_run(run_dir)


@pytest.mark.slow
def test_a_learner_that_dies_while_setting_up_is_named_and_not_restarted(tmp_path):
    """A death before training starts is taken for a set-up failure (it would recur): the run stops
    with one line naming the learner, rather than restarting it fault.max_restarts times."""
    env = plugin_env(tmp_path, "rlkit_test_die", DIE_PLUGIN)
    run_dir = tmp_path / "d"
    out = _cli(tmp_path, "run", "a2c-cartpole-gossip", *BASE, f"logging.root={tmp_path}", "logging.run_name=d",
               "algo.total_steps=800", "communication.options.timeout_s=10", env=env)
    assert out.returncode == 1, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rlkit: run failed: learner 1 (pid "), out.stderr[-3000:]
    assert "exited with code 3 before it started training" in last, last
    assert "restarting" not in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert not processes_of_run(run_dir)


# the launching process with rlkit's child observer: learner 1 (a `sleep`) is SIGKILLed; the
# launching process then either ends on its own after `main_s` (as learner 0 does when its next
# collective fails) or hangs
OBSERVED = '''
import signal, subprocess, sys, time
from rlkit.training.launchers import StopAwareObserver

class Launcher:
    stopping = False

launcher = Launcher()
launcher.procs = [subprocess.Popen(["sleep", "60"])]
StopAwareObserver(launcher, main_grace_s=float(sys.argv[2]), sleep_period=0.1).start()
launcher.procs[0].send_signal(signal.SIGKILL)
time.sleep(float(sys.argv[1]))
print("rlkit: run failed: learner 0 found it", file=sys.stderr)
sys.exit(1)
'''


@pytest.mark.parametrize("main_s, grace_s, says", [
    (1.0, 20.0, "learner 0 found it"),  # learner 0 reports the dead learner itself: not SIGKILLed
    (60.0, 1.0, "learner 1 (pid"),  # learner 0 is stuck: the observer ends the run, in one line
])
def test_a_dead_learner_leaves_the_launching_process_time_to_say_so(main_s, grace_s, says):
    """Lightning's observer SIGKILLed the launching process at its first poll after a learner died:
    on a slow host that came before learner 0's own one-line report (CI: exit -9, nothing said)."""
    out = subprocess.run([sys.executable, "-c", OBSERVED, str(main_s), str(grace_s)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rlkit: run failed:") and says in last, out.stderr[-2000:]
    assert "exited with code -9" in last or main_s < grace_s
