"""``rlkit bench core``: where one learner's time goes, measured side by side in one process.

For each env it measures (a) the raw vector env stepped with random actions, (b) the network's
act cost (one forward pass on num_envs observations) and train cost (loss, backward, clip,
optimizer step on one rollout), hence the serial compute ceiling of one A2C update

    ceiling steps/s = T*N / (T * (env step + act) + train),

and (c) rlkit's end-to-end agent steps/s through the real Trainer. Rounds alternate (a, b, c) so
that a noisy neighbour slows all three alike; medians are reported.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rlkit.infra.errors import UserError

RECIPES = {"pong": "a2c-pong-local", "cartpole": "a2c-cartpole-local", "minatar-breakout": "a2c-minatar-breakout-local"}
ROUNDS = 3


def run_core_bench(env: str, updates: int, device: str, json_path: str | None) -> list[dict]:
    devices = ["cpu", "cuda"] if device == "all" else [device]
    if "cuda" in devices and not torch.cuda.is_available():
        if device == "cuda":
            raise UserError("--device cuda: no CUDA device is visible here")
        print("(cuda skipped: no CUDA device)")
        devices.remove("cuda")
    results = [bench_env(name, updates, dev) for name in (RECIPES if env == "all" else [env]) for dev in devices]
    for r in results:
        print(format_result(r))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return results


def bench_env(name: str, updates: int, device: str) -> dict:
    from rlkit.config.recipes import load_recipe

    recipe = RECIPES[name]
    cfg = load_recipe(recipe, [f"trainer.accelerator={'cpu' if device == 'cpu' else 'gpu'}"])
    rounds = []
    for _ in range(ROUNDS):
        env_ms = _env_step_ms(cfg, updates * cfg.algo.rollout_len)
        act_ms, train_ms = _network_ms(cfg, device, updates)
        e2e = _end_to_end_sps(recipe, cfg, device, updates)
        rounds.append((env_ms, act_ms, train_ms, e2e))
    env_ms, act_ms, train_ms, e2e = (statistics.median(x) for x in zip(*rounds))
    T, N = cfg.algo.rollout_len, cfg.env.num_envs
    ceiling = T * N / ((T * (env_ms + act_ms) + train_ms) / 1000.0)
    return {"env": cfg.env.id, "device": device, "num_envs": N, "rollout_len": T, "rounds": ROUNDS,
            "updates_per_round": updates, "raw_env_sps": N / (env_ms / 1000.0), "env_step_ms": env_ms,
            "act_ms": act_ms, "train_ms": train_ms, "ceiling_sps": ceiling, "rlkit_sps": e2e,
            "rlkit_over_ceiling": e2e / ceiling, "torch_threads": torch.get_num_threads()}


def format_result(r: dict) -> str:
    return (f"{r['env']} [{r['device']}, {r['num_envs']} envs x {r['rollout_len']} steps]: "
            f"raw env {r['raw_env_sps']:,.0f} steps/s ({r['env_step_ms']:.2f} ms/step); "
            f"act {r['act_ms']:.2f} ms, train {r['train_ms']:.2f} ms/update; "
            f"serial ceiling {r['ceiling_sps']:,.0f} agent steps/s; rlkit {r['rlkit_sps']:,.0f} agent steps/s "
            f"= {r['rlkit_over_ceiling']:.2f}x ceiling")


def _env_step_ms(cfg, steps: int) -> float:
    from rlkit.learner.envs import make_vector_env

    env = make_vector_env(cfg.env, seed=cfg.seed)
    try:
        env.reset(seed=cfg.seed)
        env.action_space.seed(cfg.seed)
        actions = [env.action_space.sample() for _ in range(64)]
        for i in range(20):
            env.step(actions[i % 64])
        start = time.perf_counter()
        for i in range(steps):
            env.step(actions[i % 64])
        return (time.perf_counter() - start) * 1000.0 / steps
    finally:
        env.close()


def _network_ms(cfg, device: str, updates: int) -> tuple[float, float]:
    from rlkit.hooks.batch import Batch
    from rlkit.learner.envs import env_spaces
    from rlkit.learner.module import ActorCriticModule
    from rlkit.learner.optim import make_optimizer

    obs_space, action_space = env_spaces(cfg.env)
    module = ActorCriticModule(cfg, obs_space, action_space).to(device)
    opt = make_optimizer(module.parameters(), cfg.algo)
    T, N = cfg.algo.rollout_len, cfg.env.num_envs
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range((T + 1) * N)]), device=device)
    obs = obs.reshape(T + 1, N, *obs_space.shape)
    act_s = _timed(lambda: module.model.act(obs[0]), updates * T, device)
    actions = torch.as_tensor(rng.integers(0, action_space.n, (T, N)), device=device)
    zeros = torch.zeros((T, N), device=device)
    batch = Batch(obs, actions, zeros + 1.0, zeros, T * N)

    def update():
        loss = module.compute_loss(batch).total
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.algo.max_grad_norm or float("inf"))
        opt.step()

    train_s = _timed(update, updates, device)
    return act_s * 1000.0, train_s * 1000.0


def _timed(fn, repeats: int, device: str) -> float:
    for _ in range(5):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeats


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _end_to_end_sps(recipe: str, cfg, device: str, updates: int) -> float:
    """Steady-state agent steps/s of a real run, from its CSV log (the first window is warm-up)."""
    import csv

    from rlkit.training.run import train

    per = cfg.env.num_envs * cfg.algo.rollout_len
    log_every = max(1, updates // 5)
    with tempfile.TemporaryDirectory() as root:
        result = train(recipe, [f"algo.total_steps={per * (updates + log_every)}", "logging.backends=[csv]",
                                f"logging.root={root}", "logging.run_name=bench", "trainer.progress_bar=false",
                                f"trainer.log_every_n_updates={log_every}", "algo.stop_at_score=null",
                                f"trainer.accelerator={'cpu' if device == 'cpu' else 'gpu'}",
                                f"checkpoint.every_steps={10**12}"])
        with open(result.run_dir / "csv" / "metrics.csv") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("sps")]
    steady = [float(r["sps"]) for r in rows[2:]] or [float(r["sps"]) for r in rows]
    return statistics.median(steady)
