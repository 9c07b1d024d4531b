"""TensorFlow-semantics RMSprop: steps equal hand-computed ones."""

import math

import pytest
import torch

from rlkit.learner.optim import TFRMSprop


def test_tf_rmsprop_steps_equal_hand_computed_ones():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = TFRMSprop([p], lr=0.1, alpha=0.9, eps=0.01)
    p.grad = torch.tensor([0.5, -4.0])
    opt.step()
    # ms = 0.9 * 1 + 0.1 * g^2 = [0.925, 2.5]; p -= 0.1 * g / sqrt(ms + 0.01)
    ms1 = [0.925, 2.5]
    want = [1.0 - 0.1 * 0.5 / math.sqrt(0.935), -2.0 + 0.1 * 4.0 / math.sqrt(2.51)]
    assert torch.allclose(p.detach(), torch.tensor(want), atol=1e-7)
    p.grad = torch.tensor([1.0, 0.0])
    opt.step()
    ms2 = [0.9 * ms1[0] + 0.1 * 1.0, 0.9 * ms1[1]]
    want = [want[0] - 0.1 * 1.0 / math.sqrt(ms2[0] + 0.01), want[1]]
    assert torch.allclose(p.detach(), torch.tensor(want), atol=1e-7)
    assert torch.allclose(opt.state[p]["square_avg"], torch.tensor(ms2))


def test_tf_rmsprop_first_step_is_small_where_pytorch_rmsprop_is_not():
    """The reason it exists: PyTorch's first step is ~lr / sqrt(1 - alpha) per weight, whatever g is."""
    g = torch.full((4,), 1e-3)
    steps = {}
    for name, make in [("tf", lambda ps: TFRMSprop(ps, lr=1e-3, alpha=0.99, eps=1e-5)),
                       ("torch", lambda ps: torch.optim.RMSprop(ps, lr=1e-3, alpha=0.99, eps=1e-5))]:
        p = torch.nn.Parameter(torch.zeros(4))
        opt = make([p])
        p.grad = g.clone()
        opt.step()
        steps[name] = p.detach().abs().max().item()
    assert steps["torch"] == pytest.approx(1e-3 * 1e-3 / (1e-3 * math.sqrt(0.01) + 1e-5))  # ~10 x lr
    assert steps["tf"] == pytest.approx(1e-3 * 1e-3 / math.sqrt(0.99 + 0.01 * 1e-6 + 1e-5), rel=1e-5)  # ~lr * g


def test_tf_rmsprop_is_a_recipe_choice(tmp_path):
    from rlkit.config.schema import AlgoConfig
    from rlkit.learner.optim import make_optimizer

    algo = AlgoConfig(optimizer="rmsprop_tf", lr=3e-4, eps=0.1, alpha=0.99)
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], algo)
    assert isinstance(opt, TFRMSprop)
    assert opt.defaults["eps"] == 0.1 and opt.defaults["lr"] == 3e-4


def test_tf_eps_inside_the_root_shrinks_steady_state_steps_for_small_gradients():
    """Why rmsprop_tf at lr 0.0014 barely moved GALA's Pong policy: once the mean square has
    forgotten its start, a weight whose gradients are ~1e-5 (the median fc weight of a Pong run)
    moves lr * g / sqrt(g^2 + eps) ~ lr * 0.003 with eps 1e-5 inside the root, against ~lr for
    PyTorch's RMSprop (eps outside the root)."""
    from rlkit.learner.losses import update_size

    steps = {}
    for name, cls in (("torch", torch.optim.RMSprop), ("tf", TFRMSprop)):
        w = torch.zeros(1000, requires_grad=True)
        opt = cls([w], lr=1e-3, alpha=0.99, eps=1e-5)
        gen = torch.Generator().manual_seed(0)
        for _ in range(3000):  # 0.99^3000: the initial mean square is forgotten
            w.grad = 1e-5 * torch.randn(1000, generator=gen)
            before = [w.detach().clone()]
            opt.step()
        steps[name] = update_size(before, [w], lr=1e-3)["optim/step_per_lr"]
    assert 0.5 < steps["torch"] < 2.0
    assert steps["tf"] < 0.01
