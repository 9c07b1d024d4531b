"""NaN/inf in an update: ``algo.on_nonfinite=stop`` ends the run with a message naming the update and
leaves only checkpoints with finite parameters; ``skip`` drops such updates (parameters untouched),
counts them, and trains on."""

import csv
import math

import gymnasium
import pytest
import torch

from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.infra.errors import RunFailed
from rlkit.training.checkpoints import load_checkpoint
from rlkit.training.run import train


class PoisonGradients:
    """Turns the gradients of the given updates (counted from 1, skipped ones included) into NaN."""

    def __init__(self, updates):
        self.updates, self.calls, self.params_before, self.params_after = set(updates), 0, {}, {}

    @hookimpl(tryfirst=True)
    def rlkit_sync_gradients(self, run, module):
        self.calls += 1
        if self.calls - 1 in self.params_before:  # the parameters the poisoned update left
            self.params_after[self.calls - 1] = [p.detach().clone() for p in module.parameters()]
        if self.calls in self.updates:
            self.params_before[self.calls] = [p.detach().clone() for p in module.parameters()]
            for p in module.parameters():
                p.grad.fill_(math.nan)

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update):
        for p in module.parameters():
            assert torch.isfinite(p).all()


def run(tmp_path, poison, *overrides):
    manager = build_plugin_manager()
    if poison is not None:
        manager.pm.register(poison)
    return train("a2c-cartpole-local", [f"logging.root={tmp_path}", "logging.run_name=nf", "logging.backends=[csv]",
                                        "trainer.progress_bar=false", "algo.stop_at_score=null",
                                        "trainer.log_every_n_updates=10", *overrides], manager)


def test_stop_names_the_update_and_keeps_only_finite_checkpoints(tmp_path):
    poison = PoisonGradients({60})
    with pytest.raises(RunFailed, match=r"learner 0: loss .*gradient norm nan at update 60;.*last good checkpoint"):
        run(tmp_path, poison, "algo.total_steps=20000", "checkpoint.every_steps=400")
    ckpts = sorted((tmp_path / "nf" / "checkpoints").glob("*.ckpt"))
    assert len(ckpts) >= 2, ckpts
    for ckpt in ckpts:
        state = load_checkpoint(ckpt)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values()), ckpt


def test_skip_drops_the_update_and_trains_on(tmp_path):
    poison = PoisonGradients({20, 21, 22})
    result = run(tmp_path, poison, "algo.total_steps=6000", "algo.on_nonfinite=skip")
    # 6000 agent steps = 150 updates of 8 envs x 5 steps; the 3 skipped ones are redone
    assert result.updates == 150 and poison.calls == 153, (result.updates, poison.calls)
    rows = list(csv.DictReader(open(tmp_path / "nf" / "csv" / "metrics.csv")))
    assert float(rows[-1]["nonfinite/skipped"]) == 3.0
    # a skipped update leaves every parameter exactly as it was
    assert sorted(poison.params_after) == [20, 21, 22]
    for update in (20, 21, 22):
        for before, after in zip(poison.params_before[update], poison.params_after[update]):
            assert torch.equal(before, after), update
    # ... while the finite updates after them did change them
    final = list(load_checkpoint(tmp_path / "nf" / "checkpoints" / "last.ckpt")["state_dict"].values())
    assert len(final) == len(poison.params_before[20])
    assert not all(torch.equal(a, b) for a, b in zip(poison.params_before[20], final))
    assert all(math.isfinite(float(r["loss/total"])) for r in rows)


def test_a_long_run_of_nonfinite_updates_stops_even_when_skipping(tmp_path):
    poison = PoisonGradients(range(10, 1000))
    with pytest.raises(RunFailed, match="100 non-finite updates in a row"):
        run(tmp_path, poison, "algo.total_steps=60000", "algo.on_nonfinite=skip")


class NaNRewardAt(gymnasium.Wrapper):
    """CartPole whose reward (or, with ``what = "observations"``, observation) is NaN at one env
    step, counted over every env of the process: a broken env or reward function, where the NaN
    reaches the loss itself, not only a gradient."""

    at, steps, what = 500, 0, "rewards"

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        NaNRewardAt.steps += 1
        if NaNRewardAt.steps == NaNRewardAt.at:
            if NaNRewardAt.what == "rewards":
                reward = math.nan
            else:
                obs = obs.copy()
                obs[0] = math.nan
        return obs, reward, terminated, truncated, info


NAN_ENV = "RlkitTest/NaNRewardCartPole-v1"
if NAN_ENV not in gymnasium.registry:
    gymnasium.register(NAN_ENV, entry_point=lambda **kw: NaNRewardAt(gymnasium.make("CartPole-v1", **kw)))


@pytest.fixture
def nan_env():
    NaNRewardAt.steps, NaNRewardAt.what = 0, "rewards"
    yield NAN_ENV


def test_a_nan_reward_stops_the_run_naming_the_update_and_the_env(tmp_path, nan_env):
    # 8 envs step together: env step 500 is in vector step ceil(500 / 8) = 63, the 3rd step of
    # update ceil(63 / 5) = 13, and of env 500 - 62 * 8 - 1 = 3 (envs step in order)
    with pytest.raises(RunFailed, match=r"learner 0: loss nan, gradient norm nan at update 13; the rollout's rewards "
                                        r"hold 1 non-finite value\(s\), the first from env 3 at step 2 of the rollout"):
        run(tmp_path, None, f"env.id={nan_env}", "env.vectorization=sync", "algo.total_steps=20000",
            "checkpoint.every_steps=200")
    assert NaNRewardAt.steps >= NaNRewardAt.at  # the NaN was produced
    ckpts = sorted((tmp_path / "nf" / "checkpoints").glob("*.ckpt"))
    assert ckpts, "the checkpoints before update 13 are kept"
    for ckpt in ckpts:
        state = load_checkpoint(ckpt)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values()), ckpt


def test_a_nan_observation_stops_the_run_naming_the_env(tmp_path, nan_env):
    """A policy cannot act on a NaN observation (a discrete one's sampler refuses NaN
    probabilities): the run stops with the env named, not the sampler's error."""
    NaNRewardAt.what = "observations"
    with pytest.raises(RunFailed, match=r"env 3 returned a non-finite observation \(NaN/inf; 1 of 8 envs this step\): "
                                        r"the policy cannot act on it"):
        run(tmp_path, None, f"env.id={nan_env}", "env.vectorization=sync", "algo.total_steps=20000")
    assert NaNRewardAt.steps >= NaNRewardAt.at  # the NaN was produced


def test_a_nan_reward_is_skipped_and_the_scores_stay_finite(tmp_path, nan_env, capsys):
    result = run(tmp_path, None, f"env.id={nan_env}", "env.vectorization=sync", "algo.total_steps=6000",
                 "algo.on_nonfinite=skip")
    assert "skipped an update (loss nan, gradient norm nan at update 13; the rollout's rewards" in capsys.readouterr().err
    rows = list(csv.DictReader(open(tmp_path / "nf" / "csv" / "metrics.csv")))
    assert float(rows[-1]["nonfinite/skipped"]) == 1.0  # only the update whose rollout held the NaN
    assert float(rows[-1]["nonfinite/scores"]) == 1.0  # the game it was in has no score: left out, counted
    assert result.score_mean is not None and math.isfinite(result.score_mean), result
    assert all(math.isfinite(float(r["score_mean"])) for r in rows if r.get("score_mean")), rows
