"""Each localsgd learner steps its own RMSprop on its own gradients, so its optimizer state is its
own: the layout says so (``own_optimizer_state``), learner 1 keeps it beside each checkpoint
(checkpoints/learner1/<name>), and on ``rlkit resume`` each learner starts from its own state, not
from learner 0's. A real run of two learner processes, then a resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

testing = pytest.importorskip("rlkit.testing")

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "a2c-cartpole-localsgd.yaml"
STEPS_PER_UPDATE = 2 * 4 * 5  # summed over learners: 2 learners x 4 envs x 5 steps

# found through its entry point in every learner process: the optimizer state each learner trains
# from once the checkpoint has been restored
DUMP_PLUGIN = '''
import os, torch
from rlkit.api import hookimpl

@hookimpl
def rlkit_learner_start(run, module):
    path = os.path.join(os.environ["RLKIT_TEST_DUMP"], f"optim-rank{module.global_rank}.pt")
    torch.save(module.trainer.optimizers[0].state_dict(), path)
'''


def _square_avgs(optimizer_state: dict) -> list[torch.Tensor]:
    return [s["square_avg"] for _, s in sorted(optimizer_state["state"].items())]


def _rlkit(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)


def test_each_learner_resumes_its_own_optimizer_state(tmp_path):
    run_dir = tmp_path / "o"
    first = _rlkit(tmp_path, "run", str(RECIPE), "trainer.progress_bar=false", "logging.backends=[csv]",
                   f"logging.root={tmp_path}", "logging.run_name=o", "algo.stop_at_score=null",
                   "communication.options.backend=gloo", f"algo.total_steps={60 * STEPS_PER_UPDATE}")
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = run_dir / "checkpoints"
    own = torch.load(ckpts / "learner1" / "last.ckpt", map_location="cpu", weights_only=True)
    assert set(own) == {"global_step", "optimizer_states"}  # learner 1 keeps only its optimizer state
    main = torch.load(ckpts / "last.ckpt", map_location="cpu", weights_only=True)
    assert own["global_step"] == main["global_step"] == 60
    saved = {0: _square_avgs(main["optimizer_states"][0]), 1: _square_avgs(own["optimizer_states"][0])}
    # the learners' RMSprop states really differ (their gradients came from their own envs)
    assert any(not torch.equal(a, b) for a, b in zip(saved[0], saved[1]))

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = testing.plugin_env(tmp_path, "rlkit_test_optim_dump", DUMP_PLUGIN, RLKIT_TEST_DUMP=str(dumps))
    second = _rlkit(tmp_path, "resume", str(run_dir), f"algo.total_steps={70 * STEPS_PER_UPDATE}", env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    for rank in (0, 1):
        start = _square_avgs(torch.load(dumps / f"optim-rank{rank}.pt", weights_only=True))
        assert len(start) == len(saved[rank])
        for got, want in zip(start, saved[rank]):
            assert torch.equal(got, want), f"learner {rank} did not resume its own optimizer state"


@pytest.mark.parametrize("how", ["ctrl-c to every process", "sigterm to the launching process"])
def test_a_stop_reaches_both_learners_at_one_update_and_each_writes_its_part(tmp_path, how):
    """A terminal's Ctrl-C reaches every process of the foreground group at slightly different
    moments; a scheduler's SIGTERM may reach only the process it started. Either way the
    synchronous learners agree on the stop before the next update, so learner 1's optimizer state
    is written at learner 0's update (not lost to Lightning's SIGKILL, not one update off)."""
    import os
    import signal

    run_dir = tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", str(RECIPE), "trainer.progress_bar=false",
                             "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=c",
                             "algo.stop_at_score=null", "communication.options.backend=gloo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path)
    try:
        testing.wait_for_log_rows(run_dir, 5)
        if how.startswith("ctrl-c"):
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err[-3000:]
    assert "killed" not in err and "exited with code" not in err, err[-3000:]
    ckpts = run_dir / "checkpoints"
    main = torch.load(ckpts / "interrupted.ckpt", map_location="cpu", weights_only=False)
    own = torch.load(ckpts / "learner1" / "interrupted.ckpt", map_location="cpu", weights_only=True)
    assert main["global_step"] > 0 and own["global_step"] == main["global_step"], (main["global_step"], own["global_step"])
    assert own["optimizer_states"]
