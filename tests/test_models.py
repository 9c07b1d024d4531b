import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rlkit.config.schema import ModelConfig
from rlkit.infra.errors import UserError
from rlkit.learner.models import ActorCritic, MinAtarCNN


def test_nature_cnn_on_uint8_frames():
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = ActorCritic(obs_space, spaces.Discrete(6), ModelConfig())
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    actions, values = model.act(obs)
    assert actions.shape == (3,) and values.shape == (3,) and actions.max() < 6
    ev = model.evaluate(obs, actions)
    assert ev.log_probs.shape == (3,) and torch.all(ev.log_probs <= 0)
    # orthogonal init with a small policy gain: the initial policy is near uniform
    assert torch.allclose(ev.entropy, torch.full((3,), float(np.log(6))), atol=0.05)


def test_gaussian_head_for_box_actions_is_clipped_to_bounds():
    model = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-2, 2, (2,), np.float32),
                        ModelConfig(log_std_init=2.0))
    obs = torch.zeros(64, 3)
    actions, _ = model.act(obs)
    env_actions = model.env_actions(actions)
    assert env_actions.shape == (64, 2) and np.all(np.abs(env_actions) <= 2)
    ev = model.evaluate(obs, actions)
    assert ev.log_probs.shape == (64,) and ev.entropy.shape == (64,)


def test_separate_mlp_bodies_when_not_shared():
    model = ActorCritic(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), ModelConfig(shared=False))
    assert model.value_body is not None


def test_a3c_cnn_is_ga3cs_network():
    from torch import nn

    from rlkit.learner.models import A3CCNN

    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = ActorCritic(obs_space, spaces.Discrete(6), ModelConfig(kind="a3c_cnn"))
    assert isinstance(model.body, A3CCNN)
    convs = [m for m in model.body.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))]
    assert model.body.fc[0].out_features == 256 and model.body.fc[0].in_features == 32 * 9 * 9
    # input x / 128 - 1: black is -1, white just under 1 (the first conv sees exactly that)
    seen = {}
    convs[0].register_forward_hook(lambda m, inp, out: seen.update(x=inp[0]))
    obs = torch.tensor([0, 255], dtype=torch.uint8).repeat_interleave(4 * 84 * 42).reshape(1, 4, 84, 84)
    model.act(obs)
    assert seen["x"].min().item() == -1.0 and abs(seen["x"].max().item() - 127 / 128) < 1e-6
    nature = ActorCritic(obs_space, spaces.Discrete(6), ModelConfig(kind="cnn"))
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in nature.parameters()) / 2


def _conv_inputs(model, obs):
    """The tensors the first convolution of ``model`` receives."""
    seen = []
    handle = model.body.convs[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        out = model(obs)
    finally:
        handle.remove()
    return out, seen[0]


@pytest.mark.parametrize("kind", ["cnn", "a3c_cnn"])
def test_cnn_input_goes_channels_last_on_cpu_with_the_same_numbers(kind, monkeypatch):
    from rlkit.learner import models
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    torch.manual_seed(0)
    model = ActorCritic(obs_space, spaces.Discrete(6), ModelConfig(kind=kind))
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)

    def loss_and_grads(channels_last: bool):
        monkeypatch.setattr(models, "CHANNELS_LAST", channels_last)
        model.zero_grad()
        (head, values), x = _conv_inputs(model, obs)
        (head.logsumexp(-1) + values).sum().backward()
        return x, head, values, [p.grad.clone() for p in model.parameters()]

    x_nhwc, head_nhwc, values_nhwc, grads_nhwc = loss_and_grads(True)
    x_nchw, head_nchw, values_nchw, grads_nchw = loss_and_grads(False)
    assert x_nhwc.is_contiguous(memory_format=torch.channels_last) and not x_nhwc.is_contiguous()
    assert x_nchw.is_contiguous()
    torch.testing.assert_close(head_nhwc, head_nchw, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(values_nhwc, values_nchw, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads_nhwc, grads_nchw):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
    # under bf16 autocast (trainer.precision=bf16-mixed) the layout stays NCHW: it was no faster
    monkeypatch.setattr(models, "CHANNELS_LAST", True)
    model.autocast_dtype = torch.bfloat16
    _, x_bf16 = _conv_inputs(model, obs)
    assert x_bf16.is_contiguous()


# -- MinAtar's network (model.kind: minatar_cnn) ---------------------------------------------------


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
    with pytest.raises(UserError, match=r"model.kind: minatar_cnn needs \[H, W, C\] observations"):
        ActorCritic(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), ModelConfig(kind="minatar_cnn"))
