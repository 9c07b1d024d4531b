"""The learner's training pass and bf16 autocast: same math as before, float32 where it matters."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlkit.config.recipes import load_recipe
from rlkit.config.schema import ModelConfig
from rlkit.hooks.batch import Batch
from rlkit.learner.losses import a2c_loss, normalize, returns_and_advantages
from rlkit.learner.models import ActorCritic
from rlkit.learner.module import ActorCriticModule

PONG_SPACES = (spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6))
CARTPOLE_SPACES = (spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))


def one_pass_over_t_plus_1(module, batch):
    """The training pass as it was: one forward over s_0..s_T, the value of s_T detached."""
    a = module.recipe.algo
    T, N = batch.rewards.shape
    head, all_values = module.model(batch.obs.reshape((T + 1) * N, *batch.obs.shape[2:]))
    ev = module.model.evaluate_head(head[: T * N], all_values[: T * N], batch.actions.reshape(-1), a.log_prob_floor)
    values = all_values.detach().reshape(T + 1, N)
    returns, advantages = returns_and_advantages(batch.rewards, values[:T], batch.dones, values[T], a.gamma,
                                                 a.gae_lambda)
    if a.normalize_advantages:
        advantages = normalize(advantages)
    return a2c_loss(ev.log_probs, ev.entropy, ev.values, returns.reshape(-1), advantages.reshape(-1),
                    a.value_coef, a.entropy_coef, a.loss_reduction)


def fixed_batch(obs_space, action_space, T, N):
    g = torch.Generator().manual_seed(3)
    if obs_space.dtype == np.uint8:
        obs = torch.randint(0, 256, (T + 1, N, *obs_space.shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn((T + 1, N, *obs_space.shape), generator=g)
    actions = torch.randint(0, int(action_space.n), (T, N), generator=g)
    rewards = torch.randn((T, N), generator=g)
    dones = (torch.rand((T, N), generator=g) < 0.2).float()
    return Batch(obs, actions, rewards, dones, T * N)


def losses_and_grads(module, loss_fn, batch):
    module.zero_grad(set_to_none=True)
    losses = loss_fn(batch)
    losses.total.backward()
    return losses, [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("recipe,spaces_,extra", [
    ("a2c-pong-local", PONG_SPACES, []),
    ("a2c-cartpole-local", CARTPOLE_SPACES, []),
    ("a2c-cartpole-local", CARTPOLE_SPACES, ["algo.gae_lambda=0.95", "algo.normalize_advantages=true",
                                             "algo.loss_reduction=sum", "algo.log_prob_floor=1e-6"]),
])
def test_split_bootstrap_pass_gives_the_same_loss_and_gradients(recipe, spaces_, extra):
    torch.manual_seed(0)
    module = ActorCriticModule(load_recipe(recipe, extra), *spaces_)
    batch = fixed_batch(*spaces_, T=5, N=4)
    new, new_grads = losses_and_grads(module, module.compute_loss, batch)
    old, old_grads = losses_and_grads(module, lambda b: one_pass_over_t_plus_1(module, b), batch)
    for field in new._fields:
        torch.testing.assert_close(getattr(new, field), getattr(old, field), rtol=1e-5, atol=1e-6)
    for g_new, g_old in zip(new_grads, old_grads):
        torch.testing.assert_close(g_new, g_old, rtol=1e-4, atol=1e-6)


def autocast_seen_by_body(model, obs):
    """(autocast on?, the body's output dtype) for each body forward of one act call."""
    seen = []
    model.body.register_forward_hook(lambda m, i, out: seen.append((torch.is_autocast_enabled(obs.device.type),
                                                                      out.dtype)))
    model.act(obs)
    return seen


def test_act_runs_under_autocast_when_asked_and_answers_in_float32():
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert autocast_seen_by_body(ActorCritic(*PONG_SPACES, ModelConfig()), obs) == [(False, torch.float32)]
    model = ActorCritic(*PONG_SPACES, ModelConfig(), autocast_dtype=torch.bfloat16)
    assert autocast_seen_by_body(model, obs) == [(True, torch.bfloat16)]  # the compute autocast speeds up
    head, values = model(obs)
    assert head.dtype == values.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_act_autocasts_in_another_thread_too():
    """The queues predictors act in threads of their own, which Lightning's autocast (per thread) misses."""
    import threading

    model = ActorCritic(*PONG_SPACES, ModelConfig(), autocast_dtype=torch.bfloat16)
    seen = []
    thread = threading.Thread(target=lambda: seen.extend(autocast_seen_by_body(
        model, torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8))))
    thread.start()
    thread.join()
    assert seen == [(True, torch.bfloat16)]


def test_bf16_mixed_recipe_sets_the_models_autocast():
    module = ActorCriticModule(load_recipe("a2c-cartpole-local", ["trainer.precision=bf16-mixed"]), *CARTPOLE_SPACES)
    assert module.model.autocast_dtype == torch.bfloat16
    assert ActorCriticModule(load_recipe("a2c-cartpole-local"), *CARTPOLE_SPACES).model.autocast_dtype is None


@pytest.mark.slow
def test_cartpole_trains_under_bf16_mixed_and_parameters_stay_float32(tmp_path, quick):
    import csv

    from rlkit.training.checkpoints import load_checkpoint
    from rlkit.training.run import train

    before = ActorCriticModule(load_recipe("a2c-cartpole-local"), *CARTPOLE_SPACES).state_dict()
    result = train("a2c-cartpole-local", [*quick, "algo.total_steps=8000", "algo.stop_at_score=null",
                                          "trainer.precision=bf16-mixed"])
    assert result.agent_steps == 8000
    state = load_checkpoint(result.run_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())
    assert any(not torch.equal(state[k], before[k]) for k in before)  # the optimizer moved them
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        losses = [float(r["loss/total"]) for r in csv.DictReader(fh) if r.get("loss/total")]
    assert losses and all(np.isfinite(losses))


def test_act_draws_what_the_categorical_distribution_draws():
    from torch.distributions import Categorical

    model = ActorCritic(*CARTPOLE_SPACES, ModelConfig())
    obs = torch.randn(64, 4)
    head, _ = model(obs)
    torch.manual_seed(5)
    actions, _ = model.act(obs)
    torch.manual_seed(5)
    assert torch.equal(actions, Categorical(logits=head.detach()).sample())


@pytest.mark.parametrize("recipe,spaces_", [("a2c-pong-local", PONG_SPACES), ("a2c-cartpole-local", CARTPOLE_SPACES)])
def test_diagnostics_read_the_training_pass_by_hand(recipe, spaces_):
    """The diagnostics at the log interval come from the training pass's own outputs (no second
    forward): dead units counted on the body's output for the batch, values and returns as the loss
    saw them. Checked against a separate forward pass with a few units killed on purpose."""
    from rlkit.learner.losses import explained_variance

    torch.manual_seed(0)
    module = ActorCriticModule(load_recipe(recipe), *spaces_)
    last = module.model.body.fc[0] if hasattr(module.model.body, "fc") else module.model.body.net[-2]
    with torch.no_grad():  # 3 of the last hidden units can never fire: bias far below any input
        last.bias[:3] = -1e6
    T, N = 5, 4
    batch = fixed_batch(*spaces_, T=T, N=N)
    module.compute_loss(batch)
    forwards = []
    handle = module.model.body.register_forward_hook(lambda *_: forwards.append(1))
    out = module.diagnostics()
    handle.remove()
    assert not forwards  # no second pass over the batch
    with torch.no_grad():
        features = module.model.body(batch.obs[:T].reshape(T * N, *batch.obs.shape[2:]))
        head, values = module.model(batch.obs[:T].reshape(T * N, *batch.obs.shape[2:]))
        _, last_value = module.model(batch.obs[T])
    dead = (features.max(0).values <= 0).float().mean().item()
    assert dead >= 3 / features.shape[1] and out["model/dead_units"] == pytest.approx(dead)
    returns, _ = returns_and_advantages(batch.rewards, values.reshape(T, N), batch.dones, last_value,
                                        module.recipe.algo.gamma, module.recipe.algo.gae_lambda)
    assert out["value/explained_variance"] == pytest.approx(explained_variance(values, returns.reshape(-1)), rel=1e-5)
    assert out["value/mean"] == pytest.approx(values.mean().item(), rel=1e-5)
    assert out["policy/max_prob"] == pytest.approx(torch.softmax(head, -1).max(-1).values.mean().item(), rel=1e-5)
