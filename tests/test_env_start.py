"""A new single-learner Atari run builds its envs before importing torch and Lightning and resets
them in a background thread (rlkit.learner.envs.EnvStart, started by RunHooks.start_envs); the default
rollout source takes them. The early start must give the envs a direct reset gives, hand a
failed or stuck reset to the taker, close what nobody took, and start only where the default
source will use the envs."""

import threading

import numpy as np
import pytest

from rlkit.config.runtime import Run
from rlkit.hooks.manager import build_plugin_manager
from rlkit.learner.envs import EnvStart, make_vector_env
from rlkit.training.run import RUN_COMMUNICATOR, prepare, train
from rlkit.training.runhooks import RunHooks


def _pong(num_envs=2):
    cfg, _, _ = prepare("a2c-pong-local", [f"env.num_envs={num_envs}"], build_plugin_manager())
    return cfg


def test_envs_started_early_are_the_envs_a_direct_reset_gives():
    cfg = _pong()
    started = EnvStart(cfg.env, seed=3)
    early, obs = started.take()
    direct, other = make_vector_env(cfg.env, 3), make_vector_env(cfg.env, 4)
    try:
        direct_obs, _ = direct.reset(seed=3)
        other.reset(seed=4)
        np.testing.assert_array_equal(obs, direct_obs)
        actions = np.array([2, 3])
        differs = False
        for _ in range(20):  # the same games from there on: the same seeds went into the resets
            a, b, c = early.step(actions)[0], direct.step(actions)[0], other.step(actions)[0]
            np.testing.assert_array_equal(a, b)
            differs |= bool((a != c).any())
        assert differs, "control: another seed should give other frames"
    finally:
        for env in (early, direct, other):
            env.close()


class _FakeAtari:
    """Stands in for the AtariVectorEnv make_vector_env returns: a reset that fails or blocks."""

    def __init__(self, reset):
        self._reset, self.closed, self.seeds = reset, 0, []

    def reset(self, seed=None):
        self.seeds.append(seed)
        return self._reset()

    def close(self):
        self.closed += 1


def _start_with(monkeypatch, reset):
    fake = _FakeAtari(reset)
    monkeypatch.setattr("rlkit.learner.envs.make_vector_env", lambda cfg, seed, num_envs=None: fake)
    return EnvStart(_pong().env, seed=7), fake


def test_a_failed_reset_reaches_the_taker_and_the_env_is_closed(monkeypatch):
    def fail():
        raise RuntimeError("ROM gone")

    started, fake = _start_with(monkeypatch, fail)
    with pytest.raises(RuntimeError, match="ROM gone"):
        started.take()
    assert fake.seeds == [7] and fake.closed == 1
    started.close()  # nothing left to close
    assert fake.closed == 1


def test_a_reset_that_never_ends_is_a_timeout_not_a_hang(monkeypatch, capsys):
    release = threading.Event()
    started, fake = _start_with(monkeypatch, lambda: (release.wait(30), {}))
    monkeypatch.setattr(EnvStart, "RESET_TIMEOUT_S", 0.2)
    try:
        with pytest.raises(TimeoutError, match="reset did not finish within"):
            started.take()
        stuck, stuck_env = _start_with(monkeypatch, lambda: (release.wait(30), {}))
        stuck.close()  # a failed run cleaning up: a warning, not a second error
        assert stuck_env.closed == 0
        assert "reset did not finish within 0.2 s; left to end with the process" in capsys.readouterr().err
    finally:
        release.set()


def test_envs_nobody_took_are_closed_and_cannot_be_taken_after(monkeypatch):
    started, fake = _start_with(monkeypatch, lambda: (np.zeros((2, 4, 84, 84), np.uint8), {}))
    started.close()
    assert fake.closed == 1
    with pytest.raises(RuntimeError, match="already taken or closed"):
        started.take()


def _hooks(tmp_path, recipe, *overrides, launcher=True):
    manager = build_plugin_manager()
    cfg, spec, options = prepare(recipe, list(overrides), manager)
    manager.pm.register(spec.factory(options, cfg), name=RUN_COMMUNICATOR)
    return RunHooks(manager, Run(cfg, options, tmp_path, recipe, launcher=launcher))


@pytest.mark.parametrize("recipe, overrides, launcher", [
    ("a2c-cartpole-local", [], True),  # gymnasium's envs: a reset that holds the GIL gains nothing
    ("ga3c-pong-queues", ["env.num_envs=2"], True),  # queues makes its own rollout source (actors)
    ("gala-pong", ["env.num_envs=2"], True),  # the launcher of several learners does not train
    ("a2c-pong-local", ["env.num_envs=2"], False),  # a launched learner (its rank's seed)
])
def test_envs_start_early_only_where_the_default_rollout_source_will_take_them(tmp_path, recipe, overrides,
                                                                              launcher):
    hooks = _hooks(tmp_path, recipe, *overrides, launcher=launcher)
    hooks.start_envs()
    assert hooks._env_start is None


@pytest.mark.slow
def test_a_new_pong_run_trains_on_the_envs_it_started_early(tmp_path, monkeypatch):
    started, taken = [], []
    init = EnvStart.__init__
    monkeypatch.setattr(EnvStart, "__init__", lambda self, cfg, seed: started.append(seed) or init(self, cfg, seed))
    take = EnvStart.take

    def recording_take(self):
        env, obs = take(self)
        taken.append(env)
        return env, obs

    monkeypatch.setattr(EnvStart, "take", recording_take)
    stepped = []
    from rlkit.learner.rollout import LocalRollout

    collect = LocalRollout.collect
    monkeypatch.setattr(LocalRollout, "collect", lambda self: stepped.append(self.env) or collect(self))
    result = train("a2c-pong-local", ["algo.total_steps=40", "env.num_envs=2", "algo.stop_at_score=null",
                                      f"logging.root={tmp_path}", "logging.run_name=pong", "logging.backends=[csv]",
                                      "trainer.progress_bar=false"])
    assert result.agent_steps == 40
    assert started == [0] and len(taken) == 1 and stepped and all(env is taken[0] for env in stepped)

    # a resumed run's envs get other seeds (ActorCriticModule.env_seed): it builds them as before
    from rlkit.training.run import resume

    stepped.clear()
    resumed = resume(tmp_path / "pong", ["algo.total_steps=80"])
    assert resumed.agent_steps == 80 and stepped
    assert started == [0] and len(taken) == 1  # none started early for the resumed run
