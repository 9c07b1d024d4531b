"""Golden values for the A2C math, computed by hand."""

import math

import torch

from rlkit.learner.losses import (
    a2c_loss,
    explained_variance,
    floored_log_prob,
    gae_advantages,
    nstep_returns,
    returns_and_advantages,
    update_size,
)


def t(x):
    return torch.tensor(x, dtype=torch.float32)


def test_nstep_returns_bootstrap_and_episode_end():
    # 3 steps, 2 envs; env 1's episode ends at t=1, so t=0,1 do not see its bootstrap.
    rewards = t([[1.0, 1.0], [0.0, 2.0], [1.0, 0.5]])
    dones = t([[0, 0], [0, 1], [0, 0]])
    last_value = t([10.0, 4.0])
    g = 0.5
    R = nstep_returns(rewards, dones, last_value, g)
    # env 0: R2 = 1 + .5*10 = 6; R1 = 0 + .5*6 = 3; R0 = 1 + .5*3 = 2.5
    # env 1: R2 = .5 + .5*4 = 2.5; R1 = 2 (done); R0 = 1 + .5*2 = 2
    assert torch.allclose(R, t([[2.5, 2.0], [3.0, 2.0], [6.0, 2.5]]))


def test_gae_matches_hand_computation():
    rewards = t([[1.0], [0.0]])
    values = t([[0.5], [1.0]])
    dones = t([[0], [0]])
    last_value = t([2.0])
    g, lam = 0.9, 0.8
    A = gae_advantages(rewards, values, dones, last_value, g, lam)
    d1 = 0.0 + 0.9 * 2.0 - 1.0  # 0.8
    d0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    assert torch.allclose(A, t([[d0 + g * lam * d1], [d1]]))


def test_gae_with_lambda_one_equals_nstep_advantage():
    torch.manual_seed(0)
    rewards, values = torch.randn(5, 3), torch.randn(5, 3)
    dones = (torch.rand(5, 3) < 0.3).float()
    last = torch.randn(3)
    R, A = returns_and_advantages(rewards, values, dones, last, 0.99, None)
    R1, A1 = returns_and_advantages(rewards, values, dones, last, 0.99, 1.0)
    assert torch.allclose(A, A1, atol=1e-6) and torch.allclose(R, R1, atol=1e-6)
    assert torch.allclose(A, nstep_returns(rewards, dones, last, 0.99) - values)


def test_a2c_loss_terms():
    log_probs = t([math.log(0.5), math.log(0.25)])
    entropy = t([0.6, 0.4])
    values = t([1.0, 2.0])
    returns = t([2.0, 0.0])
    adv = t([1.0, -2.0])
    loss = a2c_loss(log_probs, entropy, values, returns, adv, value_coef=0.5, entropy_coef=0.01)
    policy = -(1.0 * math.log(0.5) + -2.0 * math.log(0.25)) / 2  # = -(−0.693 + 2.773)/2
    value = ((2 - 1) ** 2 + (0 - 2) ** 2) / 2  # 2.5
    assert math.isclose(loss.policy.item(), policy, rel_tol=1e-6)
    assert math.isclose(loss.value.item(), value, rel_tol=1e-6)
    assert math.isclose(loss.entropy.item(), 0.5, rel_tol=1e-6)
    assert math.isclose(loss.total.item(), policy + 0.5 * value - 0.01 * 0.5, rel_tol=1e-6)


def test_a2c_policy_gradient_does_not_flow_into_advantage():
    values = torch.tensor([1.0], requires_grad=True)
    adv = (torch.tensor([3.0]) - values)
    log_probs = torch.tensor([-1.0], requires_grad=True)
    loss = a2c_loss(log_probs, torch.zeros(1), values, torch.tensor([3.0]), adv, 0.0, 0.0)
    loss.total.backward()
    assert values.grad is None or values.grad.abs().sum() == 0
    assert log_probs.grad.item() == -2.0


def test_floored_log_prob():
    probs = t([[0.7, 0.3 - 1e-9, 1e-9]])
    assert math.isclose(floored_log_prob(probs, torch.tensor([0]), 1e-6).item(), math.log(0.7), rel_tol=1e-6)
    assert math.isclose(floored_log_prob(probs, torch.tensor([2]), 1e-6).item(), math.log(1e-6), rel_tol=1e-5)


def test_a2c_loss_sum_reduction_is_ga3c_sum_over_the_batch():
    log_probs, entropy = t([-1.0, -2.0, -0.5]), t([1.0, 0.5, 1.5])
    values, returns, adv = t([0.0, 1.0, 2.0]), t([1.0, 1.0, 0.0]), t([2.0, -1.0, 0.5])
    s = a2c_loss(log_probs, entropy, values, returns, adv, 0.5, 0.01, reduction="sum")
    # policy: -(2*-1 + -1*-2 + 0.5*-0.5) = 0.25; value: 1 + 0 + 4 = 5; entropy: 3
    assert math.isclose(s.policy.item(), 0.25, rel_tol=1e-6)
    assert math.isclose(s.value.item(), 5.0, rel_tol=1e-6)
    assert math.isclose(s.entropy.item(), 3.0, rel_tol=1e-6)
    assert math.isclose(s.total.item(), 0.25 + 0.5 * 5.0 - 0.01 * 3.0, rel_tol=1e-6)
    m = a2c_loss(log_probs, entropy, values, returns, adv, 0.5, 0.01)
    assert math.isclose(s.total.item(), 3 * m.total.item(), rel_tol=1e-6)


def test_explained_variance_on_a_fixed_batch():
    returns = t([1.0, 2.0, 3.0, 4.0])  # variance 1.25
    assert explained_variance(returns, returns) == 1.0
    assert explained_variance(t([2.5, 2.5, 2.5, 2.5]), returns) == 0.0
    # residuals [0.5, -0.5, 0.5, -0.5]: variance 0.25 -> 1 - 0.25 / 1.25 = 0.8
    assert math.isclose(explained_variance(t([0.5, 2.5, 2.5, 4.5]), returns), 0.8, rel_tol=1e-6)
    # predicting the negated returns: residual variance 4 * 1.25 -> 1 - 4 = -3
    assert math.isclose(explained_variance(-returns, returns), -3.0, rel_tol=1e-6)
    assert math.isnan(explained_variance(t([0.0, 1.0]), t([1.0, 1.0])))


def test_update_size_by_hand():
    before = [t([3.0, 0.0]), t([4.0])]  # |theta_before| = 5
    after = [t([3.0, 0.3]), t([4.4])]  # delta = [0, 0.3, 0.4]: |delta| 0.5, rms 0.5 / sqrt 3
    after_norm = math.sqrt(9 + 0.09 + 4.4 ** 2)
    out = update_size(before, after, lr=0.1)
    assert math.isclose(out["optim/update_ratio"], 0.5 / after_norm, rel_tol=1e-6)
    assert math.isclose(out["optim/step_per_lr"], 0.5 / math.sqrt(3) / 0.1, rel_tol=1e-6)
