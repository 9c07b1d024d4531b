"""MinAtar as a recipe uses it: ids that work with no import step, MinAtar's network, and a short
run that learns Breakout well above a random policy."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rlkit.config.schema import EnvConfig, ModelConfig
from rlkit.learner.models import ActorCritic, MinAtarCNN


def test_minatar_ids_work_in_a_fresh_process_with_no_import_step():
    code = ("import sys; from rlkit.config.schema import EnvConfig; from rlkit.learner.envs import env_spaces;"
            "print(env_spaces(EnvConfig(id='MinAtar/Breakout-v1', num_envs=1)));"
            "print(env_spaces(EnvConfig(id='MinAtar/SpaceInvaders-v1', num_envs=1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "(Box(False, True, (10, 10, 4), bool), Discrete(3))" in out.stdout
    assert "(Box(False, True, (10, 10, 6), bool), Discrete(4))" in out.stdout


def test_show_of_a_minatar_recipe_does_not_import_minatar():
    code = ("import sys; from rlkit.cli import main; rc = main(['show', 'a2c-minatar-breakout-local']);"
            "print('IMPORTED', [m for m in ('minatar', 'torch') if m in sys.modules]); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "id: MinAtar/Breakout-v1" in out.stdout and "IMPORTED []" in out.stdout


def test_without_the_minatar_extra_a_minatar_run_is_one_line_exit_2(tmp_path):
    # MinAtar is an optional extra; a process where it cannot be imported stands for a base install
    code = ("import sys; sys.modules['minatar'] = None; from rlkit.cli import main;"
            "sys.exit(main(['run', 'a2c-minatar-breakout-local', 'algo.total_steps=160']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "WANDB_MODE": "offline"})
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(lines) == 1 and "pip install minatar" in lines[0] and "env.id" in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()


def test_minatar_is_an_optional_extra_not_a_dependency():
    # with MinAtar installed, scipy is too, and torchmetrics (via Lightning) imports scipy.signal in every run
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith("minatar") for dep in project["dependencies"])
    assert any(dep.startswith("minatar") for dep in project["optional-dependencies"]["minatar"])
    assert any(dep.startswith("minatar") for dep in project["optional-dependencies"]["test"])


def test_minatar_cnn_is_the_authors_network_on_channel_last_booleans():
    obs_space = spaces.Box(0, 1, (10, 10, 4), bool)
    model = ActorCritic(obs_space, spaces.Discrete(3), ModelConfig(kind="minatar_cnn"))
    assert isinstance(model.body, MinAtarCNN)
    (conv,) = [m for m in model.body.modules() if isinstance(m, nn.Conv2d)]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (4, 16, (3, 3), (1, 1))
    (fc,) = [m for m in model.body.fc.modules() if isinstance(m, nn.Linear)]
    assert (fc.in_features, fc.out_features) == (16 * 8 * 8, 128)
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(5)]))
    actions, values = model.act(obs)
    assert actions.shape == (5,) and values.shape == (5,) and actions.max() < 3
    # channel last in, channel first into the conv: channel c of the grid is the conv's input plane c
    seen = {}
    conv.register_forward_hook(lambda m, inp, out: seen.update(x=inp[0]))
    one = torch.zeros(1, 10, 10, 4, dtype=torch.bool)
    one[0, 2, 7, 3] = True
    model.act(one)
    assert seen["x"].shape == (1, 4, 10, 10) and seen["x"][0, 3, 2, 7] == 1 and seen["x"].sum() == 1


def test_minatar_cnn_refuses_observations_that_are_not_grids():
    from rlkit.infra.errors import UserError

    with pytest.raises(UserError, match=r"model.kind: minatar_cnn needs \[H, W, C\] observations"):
        ActorCritic(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), ModelConfig(kind="minatar_cnn"))


def random_policy_score(env_id: str, episodes: int = 400) -> float:
    from rlkit.learner.envs import make_vector_env

    env = make_vector_env(EnvConfig(id=env_id, num_envs=16), seed=0)
    env.reset(seed=0)
    env.action_space.seed(0)
    running, scores = np.zeros(16), []
    while len(scores) < episodes:
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        running += reward
        for i in np.flatnonzero(terminated | truncated):
            scores.append(running[i])
            running[i] = 0.0
    env.close()
    return float(np.mean(scores))


@pytest.mark.slow
def test_a2c_learns_minatar_breakout_well_above_random(tmp_path):
    """80k agent steps (about 30 s on a free core): the last 100 episodes' mean is several times a
    random policy's (about 0.4 on Breakout-v1)."""
    from rlkit.training.run import train

    random_score = random_policy_score("MinAtar/Breakout-v1")
    assert 0.2 < random_score < 0.6
    result = train("a2c-minatar-breakout-local", [
        "algo.total_steps=80000", "trainer.progress_bar=false", "logging.backends=[csv]",
        f"logging.root={tmp_path}", "logging.run_name=breakout", "trainer.log_every_n_updates=50"])
    assert result.score_mean is not None and result.score_mean > max(1.5, 3 * random_score), result
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        first = next(r for r in csv.DictReader(fh) if r.get("score_mean"))
    assert float(first["score_mean"]) < result.score_mean
    # the checkpoint plays, and its first game renders (MinAtar draws floats, 1 pixel per cell)
    from PIL import Image

    from rlkit.commands.evaluate import evaluate

    report = evaluate(str(result.run_dir / "checkpoints" / "last.ckpt"), 3, gif=str(tmp_path / "game.gif"))
    assert len(report.scores) == 3
    with Image.open(tmp_path / "game.gif") as gif:
        assert gif.size == (160, 160) and gif.n_frames >= 2
