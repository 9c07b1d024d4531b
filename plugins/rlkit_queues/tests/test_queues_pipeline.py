"""The GA3C pipeline with real processes and queues: answers reach the actor that asked, training
batches hold exactly the segments the actors sent (across a shutdown), a dead actor is replaced
or stops the run, and nothing outlives the pipeline."""

import multiprocessing as mp
import os
import queue
import signal
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlkit.api import RunFailed
from rlkit.testing import check_options, learner_model, load_recipe
from rlkit_queues import QueuesConfig
from rlkit_queues.actor import Shared
from rlkit_queues.pipeline import ActorHandle, Inbox, Pipeline, Shape
from rlkit_queues.workers import Predictor, Stats

ACTORS, REQUESTS, T = 8, 150, 4


class EchoModel:
    """'Acts' by echoing the first number of each observation, so an answer shows whose it was."""

    def act(self, obs):
        time.sleep(0.0005)  # a forward pass takes time: requests pile up and get batched
        return obs[:, 0].long(), torch.zeros(len(obs))

    def env_actions(self, actions):
        return actions.numpy()


def echo_actor(actor, shared, conn, out):
    wrong = 0
    for t in range(REQUESTS):
        step = t % (T + 1)
        shared.obs[actor, 0, step] = float(actor * 10_000 + t)
        conn.send((actor, 0, 0, step))
        assert conn.poll(30)
        got_step, raw, env_actions, _ = conn.recv()
        wrong += got_step != step or not np.all(env_actions == actor * 10_000 + t)
    out.put((actor, wrong))


def test_predictions_return_to_the_actor_that_asked():
    """8 actor processes, each on its own pipe, read by the real inbox thread; 2 predictor threads."""
    ctx = mp.get_context("spawn")
    shared = Shared.allocate(ACTORS, 1, T, 2, (3,), torch.float32)
    out, stats = ctx.Queue(), Stats()
    ends = [ctx.Pipe() for _ in range(ACTORS)]
    procs = [ctx.Process(target=echo_actor, args=(a, shared, ends[a][1], out)) for a in range(ACTORS)]
    hub = SimpleNamespace(actors={a: ActorHandle(p, 0, ends[a][0]) for a, p in enumerate(procs)},
                          requests=queue.Queue(), segments=queue.Queue(), shared=shared, byes={}, producing=set())
    inbox = Inbox(hub)
    predictors = [Predictor(i, shared, hub.requests, lambda a, inc: ends[a][0], EchoModel(), "cpu", lambda: 7, 128,
                            stats) for i in range(2)]
    for w in [inbox, *predictors]:
        w.start()
    try:
        for p in procs:
            p.start()
        results = dict(out.get(timeout=120) for _ in procs)
    finally:
        for w in [inbox, *predictors]:
            w.halt.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert inbox.error is None and not any(p.error for p in predictors)
    assert results == {a: 0 for a in range(ACTORS)}
    assert stats.requests == ACTORS * REQUESTS and stats.predictions == 2 * ACTORS * REQUESTS
    assert stats.forward_passes < stats.requests, "requests waiting together were not batched"


def pipeline(**options):
    recipe = load_recipe("a2c-cartpole-queues", ["env.num_envs=3"])  # 3 columns: 2-env segments get split
    o = check_options(QueuesConfig, {"actors": 3, "envs_per_actor": 2, "tune": False, "timeout_s": 30, **options})
    model = learner_model(recipe)
    shape = Shape(model.obs_space.shape, torch.float32, (), "int64", recipe.env.num_envs)
    return Pipeline(recipe, o, shape, model, torch.device("cpu"), lambda: 0, seed=1).start()


def test_batches_hold_exactly_the_segments_sent_across_a_shutdown():
    pipe = pipeline()
    try:
        taken = [pipe.next_batch() for _ in range(40)]
    finally:
        rest = pipe.close(drain=True)
    columns = Counter()
    for parts in taken + rest:
        assert parts.batch.obs.shape[1] == sum(k for *_, k in parts.segments)
        for actor, inc, seq, k in parts.segments:
            columns[(actor, inc, seq)] += k
    assert len(pipe.byes) == 3, "every actor said how many segments it sent"
    sent = {(a, inc, seq) for (a, inc), n in pipe.byes.items() for seq in range(n)}
    assert set(columns) == sent, "a segment was lost or invented"
    assert set(columns.values()) == {2}, "a segment's columns were trained twice or not at all"
    assert all(parts.batch.obs.shape[1] == 3 for parts in taken)
    assert not any(h.proc.is_alive() for h in pipe.actors.values())


def test_a_dead_actor_is_replaced():
    pipe = pipeline()
    try:
        while (1, 0) not in pipe.producing:
            pipe.next_batch()
        victim = pipe.actors[1].proc
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pipe.replaced == 0 and time.monotonic() < deadline:
            pipe.next_batch()
        assert pipe.replaced == 1 and pipe.actors[1].incarnation == 1 and not victim.is_alive()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(a == 1 and inc == 1 for a, inc, *_ in pipe.next_batch().segments):
                break
        else:
            pytest.fail("the replacement actor sent no segment in 30 s")
    finally:
        pipe.close()
    assert not any(h.proc.is_alive() for h in pipe.actors.values())


def test_a_dead_actor_stops_the_run_when_asked():
    pipe = pipeline(on_actor_failure="stop")
    try:
        pipe.next_batch()
        os.kill(pipe.actors[2].proc.pid, signal.SIGKILL)
        with pytest.raises(RunFailed, match="actor 2 .* died"):
            for _ in range(1000):
                pipe.next_batch()
    finally:
        pipe.close()


def test_an_actor_process_imports_no_lightning():
    """Actors start light: what an actor imports (its module, envs, rollout bookkeeping, the
    die-with-parent guard) pulls in neither Lightning nor torch.distributed's training stack; 32
    actors importing Lightning each kept both cores busy for a minute."""
    import subprocess
    import sys

    code = ("import importlib, sys, rlkit_queues.actor\n"
            "from rlkit.api import die_with_parent, worker_modules\n"
            "for name in worker_modules(): importlib.import_module(name)\n"
            "print(sorted(m for m in ('lightning', 'torch.distributed.fsdp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
