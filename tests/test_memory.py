"""The learner keeps the memory it frees for its next update (rlkit/memory.py): a Nature-CNN train
step on Pong-sized batches then page-faults next to never, where glibc's defaults fault its buffers
back in thousands of times per step."""

import subprocess
import sys

import pytest

STEPS = """
import resource, sys
import numpy as np, torch
from gymnasium import spaces
from rlkit.config import ModelConfig
from rlkit.memory import keep_freed_memory
from rlkit.models import ActorCritic
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)
model = ActorCritic(spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), ModelConfig(kind="cnn"))
opt = torch.optim.RMSprop(model.parameters(), lr=7e-4, eps=1e-5)
obs = torch.randint(0, 255, (80, 4, 84, 84), dtype=torch.uint8)
def step():
    logits, values = model(obs)
    loss = logits.logsumexp(-1).mean() + values.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
for _ in range(6):
    step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20)
"""


def faults_per_step(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_train_step_reuses_freed_memory_instead_of_faulting_it_back():
    keep, default = faults_per_step("keep"), faults_per_step("default")
    assert keep < 500, f"{keep:.0f} minor page faults per train step with keep_freed_memory (glibc defaults: {default:.0f})"


def test_a_run_can_leave_the_allocator_alone():
    from rlkit.recipes import load_recipe

    assert load_recipe("a2c-pong-local").trainer.reuse_freed_memory is True
    assert load_recipe("a2c-pong-local", ["trainer.reuse_freed_memory=false"]).trainer.reuse_freed_memory is False
