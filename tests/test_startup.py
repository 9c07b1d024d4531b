"""A process the CLI starts sets itself up with the cyclic collector paused and trains with the
start-up heap frozen (rlkit/infra/startup.py); a program that calls ``train`` keeps its collector as it
was; and a run's process ends without anything left over from the frozen heap, and without warnings."""

import gc
import os
import subprocess
import sys

import pytest

from rlkit.training.run import train

# Runs `rlkit run ...` as the CLI entry point does (main() reads sys.argv), and reports the
# collector's state when the first env is made (the spaces check, during start-up) and at the first
# update (training).
PROBE = r"""
import gc, sys
import rlkit.learner.envs, rlkit.learner.module
seen = {}
make = rlkit.learner.envs.make_vector_env
def probed_make(*a, **k):
    seen.setdefault("startup", (gc.isenabled(), gc.get_freeze_count()))
    return make(*a, **k)
rlkit.learner.envs.make_vector_env = probed_make
step = rlkit.learner.module.ActorCriticModule.training_step
def probed_step(self, dataloader_iter):
    seen.setdefault("training", (gc.isenabled(), gc.get_freeze_count()))
    return step(self, dataloader_iter)
rlkit.learner.module.ActorCriticModule.training_step = probed_step
from rlkit.cli import main
sys.argv = ["rlkit", *sys.argv[1:]]
rc = main()
for phase in ("startup", "training"):
    print(phase.upper(), *seen[phase])
print("AFTER", gc.isenabled())
sys.exit(rc)
"""


def _run_cli(tmp_path, *args, code=None):
    env = dict(os.environ, WANDB_MODE="offline")
    argv = ["-c", code] if code else ["-m", "rlkit.cli"]
    return subprocess.run([sys.executable, *argv, "run", *args, f"logging.root={tmp_path}",
                           "trainer.progress_bar=false"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def test_the_cli_pauses_the_collector_for_start_up_and_trains_with_the_start_up_heap_frozen(tmp_path):
    out = _run_cli(tmp_path, "a2c-cartpole-local", "algo.total_steps=400", "algo.stop_at_score=null",
                   "logging.run_name=probe", code=PROBE)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.split(" ")[0] in
                 ("STARTUP", "TRAINING", "AFTER"))
    enabled, frozen = lines["STARTUP"].split()
    assert (enabled, frozen) == ("False", "0"), lines
    enabled, frozen = lines["TRAINING"].split()
    # torch, Lightning and W&B alone leave a few hundred thousand tracked objects
    assert enabled == "True" and int(frozen) > 100_000, lines
    assert lines["AFTER"] == "True"


def _python(code: str, tmp_path) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                         env=dict(os.environ, WANDB_MODE="offline"))
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_main_called_with_arguments_is_a_library_call_and_keeps_the_collector(tmp_path):
    code = ("import gc; from rlkit.cli import main\n"
            "rc = main(['run', 'a2c-cartpole-local', 'algo.total_steps=80', 'trainer.progress_bar=false',\n"
            "           'logging.backends=[csv]', 'logging.root=.', 'logging.run_name=lib'])\n"
            "print(rc, gc.isenabled(), gc.get_freeze_count())")
    assert _python(code, tmp_path) == "0 True 0"


def test_a_run_that_fails_before_training_turns_the_collector_back_on(tmp_path):
    code = ("import gc, rlkit.learner.module; from rlkit.training.run import train; from rlkit.infra.startup import pause_collector\n"
            "def boom(self): raise RuntimeError('no training')\n"
            "rlkit.learner.module.ActorCriticModule.on_train_start = boom\n"
            "assert pause_collector() and not gc.isenabled()\n"
            "try:\n"
            "    train('a2c-cartpole-local', ['algo.total_steps=80', 'trainer.progress_bar=false',\n"
            "                                 'logging.backends=[csv]', 'logging.root=.', 'logging.run_name=f'])\n"
            "except RuntimeError:\n"
            "    pass\n"
            "print(gc.isenabled())")
    assert _python(code, tmp_path) == "True"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_process_forked_during_start_up_collects_again(tmp_path):
    # gymnasium's async vector env forks its workers while the run sets up
    code = ("import gc, os; from rlkit.infra.startup import pause_collector\n"
            "assert pause_collector()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os._exit(0 if gc.isenabled() and gc.get_freeze_count() > 0 else 1)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(os.waitstatus_to_exitcode(status), gc.isenabled())")
    assert _python(code, tmp_path) == "0 False"  # the child collects; the parent is still setting up


def test_a_program_that_calls_train_keeps_its_collector(tmp_path):
    before = gc.get_freeze_count()
    train("a2c-cartpole-local", ["algo.total_steps=80", "trainer.progress_bar=false", "logging.backends=[csv]",
                                 f"logging.root={tmp_path}", "logging.run_name=lib"])
    assert gc.isenabled() and gc.get_freeze_count() == before


def test_end_startup_does_nothing_unless_the_collector_was_paused_by_pause_collector():
    code = ("import gc; from rlkit.infra.startup import pause_collector, end_startup\n"
            "assert end_startup() is False and gc.isenabled() and gc.get_freeze_count() == 0\n"
            "gc.disable(); assert pause_collector() is False; assert end_startup() is False and not gc.isenabled()\n"
            "gc.enable(); assert pause_collector() is True and not gc.isenabled()\n"
            "assert pause_collector() is False\n"
            "assert end_startup() is True and gc.isenabled() and gc.get_freeze_count() > 0\n"
            "assert end_startup() is False\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.slow
def test_a_pong_run_ends_without_leak_reports_or_warnings(tmp_path):
    # The trainer, built before the heap was frozen, still holds the rollout source when the process
    # ends; the source lets go of its AtariVectorEnv when it closes, or ale-py (nanobind) reports
    # the env's C++ object and its types as leaked on every exit.
    out = _run_cli(tmp_path, "a2c-pong-local", "algo.total_steps=160", "env.num_envs=4", "algo.stop_at_score=null",
                   "logging.run_name=pong")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "leaked" not in out.stderr, out.stderr[-3000:]
    # nor W&B's warning about the `anonymous` setting Lightning passes (rlkit/training/trainer.py drops it)
    assert "WARNING" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]


EVAL_PROBE = r"""
import gc, sys
import rlkit.commands.evaluate as ev
seen = {}
load = ev.load_checkpoint
def probed_load(*a, **k):
    seen.setdefault("startup", (gc.isenabled(), gc.get_freeze_count()))
    return load(*a, **k)
ev.load_checkpoint = probed_load
play = ev._play
def probed_play(*a, **k):
    seen.setdefault("playing", (gc.isenabled(), gc.get_freeze_count()))
    return play(*a, **k)
ev._play = probed_play
from rlkit.cli import main
sys.argv = ["rlkit", *sys.argv[1:]]
rc = main()
for phase, state in seen.items():
    print(phase.upper(), *state)
print("AFTER", gc.isenabled())
sys.exit(rc)
"""


def test_evaluate_sets_up_with_the_collector_paused_and_plays_with_the_start_up_heap_frozen(tmp_path):
    trained = train("a2c-cartpole-local", ["algo.total_steps=400", "trainer.progress_bar=false",
                                           "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=ev"])
    ckpt = trained.run_dir / "checkpoints" / "last.ckpt"
    out = subprocess.run([sys.executable, "-c", EVAL_PROBE, "evaluate", str(ckpt), "--episodes", "2"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "CartPole-v1: 2 episodes" in out.stdout, out.stdout
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["STARTUP"].split() == ["False", "0"], lines
    enabled, frozen = lines["PLAYING"].split()
    assert enabled == "True" and int(frozen) > 10_000, lines  # torch's import alone tracks far more
    # an evaluation that fails during set-up (a checkpoint that is not there) collects again
    bad = subprocess.run([sys.executable, "-c", EVAL_PROBE, "evaluate", str(tmp_path / "missing.ckpt")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "missing.ckpt" in bad.stderr, bad.stderr
    assert "PLAYING" not in bad.stdout and "AFTER True" in bad.stdout, bad.stdout


# an installed plugin that records, when training starts, the OpenMP spin setting the process has
SPIN_PLUGIN = '''
import os
from rlkit.hooks.records import hookimpl

@hookimpl
def rlkit_learner_start(run, module):
    with open(os.environ["RLKIT_TEST_SPIN"], "w") as fh:
        fh.write(os.environ.get("GOMP_SPINCOUNT", "unset"))
'''


@pytest.mark.parametrize("user, seen", [({}, "100000"), ({"GOMP_SPINCOUNT": "5"}, "5"),
                                        ({"OMP_WAIT_POLICY": "PASSIVE"}, "unset")])
def test_the_cli_shortens_openmp_spinning_unless_the_user_chose(tmp_path, user, seen):
    from rlkit.testing import plugin_env

    out = tmp_path / "spin.txt"
    env = plugin_env(tmp_path, "rlkit_test_spin", SPIN_PLUGIN, RLKIT_TEST_SPIN=str(out), **user)
    for key in {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"} - set(user):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", "algo.total_steps=200",
                           "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == seen


def test_a_process_that_has_loaded_torch_keeps_its_openmp_setting(monkeypatch):
    import torch  # noqa: F401  (libgomp has read its settings)

    from rlkit.infra.startup import shorten_openmp_spin

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert shorten_openmp_spin() is False and "GOMP_SPINCOUNT" not in os.environ
