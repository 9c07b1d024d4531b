"""One learner's compute, A/B side by side in one process (issue 16), on a recipe's network.

1. The training pass: forward + backward over the T+1 observations of a rollout (the bootstrap value
   of s_T comes out of the same pass) against forward + backward over the T*N rollout
   observations plus a no-grad forward over the N observations s_T.
2. bf16 autocast against float32: the train step (loss, backward, clip, optimizer step, batch T*N)
   and the act forward (batch N).
3. Acting (batch N): ``ActorCritic.act`` (softmax + multinomial) against building a validated
   ``Categorical`` and sampling from it, as ``act`` did before.
4. The CNNs' float32 CPU input channels-last (NHWC, rlkit's default) against NCHW: train step
   and act forward.
5. ``--only malloc``: the train step with glibc keeping freed memory (``rlkit.infra.memory``, what a run
   does by default) against glibc's defaults. The allocator's settings are per process and cannot
   be undone, so each measurement is a child process; the two kinds alternate.
6. ``--only reuse``: one update's compute (T acts on N observations and the train step) as rlkit
   does it (acts without gradients, then forward + backward over the T*N observations) against
   keeping each act's autograd graph and back-propagating through those (no second forward over
   the rollout; the same loss, since the parameters do not change during a rollout).

Variants alternate inside every round, so a noisy neighbour slows them alike; the report is each
round's ratio and the median ratio (times are per call, median over rounds).

    nice -n 10 python -m rlkit.bench.studies.hotpath --recipe a2c-pong-local --threads 1 --clock cpu --rounds 9 --reps 10
    python -m rlkit.bench.studies.hotpath --recipe a2c-pong-local --device cuda   # on a GPU host
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from rlkit.config.recipes import load_recipe
from rlkit.learner import models
from rlkit.learner.envs import env_spaces
from rlkit.learner.losses import a2c_loss, returns_and_advantages
from rlkit.learner.models import ActorCritic
from rlkit.learner.optim import make_optimizer


def setup(recipe_name: str, device: str = "cpu"):
    cfg = load_recipe(recipe_name)
    obs_space, action_space = env_spaces(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(obs_space, action_space, cfg.model).to(device)
    T, N = cfg.algo.rollout_len, cfg.env.num_envs
    obs = torch.as_tensor(obs_space.sample()).expand(T + 1, N, *obs_space.shape).clone()
    obs = torch.randint(0, 255, obs.shape, dtype=torch.uint8) if obs.dtype == torch.uint8 else obs.float()
    actions = torch.randint(0, int(action_space.n), (T, N))
    rewards, dones = torch.randn(T, N), torch.zeros(T, N)
    batch = tuple(t.to(device) for t in (obs, actions, rewards, dones))
    return cfg, model, make_optimizer(model.parameters(), cfg.algo), batch


def loss_t_plus_1(model, cfg, obs, actions, rewards, dones):
    T, N = rewards.shape
    head, all_values = model(obs.reshape((T + 1) * N, *obs.shape[2:]))
    values = all_values.detach().reshape(T + 1, N)
    return _loss(model, cfg, head[: T * N], all_values[: T * N], values[:T], values[T], actions, rewards, dones)


def loss_split(model, cfg, obs, actions, rewards, dones):
    T, N = rewards.shape
    head, values = model(obs[:T].reshape(T * N, *obs.shape[2:]))
    with torch.no_grad():
        _, last_value = model(obs[T])
    return _loss(model, cfg, head, values, values.detach().reshape(T, N), last_value, actions, rewards, dones)


def _loss(model, cfg, head, values, detached, last_value, actions, rewards, dones):
    a = cfg.algo
    ev = model.evaluate_head(head, values, actions.reshape(-1), a.log_prob_floor)
    returns, advantages = returns_and_advantages(rewards, detached, dones, last_value, a.gamma, a.gae_lambda)
    return a2c_loss(ev.log_probs, ev.entropy, ev.values, returns.reshape(-1), advantages.reshape(-1),
                    a.value_coef, a.entropy_coef, a.loss_reduction).total


def train_step(model, opt, cfg, batch, loss_fn, bf16: bool):
    model.autocast_dtype = torch.bfloat16 if bf16 else None  # as trainer.precision=bf16-mixed sets it
    loss = loss_fn(model, cfg, *batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.max_grad_norm or float("inf"))
    opt.step()


def act(model, obs, bf16: bool):
    model.autocast_dtype = torch.bfloat16 if bf16 else None
    model.act(obs)


def act_categorical(model, obs):
    from torch.distributions import Categorical

    with torch.no_grad():
        head, _ = model(obs)
        Categorical(logits=head).sample()


CLOCK = time.perf_counter
SYNC = lambda: None  # noqa: E731  (torch.cuda.synchronize on a GPU)


def per_call_ms(fn, reps: int) -> float:
    SYNC()
    start = CLOCK()
    for _ in range(reps):
        fn()
    SYNC()
    return 1000 * (CLOCK() - start) / reps


def update_recompute(model, opt, cfg, batch):
    """One update's compute as rlkit does it: T no-grad acts, then the split training pass."""
    obs = batch[0]
    for t in range(obs.shape[0] - 1):
        model.act(obs[t])
    train_step(model, opt, cfg, batch, loss_split, False)


def update_reuse(model, opt, cfg, batch):
    """The same update keeping each act's graph: T forwards with gradients on N observations,
    actions sampled from the detached head, one backward through the T graphs."""
    obs, actions, rewards, dones = batch
    T, N = rewards.shape
    heads, values = [], []
    for t in range(T):
        head, value = model(obs[t])
        torch.multinomial(torch.softmax(head.detach(), -1), 1)
        heads.append(head)
        values.append(value)
    with torch.no_grad():
        _, last_value = model(obs[T])
    values = torch.cat(values)
    loss = _loss(model, cfg, torch.cat(heads), values, values.detach().reshape(T, N), last_value,
                 actions, rewards, dones)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.max_grad_norm or float("inf"))
    opt.step()


def _layout(fn, channels_last: bool):
    """``fn`` with the CNNs' float32 CPU input channels-last (rlkit's default) or NCHW."""
    def run():
        models.CHANNELS_LAST = channels_last
        try:
            fn()
        finally:
            models.CHANNELS_LAST = True
    return run


def compare(variants: dict, rounds: int, reps: int) -> dict:
    """Per-call ms of each variant in each round (variants alternate, the order flips every round)."""
    names = list(variants)
    for fn in variants.values():  # warm-up: kernels picked, caches filled
        per_call_ms(fn, 3)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            times[n].append(per_call_ms(variants[n], reps))
    a, b = names
    ratios = [x / y for x, y in zip(times[a], times[b])]
    return {"ms": {n: statistics.median(t) for n, t in times.items()}, "ratio": f"{a} / {b}",
            "ratios": [round(x, 3) for x in ratios], "median_ratio": statistics.median(ratios)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="a2c-pong-local")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=20, help="calls per variant per round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: as rlkit sets them, one per core)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: the process's CPU time, steadier than wall time on a busy host (use with --threads 1)")
    p.add_argument("--only", choices=["bootstrap", "bf16", "sampling", "channels_last", "malloc", "reuse"],
                   help="one of the comparisons")
    p.add_argument("--malloc-child", choices=["keep", "default"], help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help="cpu or cuda (wall clock, synchronised)")
    p.add_argument("--json")
    a = p.parse_args()
    import os

    if a.only == "malloc" and not a.malloc_child:
        return print_out(malloc_compare(a), a.json)
    if a.malloc_child == "keep":
        from rlkit.infra.memory import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("hotpath: --only malloc needs glibc (keep_freed_memory() changed nothing here)")
    torch.set_num_threads(a.threads or os.cpu_count() or 1)
    global CLOCK, SYNC
    CLOCK = time.process_time if a.clock == "cpu" and a.device == "cpu" else time.perf_counter
    if a.device != "cpu":
        SYNC = torch.cuda.synchronize
    cfg, model, opt, batch = setup(a.recipe, a.device)
    T, N = cfg.algo.rollout_len, cfg.env.num_envs
    out = {"recipe": a.recipe, "device": a.device, "T": T, "N": N, "threads": torch.get_num_threads(),
           "clock": "wall" if CLOCK is time.perf_counter else "cpu"}
    if a.malloc_child:
        return print(json.dumps(malloc_child(model, opt, cfg, batch, a.reps)))
    if a.only in (None, "sampling"):
        obs = batch[0][0]
        out["act_sampling"] = compare({"multinomial": lambda: act(model, obs, False),
                                       "categorical": lambda: act_categorical(model, obs)}, a.rounds, a.reps * 5)
    if a.only in (None, "bootstrap"):
        out["train_bootstrap"] = compare(
            {"split": lambda: train_step(model, opt, cfg, batch, loss_split, False),
             "t_plus_1": lambda: train_step(model, opt, cfg, batch, loss_t_plus_1, False)}, a.rounds, a.reps)
    if a.only in (None, "reuse"):
        out["update_reuse"] = compare({"reuse": lambda: update_reuse(model, opt, cfg, batch),
                                       "recompute": lambda: update_recompute(model, opt, cfg, batch)},
                                      a.rounds, a.reps)
    if a.only in (None, "channels_last"):
        obs = batch[0][0]
        for what, fn in (("train", lambda: train_step(model, opt, cfg, batch, loss_split, False)),
                         ("act", lambda: act(model, obs, False))):
            out[f"{what}_channels_last"] = compare({"channels_last": _layout(fn, True), "nchw": _layout(fn, False)},
                                                   a.rounds, a.reps * (5 if what == "act" else 1))
    if a.only in (None, "bf16"):
        out["train_bf16"] = compare(
            {"bf16": lambda: train_step(model, opt, cfg, batch, loss_split, True),
             "fp32": lambda: train_step(model, opt, cfg, batch, loss_split, False)}, a.rounds, a.reps)
        obs = batch[0][0]
        out["act_bf16"] = compare({"bf16": lambda: act(model, obs, True), "fp32": lambda: act(model, obs, False)},
                                  a.rounds, a.reps * 5)
    print_out(out, a.json)


def print_out(out: dict, path: str | None) -> None:
    print(json.dumps(out, indent=1))
    if path:
        with open(path, "w") as fh:
            json.dump(out, fh, indent=2)


def malloc_child(model, opt, cfg, batch, reps: int) -> dict:
    """Per-call ms of the train step and minor page faults per call, in this process as it is set."""
    import resource

    step = lambda: train_step(model, opt, cfg, batch, loss_split, False)  # noqa: E731
    per_call_ms(step, 5)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ms = per_call_ms(step, reps)
    return {"ms": ms, "faults_per_step": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / reps}


def malloc_compare(a) -> dict:
    """The train step in child processes with freed memory kept (rlkit's default) or glibc's
    defaults, alternating; the ratio keep / default per round."""
    import subprocess
    import sys

    got: dict[str, list[dict]] = {"keep": [], "default": []}
    for r in range(a.rounds):
        for mode in (("keep", "default") if r % 2 == 0 else ("default", "keep")):
            argv = [sys.executable, __file__, "--recipe", a.recipe, "--reps", str(a.reps), "--threads",
                    str(a.threads), "--clock", a.clock, "--malloc-child", mode]
            got[mode].append(json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout))
    ratios = [k["ms"] / d["ms"] for k, d in zip(got["keep"], got["default"])]
    return {"recipe": a.recipe, "threads": a.threads or "one per core", "clock": a.clock, "train_malloc": {
        "ms": {m: statistics.median(x["ms"] for x in v) for m, v in got.items()},
        "faults_per_step": {m: statistics.median(x["faults_per_step"] for x in v) for m, v in got.items()},
        "ratio": "keep / default", "ratios": [round(x, 3) for x in ratios], "median_ratio": statistics.median(ratios)}}


if __name__ == "__main__":
    main()
