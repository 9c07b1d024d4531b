"""The act-and-step loop of a Pong rollout, per vector step (issue 16, docs/benchmarks.md "OpenMP spin").

Set the variable under test in the environment, since libgomp reads it once, when torch loads:

    python -m rlkit.bench.studies.omp_spin                          # libgomp's default spin
    GOMP_SPINCOUNT=100000 python -m rlkit.bench.studies.omp_spin    # what the CLI sets
    OMP_WAIT_POLICY=PASSIVE python -m rlkit.bench.studies.omp_spin
    ALE_THREADS=1 TORCH_THREADS=1 python -m rlkit.bench.studies.omp_spin

Prints ms per vector step (16 envs, the recipe's Nature CNN `act`, random weights), 3 x 300 steps.
Alternate the settings in separate processes: the machine is shared and noisy.
"""

import dataclasses
import os
import time

import torch

from rlkit.hooks.manager import build_plugin_manager
from rlkit.learner.envs import make_vector_env
from rlkit.learner.models import ActorCritic
from rlkit.training.run import prepare


def main(steps: int = 300, rounds: int = 3) -> None:
    cfg, _, _ = prepare("a2c-pong-local", [], build_plugin_manager())
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))
    atari = dataclasses.replace(cfg.env.atari, num_threads=int(os.environ.get("ALE_THREADS", "0")))
    env = make_vector_env(dataclasses.replace(cfg.env, atari=atari), 0, 16)
    model = ActorCritic(env.single_observation_space, env.single_action_space, cfg.model, None)
    obs = torch.as_tensor(env.reset(seed=0)[0])
    per_step = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            with torch.no_grad():
                actions, _ = model.act(obs)
            obs = torch.from_numpy(env.step(actions.numpy())[0])
        per_step.append(round(1000 * (time.perf_counter() - start) / steps, 2))
    env.close()
    chosen = {k: os.environ[k] for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "ALE_THREADS", "TORCH_THREADS")
              if k in os.environ}
    print(chosen or "defaults", per_step, "ms per vector step")


if __name__ == "__main__":
    main()
