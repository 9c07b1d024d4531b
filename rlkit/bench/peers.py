"""``rlkit bench`` (``rlkit bench peers``): rlkit against the loops it must beat, in one run.

Every round measures, in an order that rotates from round to round so that a noisy neighbour slows
all alike, with rlkit and its reference loop back to back (:func:`round_order`):

- ``raw_env``: the recipe's vector env stepped with random actions (in this process);
- ``reference``: a plain A2C loop written for the benchmark (:mod:`rlkit.bench.reference`), the
  recipe's env, network, hyper-parameters and optimizer, no Lightning: the ceiling;
- ``rlkit``: ``rlkit run <recipe> algo.total_steps=<steps>`` through the real CLI, as a new user
  runs it (its default loggers, progress bar and checkpoint included);
- ``rlkit_bf16`` and ``reference_bf16`` (``--bf16``): both with ``trainer.precision=bf16-mixed``
  (the reference loop then runs the same network under the same autocast), so that bf16 too is
  compared with its own ceiling;
- ``sb3``: Stable-Baselines3's A2C (:mod:`rlkit.bench.sb3`), where it is installed.

Each contender is a process of its own: ``whole`` is agent steps over the process's wall time,
start-up included; ``steady`` the median agent steps/s over windows of ``trainer.log_every_n_updates``
updates after the first 20% of the run (rlkit's from its CSV log, the others' from their
update times). Ratios are taken within a round; the report gives each round's and their median.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPES = {"pong": "a2c-pong-local", "cartpole": "a2c-cartpole-local",
           "minatar-breakout": "a2c-minatar-breakout-local"}
WARMUP_FRACTION = 0.2
# (name, numerator, denominator, which sps): the ratios reported
RATIOS = (("rlkit/reference", "rlkit", "reference", "whole"), ("rlkit/reference", "rlkit", "reference", "steady"),
          ("rlkit/sb3", "rlkit", "sb3", "whole"), ("rlkit/sb3", "rlkit", "sb3", "steady"),
          ("rlkit_bf16/rlkit", "rlkit_bf16", "rlkit", "whole"), ("rlkit_bf16/rlkit", "rlkit_bf16", "rlkit", "steady"),
          ("rlkit_bf16/reference_bf16", "rlkit_bf16", "reference_bf16", "whole"),
          ("rlkit_bf16/reference_bf16", "rlkit_bf16", "reference_bf16", "steady"),
          ("rlkit_bf16/sb3", "rlkit_bf16", "sb3", "whole"), ("rlkit_bf16/sb3", "rlkit_bf16", "sb3", "steady"),
          ("reference/raw_env", "reference", "raw_env", "steady"))


# -- the numbers ------------------------------------------------------------------------------

def steady_sps(window_ends: list[tuple[int, float]], steps_per_update: int, total_updates: int) -> float | None:
    """Median agent steps/s over the windows that start after the first WARMUP_FRACTION of the
    updates. ``window_ends``: (update count, seconds) at the end of each window, the first (0, t0)."""
    rates = [(u1 - u0) * steps_per_update / (t1 - t0)
             for (u0, t0), (u1, t1) in zip(window_ends, window_ends[1:])
             if u0 >= WARMUP_FRACTION * total_updates and t1 > t0]
    return statistics.median(rates) if rates else None


def windows_from_update_times(times: list[float], every: int) -> list[tuple[int, float]]:
    """(update, time) at the first update's end (start-up and the first rollout stay out of the
    windows, as in rlkit's log) and every ``every`` updates after it, from each update's end time."""
    return [(1, times[0])] + [(u, times[u - 1]) for u in range(every, len(times) + 1, every) if u > 1]


def windows_from_csv_rows(rows: list[dict], steps_per_update: int) -> list[tuple[int, float]]:
    """rlkit's CSV gives each window's sps, not times: rebuild (update, seconds) from them."""
    out, clock, last = [(0, 0.0)], 0.0, 0
    for r in rows:
        if not r.get("sps") or not r.get("step"):
            continue
        step = int(float(r["step"]))
        clock += (step - last) * steps_per_update / max(float(r["sps"]), 1e-9)
        out.append((step, clock))
        last = step
    return out


def round_order(contenders: list[str], r: int) -> list[str]:
    """The order of round ``r``: the start rotates from round to round, so that a noisy neighbour
    slows all alike; rlkit and its reference loop (and their bf16 pair) run back to back, which of
    the two first alternating, so that the ratio the bench is for sees the host as it is within a
    few minutes, not across the whole round."""
    units: list[list[str]] = []
    for c in contenders:
        if c.startswith("rlkit") and units and units[-1] == [c.replace("rlkit", "reference", 1)]:
            units[-1].append(c)
        else:
            units.append([c])
    k = r % len(units)
    flip = (r + r // len(units)) % 2  # every other round, and each start sees both orders
    return [c for unit in units[k:] + units[:k] for c in (unit[::-1] if flip else unit)]


def round_ratios(measured: dict[str, dict]) -> dict[str, float]:
    """``measured[contender] = {"whole": sps, "steady": sps}`` -> {"rlkit/reference (whole)": x, ...}."""
    out = {}
    for name, num, den, kind in RATIOS:
        a, b = measured.get(num, {}).get(kind), measured.get(den, {}).get(kind)
        if a and b:
            out[f"{name} ({kind})"] = a / b
    return out


def summarize(rounds: list[dict[str, dict]]) -> dict:
    """Per-round ratios and, for every ratio and every contender's sps, the median over rounds."""
    per_round = [round_ratios(r) for r in rounds]
    names = [n for n in dict.fromkeys(k for r in per_round for k in r)]
    ratios = {n: {"rounds": [r[n] for r in per_round if n in r]} for n in names}
    for v in ratios.values():
        v["median"] = statistics.median(v["rounds"])
    contenders = {c for r in rounds for c in r}
    sps = {c: {kind: statistics.median(vals) for kind in ("whole", "steady")
               if (vals := [r[c][kind] for r in rounds if r.get(c, {}).get(kind)])}
           for c in sorted(contenders)}
    return {"ratios": ratios, "sps": sps}


def format_report(env: str, summary: dict, rounds: int, steps: int) -> str:
    lines = [f"{env}: {rounds} rounds of {steps:,} agent steps each; agent steps/s (median over rounds)"]
    for c, v in summary["sps"].items():
        parts = [f"{kind} {v[kind]:,.0f}" for kind in ("whole", "steady") if kind in v]
        lines.append(f"  {c:<14} " + ", ".join(parts))
    for name, v in summary["ratios"].items():
        each = " ".join(f"{x:.2f}" for x in v["rounds"])
        lines.append(f"  {name:<36} median {v['median']:.2f}  (rounds: {each})")
    return "\n".join(lines)


# -- the contenders ---------------------------------------------------------------------------

def raw_env(cfg, steps: int) -> dict:
    from rlkit.learner.envs import close_envs, make_vector_env

    env = make_vector_env(cfg.env, seed=cfg.seed)
    try:
        env.reset(seed=cfg.seed)
        env.action_space.seed(cfg.seed)
        actions = [env.action_space.sample() for _ in range(64)]
        n = max(1, steps // env.num_envs)
        start = time.perf_counter()
        for i in range(n):
            env.step(actions[i % 64])
        return {"steady": n * env.num_envs / (time.perf_counter() - start)}
    finally:
        close_envs(env)


def subprocess_contender(argv: list[str], log: Path, steps: int) -> tuple[float, str]:
    """(whole-process agent steps/s, stdout) of one contender's process."""
    start = time.perf_counter()
    with open(log, "w") as err:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=_child_env())
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        from rlkit.infra.errors import RunFailed

        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise RunFailed(f"bench: {' '.join(argv[1:])} exited with {done.returncode}; its log ends:\n{tail}")
    return steps / seconds, done.stdout


def loop_contender(module: str, recipe: str, overrides: list[str], steps: int, device: str, every: int,
                   spu: int, updates: int, log: Path) -> dict:
    """The reference loop or SB3, which print their update times as JSON."""
    argv = [sys.executable, "-m", module, recipe, *overrides, f"--steps={steps}", f"--device={device}"]
    whole, out = subprocess_contender(argv, log, steps)
    got = json.loads(out.strip().splitlines()[-1])
    windows = windows_from_update_times(got["update_times"], every)
    return {"whole": whole, "steady": steady_sps(windows, spu, updates), "command": " ".join(argv[2:])}


def rlkit_contender(recipe: str, overrides: list[str], steps: int, spu: int, updates: int, root: Path,
                    name: str) -> dict:
    import csv

    argv = [sys.executable, "-m", "rlkit.cli", "run", recipe, f"algo.total_steps={steps}", "algo.stop_at_score=null",
            f"logging.root={root}", f"logging.run_name={name}", *overrides]
    whole, _ = subprocess_contender(argv, root / f"{name}.log", steps)
    with open(root / name / "csv" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    return {"whole": whole, "steady": steady_sps(windows_from_csv_rows(rows, spu), spu, updates),
            "command": " ".join(argv[2:])}


def _child_env() -> dict:
    env = dict(os.environ)
    env.setdefault("WANDB_SILENT", "true")
    return env


def sb3_missing(env_id: str) -> str | None:
    """What SB3's A2C on ``env_id`` lacks here (None: nothing)."""
    from rlkit.learner.envs import is_atari

    needs = ["stable_baselines3", *(["cv2"] if is_atari(env_id) else [])]  # SB3's Atari wrappers use OpenCV
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    return " and ".join(missing) or None


# -- the run ----------------------------------------------------------------------------------

def run_peers_bench(env: str, steps: int, rounds: int, device: str, bf16: bool, sb3: bool,
                    overrides: list[str], json_path: str | None) -> list[dict]:
    results = []
    for name in (list(RECIPES) if env == "all" else [env]):
        if name == "minatar-breakout" and not _recipe_exists(RECIPES[name]):
            print(f"({name} skipped: recipe {RECIPES[name]} is not installed)")
            continue
        if name == "minatar-breakout" and env == "all" and importlib.util.find_spec("minatar") is None:
            print(f"({name} skipped: MinAtar is not installed; pip install -e '.[minatar]')")
            continue
        results.append(bench_one(name, steps, rounds, device, bf16, sb3, overrides))
        print(format_report(name, results[-1]["summary"], rounds, steps), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))
    return results


def bench_one(name: str, steps: int, rounds: int, device: str, bf16: bool, sb3: bool, overrides: list[str]) -> dict:
    from rlkit.config.recipes import load_recipe

    recipe = RECIPES[name]
    accel = [f"trainer.accelerator={'cpu' if device == 'cpu' else 'gpu'}"]
    cfg = load_recipe(recipe, [*overrides, *accel])
    spu, every = cfg.steps_per_update(), cfg.trainer.log_every_n_updates
    updates = -(-steps // spu)
    if sb3 and (missing := sb3_missing(cfg.env.id)):
        print(f"(sb3 skipped: {missing} not installed; pip install -e .[bench])")
        sb3 = False
    contenders = ["raw_env", "reference", "rlkit", *(["reference_bf16", "rlkit_bf16"] if bf16 else []),
                  *(["sb3"] if sb3 else [])]
    measured: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-") as tmp:
        root = Path(tmp)
        for r in range(rounds):
            got: dict[str, dict] = {}
            for c in round_order(contenders, r):
                print(f"[{name}] round {r + 1}/{rounds}: {c}", file=sys.stderr, flush=True)
                got[c] = _measure(c, recipe, cfg, [*overrides, *accel], steps, device, every, spu, updates,
                                  root, r)
            measured.append(got)
    summary = summarize([{c: {k: v for k, v in m.items() if k in ("whole", "steady")} for c, m in g.items()}
                         for g in measured])
    return {"env": name, "recipe": recipe, "env_id": cfg.env.id, "num_envs": cfg.env.num_envs,
            "rollout_len": cfg.algo.rollout_len, "steps": steps, "rounds": measured, "summary": summary,
            "device": device, "torch_threads": cfg.trainer.torch_threads or os.cpu_count()}


def _measure(c: str, recipe: str, cfg, overrides: list[str], steps: int, device: str, every: int, spu: int,
             updates: int, root: Path, r: int) -> dict:
    if c == "raw_env":
        return raw_env(cfg, steps)
    extra = ["trainer.precision=bf16-mixed"] if c.endswith("_bf16") else []
    if c in ("rlkit", "rlkit_bf16"):
        return rlkit_contender(recipe, [*overrides, *extra], steps, spu, updates, root, f"{c}-{r}")
    module = "rlkit.bench.sb3" if c == "sb3" else "rlkit.bench.reference"
    return loop_contender(module, recipe, [*overrides, *extra], steps, device, every, spu, updates,
                          root / f"{c}-{r}.log")


def _recipe_exists(name: str) -> bool:
    from rlkit.config.recipes import bundled_recipes

    return any(p.stem == name for p in bundled_recipes())
