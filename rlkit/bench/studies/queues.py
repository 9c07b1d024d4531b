"""GA3C (`queues`) benchmark on Pong, every number measured in this one run.

1. Predictions per second with batched prediction vs one request per forward pass (GA3C's PPS
   comparison), 16 actors x 1 env (``--actors``): (a) in a real training run, (b) prediction
   capacity, the same pipeline with its batches taken and dropped instead of trained on, (c) the
   forward pass alone by batch size (what batching can buy on this device).
2. Agent steps/s trained: queues (recipe ga3c-pong-queues, tuning off) vs the local A2C learner
   (a2c-pong-local).
3. Run-time tuning: the setting a tuned run ends on, measured statically, vs the best static
   setting of a small grid (NP, NT in {1, 2}, NA in {4, 8} actors x 4 envs).

Rounds alternate the configurations so that a noisy neighbour slows them alike; each number is
the median over a run's log rows after warm-up. A CUDA host adds the rows with the learner (its
predictors and trainer) on the GPU; without CUDA they are skipped.

    python -m rlkit.bench.studies.queues --json docs/benchmarks/bench-queues.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

PONG = "ga3c-pong-queues"
QUIET = ["logging.backends=[csv]", "trainer.progress_bar=false", "algo.stop_at_score=null",
         "checkpoint.every_steps=1000000000000"]


def measure(recipe: str, steps: int, *overrides: str, log_every: int = 25) -> dict[str, float]:
    """Median of each logged metric over the rows after the first two (start-up)."""
    # imported here, not at the top: every actor process re-runs this script's top-level imports
    from rlkit.training.run import train

    with tempfile.TemporaryDirectory() as root:
        result = train(recipe, [*QUIET, f"algo.total_steps={steps}", f"logging.root={root}",
                                "logging.run_name=bench", f"trainer.log_every_n_updates={log_every}", *overrides])
        rows = list(csv.DictReader(open(result.run_dir / "csv" / "metrics.csv")))
        tuning = (result.run_dir / "queues-tuning.log")
        log = tuning.read_text().splitlines() if tuning.exists() else []
    steady = rows[2:] or rows
    keys = {k for r in steady for k, v in r.items() if v not in ("", None)}
    out = {k: statistics.median(float(r[k]) for r in steady if r.get(k) not in ("", None)) for k in keys}
    out["final"] = {k: float(rows[-1][k]) for k in ("queues/np", "queues/nt", "queues/na") if rows[-1].get(k)}
    out["tuning_log"] = log
    return out


def setting(np_: int, nt: int, na: int) -> list[str]:
    return [f"communication.options.predictors={np_}", f"communication.options.trainers={nt}",
            f"communication.options.actors={na}", "communication.options.tune=false"]


def pps_section(steps: int, rounds: int, accel: str, actors: int = 16) -> dict:
    common = [f"communication.options.actors={actors}", "communication.options.envs_per_actor=1",
              "communication.options.tune=false", f"trainer.accelerator={accel}"]
    got: dict[str, list] = {"batched": [], "batch_1": []}
    for _ in range(rounds):
        got["batched"].append(measure(PONG, steps, *common, "communication.options.prediction_batch=128"))
        got["batch_1"].append(measure(PONG, steps, *common, "communication.options.prediction_batch=1"))
    b = statistics.median(r["queues/pps"] for r in got["batched"])
    one = statistics.median(r["queues/pps"] for r in got["batch_1"])
    return {"pps_batched": b, "pps_batch_1": one, "ratio": b / one,
            "prediction_batch_batched": statistics.median(r["queues/prediction_batch"] for r in got["batched"]),
            "latency_ms_batched": statistics.median(r["queues/latency_ms"] for r in got["batched"]),
            "latency_ms_batch_1": statistics.median(r["queues/latency_ms"] for r in got["batch_1"])}


def pps_capacity(seconds: float, rounds: int, accel: str, actors: int = 16) -> dict:
    """Predictions/s of the pipeline alone: batches are taken and dropped, nothing is trained."""
    from rlkit.config.recipes import load_recipe, validate_options
    from rlkit.learner.envs import env_spaces
    from rlkit.learner.models import ActorCritic
    from rlkit_queues import QueuesConfig
    from rlkit_queues.communicator import _torch_dtype
    from rlkit_queues.pipeline import Pipeline, Shape

    recipe = load_recipe(PONG)
    obs_space, action_space = env_spaces(recipe.env)
    device = torch.device("cuda" if accel == "gpu" else "cpu")
    model = ActorCritic(obs_space, action_space, recipe.model).to(device)
    got: dict[str, list] = {"batched": [], "batch_1": []}
    for _ in range(rounds):
        for name, batch in (("batched", 128), ("batch_1", 1)):
            o = validate_options(QueuesConfig, {"actors": actors, "envs_per_actor": 1,
                                                "tune": False, "prediction_batch": batch}, "o")
            shape = Shape(obs_space.shape, _torch_dtype(obs_space.dtype), (), "int64", recipe.env.num_envs)
            pipe = Pipeline(recipe, o, shape, model, device, lambda: 0, seed=0).start()
            try:
                for _ in range(20):  # warm-up: actors started, caches filled
                    pipe.next_batch()
                pipe.stats.take()
                start = time.perf_counter()
                while time.perf_counter() - start < seconds:
                    pipe.next_batch()
                c = pipe.stats.take()
                got[name].append((c["predictions"] / (time.perf_counter() - start),
                                  c["predictions"] / max(1, c["forward_passes"])))
            finally:
                pipe.close()
    b = statistics.median(x for x, _ in got["batched"])
    one = statistics.median(x for x, _ in got["batch_1"])
    return {"actors": actors, "pps_batched": b, "pps_batch_1": one, "ratio": b / one,
            "prediction_batch_batched": statistics.median(y for _, y in got["batched"])}


def forward_costs(accel: str, sizes=(1, 2, 4, 8, 16, 32), passes: int = 50) -> dict:
    """The predictors' forward pass alone (no queues, no actors): ms per pass by batch size, after
    a warm-up (the first passes at a new size pick kernels and are far slower)."""
    from rlkit.config.recipes import load_recipe
    from rlkit.learner.envs import env_spaces
    from rlkit.learner.models import ActorCritic

    recipe = load_recipe(PONG)
    obs_space, action_space = env_spaces(recipe.env)
    device = torch.device("cuda" if accel == "gpu" else "cpu")
    model = ActorCritic(obs_space, action_space, recipe.model).to(device)
    out = {}
    for b in sizes:
        x = torch.randint(0, 255, (b, *obs_space.shape), dtype=torch.uint8, device=device)
        for _ in range(10):
            model.act(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(passes):
            model.act(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - start) / passes
        out[str(b)] = {"ms_per_pass": ms, "obs_per_s": 1000 * b / ms}
    return out


def versus_local(steps: int, rounds: int, accel: str) -> dict:
    q, local = [], []
    for _ in range(rounds):
        q.append(measure(PONG, steps, "communication.options.tune=false", f"trainer.accelerator={accel}")["sps"])
        local.append(measure("a2c-pong-local", steps, f"trainer.accelerator={accel}", log_every=50)["sps"])
    return {"queues_sps": statistics.median(q), "local_sps": statistics.median(local),
            "ratio": statistics.median(q) / statistics.median(local)}


def tuning_section(steps: int, tuned_steps: int) -> dict:
    grid = {}
    for np_, nt, na in itertools.product((1, 2), (1, 2), (4, 8)):
        grid[f"{np_},{nt},{na}"] = measure(PONG, steps, *setting(np_, nt, na))["sps"]
    tuned = measure(PONG, tuned_steps, *setting(1, 1, 4)[:-1], "communication.options.tune=true",
                    "communication.options.tune_window_s=6", "communication.options.max_actors=16",
                    "communication.options.max_predictors=4", "communication.options.max_trainers=4")
    final = tuned["final"]
    key = (int(final["queues/np"]), int(final["queues/nt"]), int(final["queues/na"]))
    final_sps = measure(PONG, steps, *setting(*key))["sps"]
    best_key = max(grid, key=grid.get)
    best_again = measure(PONG, steps, *setting(*map(int, best_key.split(","))))["sps"]
    best = max(grid[best_key], best_again)
    return {"grid_sps": grid, "best_static": best_key, "best_static_sps": best,
            "tuned_final": "%d,%d,%d" % key, "tuned_final_sps": final_sps, "ratio": final_sps / best,
            "tuning_log": tuned["tuning_log"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=16000, help="agent steps per measured run")
    p.add_argument("--tuned-steps", type=int, default=120000, help="agent steps of the tuned run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=20.0, help="seconds per prediction-capacity measurement")
    p.add_argument("--only-capacity", action="store_true", help="only the prediction-capacity section")
    p.add_argument("--actors", type=int, nargs="+", default=[16],
                   help="actor processes (1 env each) of the PPS sections; several values give one row each")
    p.add_argument("--only-pps", action="store_true",
                   help="prediction capacity and PPS in training runs (batched vs batch 1); no tuning, no local run")
    p.add_argument("--accel", default="all", choices=["all", "cpu", "gpu"], help="where the learner runs")
    p.add_argument("--json")
    a = p.parse_args()
    accels = ["cpu"] + (["gpu"] if torch.cuda.is_available() else []) if a.accel == "all" else [a.accel]
    if a.accel == "all" and len(accels) == 1:
        print("(gpu rows skipped: no CUDA device)")
    out = {}
    for accel in accels:
        caps = [pps_capacity(a.seconds, a.rounds, accel, n) for n in a.actors]
        out[accel] = {"pps_capacity": caps[0] if len(caps) == 1 else caps, "forward_alone": forward_costs(accel)}
        if a.only_capacity:
            print(accel, json.dumps(out[accel], indent=1))
            continue
        out[accel].update(pps=pps_section(a.steps, a.rounds, accel, a.actors[0]))
        if not a.only_pps:
            out[accel].update(vs_local=versus_local(a.steps, a.rounds, accel))
        print(accel, json.dumps(out[accel], indent=1))
    if not (a.only_capacity or a.only_pps):
        out["tuning"] = tuning_section(a.steps, a.tuned_steps)
        print(json.dumps(out["tuning"], indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
