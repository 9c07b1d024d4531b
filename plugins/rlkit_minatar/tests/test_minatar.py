"""MinAtar as a recipe uses it: ids that work with no import step, and a short run that learns
Breakout well above a random policy. (The core's MinAtar network: tests/test_models.py.) Like a
third-party plugin's tests, these use only rlkit.api, rlkit.testing and the CLI."""

import csv
import os
import subprocess
import sys

import json

import numpy as np
import pytest

from rlkit.api import EnvConfig, make_vector_env


def test_minatar_ids_work_in_a_fresh_process_with_no_import_step():
    code = ("from rlkit.api import EnvConfig, make_vector_env\n"
            "for game in ('Breakout', 'SpaceInvaders'):\n"
            "    env = make_vector_env(EnvConfig(id=f'MinAtar/{game}-v1', num_envs=1), seed=0)\n"
            "    print((env.single_observation_space, env.single_action_space)); env.close()")
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


def random_policy_score(env_id: str, episodes: int = 400) -> float:
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
    random_score = random_policy_score("MinAtar/Breakout-v1")
    assert 0.2 < random_score < 0.6
    cli = [sys.executable, "-m", "rlkit.cli"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    out = subprocess.run([*cli, "run", "a2c-minatar-breakout-local", "algo.total_steps=80000",
                          "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
                          "logging.run_name=breakout", "trainer.log_every_n_updates=50"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "breakout"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score_mean"] is not None and result["score_mean"] > max(1.5, 3 * random_score), result
    with open(run_dir / "csv" / "metrics.csv") as fh:
        first = next(r for r in csv.DictReader(fh) if r.get("score_mean"))
    assert float(first["score_mean"]) < result["score_mean"]
    # the checkpoint plays, and its first game renders (MinAtar draws floats, 1 pixel per cell)
    from PIL import Image

    out = subprocess.run([*cli, "evaluate", str(run_dir / "checkpoints" / "last.ckpt"), "--episodes", "3",
                          "--gif", str(tmp_path / "game.gif")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and "3 episodes" in out.stdout, (out.stdout, out.stderr[-2000:])
    with Image.open(tmp_path / "game.gif") as gif:
        assert gif.size == (160, 160) and gif.n_frames >= 2
