"""CUDA-only checks, skipped where torch sees no CUDA device (scripts/gpu-check runs them on a GPU
host): the network and its bf16 autocast on the GPU, and short real runs of the local, queues and
co-located gossip learners with their compute on the GPU."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

QUIET = ["trainer.progress_bar=false", "logging.backends=[csv]", "algo.stop_at_score=null",
         "trainer.accelerator=gpu", "trainer.log_every_n_updates=10"]


def test_nature_cnn_acts_and_trains_on_the_gpu_under_bf16_autocast():
    from gymnasium import spaces

    from rlkit.config.schema import ModelConfig
    from rlkit.learner.models import ActorCritic

    model = ActorCritic(spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), ModelConfig(),
                        autocast_dtype=torch.bfloat16).cuda()
    seen = []
    model.body.register_forward_hook(lambda m, i, out: seen.append((torch.is_autocast_enabled("cuda"), out.dtype)))
    obs = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8, device="cuda")
    actions, values = model.act(obs)
    assert seen == [(True, torch.bfloat16)] and values.dtype == torch.float32 and actions.device.type == "cuda"
    ev = model.evaluate(obs, actions)
    (-(ev.log_probs.mean()) + ev.values.pow(2).mean()).backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_local_pong_runs_on_the_gpu(tmp_path, precision):
    from rlkit.training.checkpoints import load_checkpoint
    from rlkit.training.run import train

    result = train("a2c-pong-local", [*QUIET, "algo.total_steps=1600", "env.num_envs=4", f"logging.root={tmp_path}",
                                      f"trainer.precision={precision}"])
    assert result.agent_steps == 1600
    state = load_checkpoint(result.run_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())


def test_queues_predictors_and_trainer_on_the_gpu(tmp_path):
    from rlkit.training.run import train

    result = train("a2c-cartpole-queues", [*QUIET, "algo.total_steps=4000", f"logging.root={tmp_path}",
                                           "trainer.precision=bf16-mixed"])
    assert result.agent_steps >= 4000


def test_four_gossip_learners_share_one_gpu(tmp_path):
    argv = [sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-gossip", *QUIET, "algo.total_steps=8000",
            "trainer.devices=1", "placement.learners_per_device=4", f"logging.root={tmp_path}",
            "logging.run_name=colocated"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "colocated" / "result.json").read_text())
    assert [x["learner"] for x in result["learners"]] == [0, 1, 2, 3]
