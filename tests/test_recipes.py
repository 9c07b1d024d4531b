from pathlib import Path

import pytest

from rlkit.config.recipes import bundled_recipes, load_recipe
from rlkit.hooks.manager import build_plugin_manager
from rlkit.infra.errors import UserError
from rlkit.training.run import prepare

ROOT = Path(__file__).resolve().parent.parent
ALL_RECIPES = bundled_recipes() + sorted((ROOT / "docs").rglob("recipes/*.yaml"))


def test_there_are_bundled_recipes():
    names = {p.stem for p in bundled_recipes()}
    assert {"a2c-cartpole-local", "a2c-pong-local"} <= names


@pytest.mark.parametrize("path", ALL_RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates_with_its_communicator(path):
    cfg, spec, options = prepare(str(path), [], build_plugin_manager())
    assert spec.name == cfg.communication.name
    assert cfg.algo.total_steps > 0


def test_pong_recipe_has_paper_defaults():
    cfg = load_recipe("a2c-pong-local")
    a = cfg.algo
    assert (cfg.env.num_envs, a.rollout_len, a.gamma, a.lr, a.eps, a.alpha) == (16, 5, 0.99, 7e-4, 1e-5, 0.99)
    assert (a.value_coef, a.entropy_coef, a.max_grad_norm, a.clip_rewards) == (0.5, 0.01, 0.5, True)
    assert cfg.env.id == "ALE/Pong-v5" and cfg.env.atari.frameskip == 4 and cfg.env.atari.noop_max == 30


def test_overrides_apply_and_are_typed():
    cfg = load_recipe("a2c-cartpole-local", ["algo.lr=0.001", "env.num_envs=4", "algo.gae_lambda=0.95"])
    assert cfg.algo.lr == 0.001 and cfg.env.num_envs == 4 and cfg.algo.gae_lambda == 0.95


@pytest.mark.parametrize("overrides, message", [
    (["algo.lrr=1"], "algo.lrr: unknown key 'lrr'; allowed: name, total_steps"),
    (["algo.lr=fast"], "algo.lr: 'fast' is not a valid float"),
    (["algo.lr=-1"], "algo.lr: -1.0 is not allowed; must be > 0"),
    (["env.num_envs=0"], "env.num_envs: 0 is not allowed; must be >= 1"),
    (["algo.optimizer=sgd"], "algo.optimizer: 'sgd' is not allowed; choose one of: rmsprop, rmsprop_tf, adam"),
    (["logging.backends=[csv,mlflow]"], "logging.backends"),
    (["nonsense"], "override 'nonsense': write key=value"),
    (["algo.lr=[1,"], "algo.lr: '[1,' is not a valid YAML value"),
    (["model.hidden.x=1"], "model.hidden: must be a list, not a mapping"),
    (["env.kwargs=[1]"], "env.kwargs: must be a mapping, not a list"),
    (["algo.lr.x=1"], "algo.lr: must be a single value, not a mapping"),
    (["algo=3"], "algo: 3 is not allowed; it is a section"),
    (["model.hidden=[[64]]"], "model.hidden[0]: '[64]' is not a valid integer"),
])
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(UserError) as err:
        load_recipe("a2c-cartpole-local", overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(UserError, match="recipe file not found"):
        load_recipe(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: [unclosed\n")
    with pytest.raises(UserError, match="YAML syntax error"):
        load_recipe(str(bad))
    empty_id = tmp_path / "noid.yaml"
    empty_id.write_text("algo:\n  lr: 0.1\n")
    with pytest.raises(UserError, match="env.id: required value is missing"):
        load_recipe(str(empty_id))


def test_devices_the_host_lacks_are_refused(monkeypatch):
    torch = pytest.importorskip("torch")
    r = "a2c-cartpole-local"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert load_recipe(r, ["trainer.accelerator=gpu"]).trainer.accelerator == "gpu"
    with pytest.raises(UserError, match="trainer.devices: 2 is not allowed; this host has 1 visible GPU "):
        load_recipe(r, ["trainer.accelerator=gpu", "trainer.devices=2"])
    with pytest.raises(UserError, match="trainer.devices: 2 is not allowed"):  # auto picks the GPU here
        load_recipe(r, ["trainer.accelerator=auto", "trainer.devices=2"])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "1")  # torchrun shows each learner process its own GPU
    assert load_recipe(r, ["trainer.accelerator=gpu", "trainer.devices=2"]).trainer.devices == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert load_recipe(r, ["trainer.accelerator=auto", "trainer.devices=2"]).trainer.devices == 2  # CPU processes
    with pytest.raises(UserError, match="trainer.accelerator: 'cuda' is not available on this host"):
        load_recipe(r, ["trainer.accelerator=cuda"])
