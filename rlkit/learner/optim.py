"""Optimizers. ``TFRMSprop`` is RMSProp with TensorFlow 1's semantics, as OpenAI baselines' A2C and
GA3C ran it: the mean square starts at 1 (not 0) and eps sits inside the square root.

PyTorch's ``RMSprop`` starts the mean square at 0 with no bias correction and adds eps outside the
root, so its first steps move every weight by about ``lr / sqrt(1 - alpha)`` (10 x lr at alpha 0.99),
whatever the gradient's size, and later ones by about lr. TensorFlow's first steps are about ``lr * g``,
and because eps sits inside the root its steps stay ``lr * g / sqrt(g^2 + eps)``: smaller than
PyTorch's wherever a weight's gradient RMS is below sqrt(eps) (3e-3 at eps 1e-5). On Pong that is most
weights: in GALA's run the fc layer's steps were 0.04 x and the policy head's 0.13 x PyTorch's at the
same lr (``rlkit/bench/studies/optim_state.py``; docs/findings.md, "RMSprop's form and the lr rule"). The two are not interchangeable at one lr.
"""

from __future__ import annotations

import torch

from rlkit.infra import upstream


class TFRMSprop(torch.optim.Optimizer):
    """ms <- alpha * ms + (1 - alpha) * g^2 (ms starts at ``initial_ms``); p <- p - lr * g / sqrt(ms + eps)."""

    def __init__(self, params, lr: float = 7e-4, alpha: float = 0.99, eps: float = 1e-5,
                 initial_ms: float = 1.0):
        if lr <= 0 or not 0 < alpha <= 1 or eps <= 0 or initial_ms < 0:
            raise ValueError(f"TFRMSprop: invalid lr={lr}, alpha={alpha}, eps={eps} or initial_ms={initial_ms}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, initial_ms=initial_ms))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            squares = []
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["square_avg"] = torch.full_like(p, group["initial_ms"], memory_format=torch.preserve_format)
                state["step"] += 1
                squares.append(state["square_avg"])
            alpha = group["alpha"]
            upstream.foreach_mul_(squares, alpha)
            upstream.foreach_addcmul_(squares, grads, grads, value=1 - alpha)
            denom = upstream.foreach_add(squares, group["eps"])
            upstream.foreach_sqrt_(denom)
            upstream.foreach_addcdiv_(params, grads, denom, value=-group["lr"])
        return loss


def make_optimizer(params, algo) -> torch.optim.Optimizer:
    """The optimizer ``algo.optimizer`` names, with the recipe's lr, alpha and eps."""
    if algo.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=algo.lr, alpha=algo.alpha, eps=algo.eps)
    if algo.optimizer == "rmsprop_tf":
        return TFRMSprop(params, lr=algo.lr, alpha=algo.alpha, eps=algo.eps)
    return torch.optim.Adam(params, lr=algo.lr, eps=algo.eps)
