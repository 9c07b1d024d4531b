"""Policy + value networks: the Nature CNN for image observations (or the A3C network, or MinAtar's),
an MLP for vectors; a categorical head for Discrete actions, a diagonal Gaussian for Box actions."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from rlkit.config.schema import ModelConfig
from rlkit.infra.errors import UserError
from rlkit.learner.losses import floored_log_prob

CHANNELS_LAST = True  # rlkit/bench/studies/hotpath.py --only channels_last turns it off for the NCHW side


def _conv_input(x: torch.Tensor) -> torch.Tensor:
    """Image batches on the CPU go to the convolutions channels-last (NHWC): oneDNN's
    kernels for that layout made the Nature CNN's train step (batch 80, 2 threads) 0.83x as long as
    with NCHW input (``rlkit/bench/studies/hotpath.py --only channels_last``; docs/benchmarks.md, "The hot path
    of one update"). The same numbers, another memory order. Under bf16 autocast NCHW was as fast or
    faster, so it is left as it is. Called on the uint8 frames, before scaling: the one copy is a
    quarter of the size, and the scaling keeps the layout."""
    if CHANNELS_LAST and x.device.type == "cpu" and not _autocast_on_cpu():
        return x.contiguous(memory_format=torch.channels_last)
    return x


def _autocast_on_cpu() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch before 2.4 has no device argument
        return torch.is_autocast_cpu_enabled()


def _init(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """Mnih et al. 2015: conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512; uint8 input scaled by 1/255."""

    def __init__(self, in_shape: tuple[int, ...], channels: list[int], hidden: int):
        super().__init__()
        c1, c2, c3 = channels
        relu = math.sqrt(2)
        self.convs = nn.Sequential(
            _init(nn.Conv2d(in_shape[0], c1, 8, 4), relu), nn.ReLU(),
            _init(nn.Conv2d(c1, c2, 4, 2), relu), nn.ReLU(),
            _init(nn.Conv2d(c2, c3, 3, 1), relu), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *in_shape)).shape[1]
        self.fc = nn.Sequential(_init(nn.Linear(flat, hidden), relu), nn.ReLU())
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(_conv_input(obs).float() / 255.0))


class A3CCNN(nn.Module):
    """The A3C network (Mnih et al. 2016) that GA3C uses: conv 16x8x8/4, 32x4x4/2, fc 256; uint8 input
    mapped to [-1, 1) by x / 128 - 1 as GA3C does. About a third of the Nature CNN's compute."""

    def __init__(self, in_shape: tuple[int, ...], hidden: int = 256):
        super().__init__()
        relu = math.sqrt(2)
        self.convs = nn.Sequential(
            _init(nn.Conv2d(in_shape[0], 16, 8, 4), relu), nn.ReLU(),
            _init(nn.Conv2d(16, 32, 4, 2), relu), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *in_shape)).shape[1]
        self.fc = nn.Sequential(_init(nn.Linear(flat, hidden), relu), nn.ReLU())
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(_conv_input(obs).float() / 128.0 - 1.0))


class MinAtarCNN(nn.Module):
    """MinAtar's network (Young & Tian 2019): conv 16x3x3/1, fc 128, on the games' 10x10xC boolean
    grids. MinAtar observations are channel-last; they are moved to channel-first here."""

    def __init__(self, in_shape: tuple[int, ...], channels: int = 16, hidden: int = 128):
        super().__init__()
        height, width, depth = in_shape
        relu = math.sqrt(2)
        self.conv = nn.Sequential(_init(nn.Conv2d(depth, channels, 3, 1), relu), nn.ReLU(), nn.Flatten())
        flat = channels * (height - 2) * (width - 2)
        self.fc = nn.Sequential(_init(nn.Linear(flat, hidden), relu), nn.ReLU())
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(obs.permute(0, 3, 1, 2).float()))


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: list[int], activation: str):
        super().__init__()
        act = nn.Tanh if activation == "tanh" else nn.ReLU
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [_init(nn.Linear(in_dim, width), math.sqrt(2)), act()]
            in_dim = width
        self.net = nn.Sequential(nn.Flatten(), *layers)
        self.out_dim = in_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())


class Evaluation(NamedTuple):
    log_probs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor


class ActorCritic(nn.Module):
    """``act`` samples actions for a batch of observations; ``evaluate`` scores taken actions.

    ``autocast_dtype`` (None, or torch.bfloat16 under ``trainer.precision=bf16-mixed``) runs the
    bodies under ``torch.autocast`` on the observations' device in every caller (the learner's
    rollout and training pass, the queues predictors' threads); parameters stay float32."""

    def __init__(self, obs_space: spaces.Space, action_space: spaces.Space, cfg: ModelConfig,
                 autocast_dtype: torch.dtype | None = None):
        super().__init__()
        self.autocast_dtype = autocast_dtype
        self.obs_space, self.action_space = obs_space, action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        if not self.discrete and not isinstance(action_space, spaces.Box):
            raise UserError(f"env: action space {action_space} is not supported; use Discrete or Box")
        self.body = _make_body(obs_space, cfg)
        self.value_body = None if cfg.shared or _is_image(obs_space, cfg) else _make_body(obs_space, cfg)
        n_out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        self.policy_head = _init(nn.Linear(self.body.out_dim, n_out), 0.01)
        self.value_head = _init(nn.Linear(self.body.out_dim, 1), 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((n_out,), cfg.log_std_init))
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy logits or Gaussian mean, state value), in float32 whatever ``autocast_dtype`` says."""
        head, values, _ = self.forward_with_features(obs)
        return head, values

    def forward_with_features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``forward``'s (head, value) and the policy body's output (its last hidden layer), for
        diagnostics that look at the features without a second pass."""
        if self.autocast_dtype is None:
            features = self.body(obs)
            value_features = features if self.value_body is None else self.value_body(obs)
            return self.policy_head(features), self.value_head(value_features).squeeze(-1), features
        device = obs.device.type
        with torch.autocast(device, dtype=self.autocast_dtype):
            features = self.body(obs)
            value_features = features if self.value_body is None else self.value_body(obs)
        # the heads are a sliver of the compute: in float32, so that log-probs, entropies, values
        # and the loss built on them keep float32's precision
        with torch.autocast(device, enabled=False):
            head = self.policy_head(features.float())
            return head, self.value_head(value_features.float()).squeeze(-1), features

    def distribution(self, head: torch.Tensor):
        # no argument validation: a NaN head reaches the loss, where algo.on_nonfinite deals with it
        if self.discrete:
            return Categorical(logits=head, validate_args=False)
        return Normal(head, self.log_std.exp().expand_as(head), validate_args=False)

    @torch.no_grad()  # not inference_mode: callers may score the sampled actions with autograd
    def act(self, obs: torch.Tensor, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, values) for a batch of observations, without gradients."""
        head, values = self(obs)
        if greedy:
            actions = head.argmax(-1) if self.discrete else head
        elif self.discrete:  # what Categorical(logits=head).sample() draws, without building the distribution
            actions = torch.multinomial(torch.softmax(head, -1), 1).squeeze(-1)
        else:
            actions = self.distribution(head).sample()
        return actions, values

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """What the environment is given: Gaussian samples are clipped to the action bounds."""
        if not self.discrete:
            actions = torch.maximum(torch.minimum(actions, self.high), self.low)
        return actions.cpu().numpy()

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor,
                 log_prob_floor: float | None = None) -> Evaluation:
        head, values = self(obs)
        return self.evaluate_head(head, values, actions, log_prob_floor)

    def evaluate_head(self, head: torch.Tensor, values: torch.Tensor, actions: torch.Tensor,
                      log_prob_floor: float | None = None) -> Evaluation:
        """Log-probabilities of ``actions`` and entropies under the policy ``head`` parametrises."""
        dist = self.distribution(head)
        if self.discrete and log_prob_floor is not None:
            log_probs = floored_log_prob(dist.probs, actions, log_prob_floor)
        else:
            log_probs = dist.log_prob(actions)
        entropy = dist.entropy()
        if not self.discrete:  # independent dimensions: joint log-prob and entropy are sums
            log_probs, entropy = log_probs.sum(-1), entropy.sum(-1)
        return Evaluation(log_probs, entropy, values)


def _is_image(space: spaces.Space, cfg: ModelConfig) -> bool:
    if cfg.kind != "auto":
        return cfg.kind in ("cnn", "a3c_cnn", "minatar_cnn")
    return isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def _make_body(space: spaces.Space, cfg: ModelConfig) -> nn.Module:
    if not isinstance(space, spaces.Box):
        raise UserError(f"env: observation space {space} is not supported; use a Box")
    if _is_image(space, cfg):
        if len(space.shape) != 3:
            layout = "[H, W, C]" if cfg.kind == "minatar_cnn" else "[C, H, W]"
            raise UserError(f"model.kind: {cfg.kind} needs {layout} observations, got shape {space.shape}")
        if cfg.kind == "minatar_cnn":
            return MinAtarCNN(tuple(space.shape))
        if cfg.kind == "a3c_cnn":
            return A3CCNN(tuple(space.shape))
        return NatureCNN(tuple(space.shape), list(cfg.cnn_channels), cfg.cnn_hidden)
    return MLP(int(np.prod(space.shape)), list(cfg.hidden), cfg.activation)
