"""Run K gossip learners as real processes on fixed vectors, with no gradient updates: the
protocol alone (tests and demonstrations)."""

import multiprocessing as mp
import os
import queue
import time

import torch
from torch.distributed import FileStore

from rlkit_gossip.protocol import GossipAgent, Membership
from rlkit_gossip.transports import DistTransport, ShmTransport

N = 64


def initial(rank: int) -> torch.Tensor:
    return torch.randn(N, generator=torch.Generator().manual_seed(rank)) * (rank + 1)


def make_transport(kind: str, rank: int, world: int, root, store):
    if kind == "shm":
        return ShmTransport(root, N)
    import torch.distributed as dist

    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    return DistTransport(N, rank, store, timeout_s=30)


def learner(rank, world, root, store_path, settings, iters, out, die_at=None, transport="shm"):
    store = FileStore(store_path, world)
    agent = GossipAgent(rank, world, make_transport(transport, rank, world, root, store),
                        Membership(store, rank, world), settings, log=lambda m: None)
    x = initial(rank)
    for t in range(1, iters + 1):
        if die_at is not None and t == die_at:
            os._exit(1)
        x = agent.step(x, t)
        if settings.sync_freq > 0:
            time.sleep(0.001 * (1 + rank))  # learners at different speeds
    agent.leave()
    c = agent.counters
    out.put((rank, x.tolist(), list(c.dropped), (c.age_s, c.aged)))  # plain data: the child exits at once


def run_learners(tmp_path, world, settings, iters, die=None, timeout=60, transport="shm", ages=None):
    """{rank: (final vector, peers it dropped)} of the learners that finished; ``ages``, when given,
    gets {rank: (summed age in seconds, count)} of the messages each one mixed."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    root = tmp_path / "shm"
    procs = [ctx.Process(target=learner, args=(r, world, root, str(tmp_path / "store"), settings, iters, out,
                                               die[1] if die and die[0] == r else None, transport))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world - (1 if die else 0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gossip learners did not finish in {timeout} s")
            crashed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and not (die and die[0] == r)]
            if crashed and out.empty():
                raise RuntimeError(f"learner(s) {crashed} crashed")
            try:
                rank, x, dropped, age = out.get(timeout=0.5)
            except queue.Empty:
                continue
            results[rank] = (torch.tensor(x), dropped)
            if ages is not None:
                ages[rank] = age
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return results


