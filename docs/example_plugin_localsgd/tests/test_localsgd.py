"""Tests of the local-SGD example plugin: the math by hand, the options and what the core refuses,
registration, the hooks on a stand-in learner, a real two-process gloo average, and a real
two-learner CartPole run through the CLI."""

from __future__ import annotations

import csv
import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import rlkit_localsgd
import rlkit_localsgd.communicator as communicator
from rlkit.api import LearnerLayout, RunFailed, Topology, UserError
from rlkit.testing import configure_run, plugin_env
from rlkit_localsgd import LocalSGDConfig
from rlkit_localsgd.communicator import (
    LocalSGDCommunicator,
    average_,
    average_parameters,
    distance,
    flatten,
    unflatten_into,
)

PLUGIN_DIR = Path(__file__).resolve().parents[1]
RECIPE_PATH = PLUGIN_DIR / "recipes" / "a2c-cartpole-localsgd.yaml"
RECIPE = {"env": {"id": "CartPole-v1", "num_envs": 4}, "placement": {"learners": 2},
          "trainer": {"accelerator": "cpu", "devices": 2}, "communication": {"name": "localsgd"}}


# -- the math, by hand --------------------------------------------------------------------------


def test_average_divides_the_sum_in_place():
    summed = torch.tensor([2.0, 4.0, -6.0])  # what an all-reduce SUM of two learners' vectors gives
    assert average_(summed, 2) is summed
    assert summed.tolist() == [1.0, 2.0, -3.0]
    with pytest.raises(ValueError, match="world_size"):
        average_(torch.ones(1), 0)


def test_distance_is_the_l2_norm_of_the_difference():
    assert distance(torch.tensor([3.0, 4.0]), torch.zeros(2)) == 5.0
    assert distance(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 1.0])) == 0.0


def test_flatten_and_unflatten_round_trip_across_shapes_and_dtypes():
    tensors = [torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5.0], dtype=torch.bfloat16)]
    flat = flatten(tensors)
    assert flat.dtype == torch.float32 and flat.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    unflatten_into(flat * 2, tensors)
    assert tensors[0].tolist() == [[2.0, 4.0], [6.0, 8.0]]
    assert tensors[1].dtype == torch.bfloat16 and tensors[1].item() == 10.0
    with pytest.raises(ValueError, match="6 elements"):
        unflatten_into(torch.zeros(6), tensors)


def simulate(learners: list[list[torch.Tensor]]) -> list[float]:
    """Three (or K) learners' average without a process group: the all-reduce stand-in puts the
    sum of every learner's flat parameters (taken before anyone averages) into each vector."""
    total = sum(flatten(ps) for ps in learners)
    return [average_parameters(ps, lambda flat: flat.copy_(total), len(learners)) for ps in learners]


def test_average_parameters_of_three_learners_by_hand():
    learners = [[torch.tensor([0.0, 3.0]), torch.tensor([1.0])],
                [torch.tensor([3.0, 3.0]), torch.tensor([1.0])],
                [torch.tensor([6.0, 3.0]), torch.tensor([4.0])]]
    before = simulate(learners)
    # mean: [3, 3], [2]; distances: |(-3, 0, -1)| = sqrt(10), |(0, 0, -1)| = 1, |(3, 0, 2)| = sqrt(13)
    for ps in learners:
        assert ps[0].tolist() == [3.0, 3.0] and ps[1].tolist() == [2.0]
    assert before == pytest.approx([math.sqrt(10), 1.0, math.sqrt(13)])


def test_identical_learners_do_not_move():
    learners = [[torch.tensor([1.5, -2.0])] for _ in range(4)]
    assert simulate(learners) == [0.0] * 4
    assert all(ps[0].tolist() == [1.5, -2.0] for ps in learners)


def test_parameters_are_untouched_when_the_all_reduce_fails():
    params = [torch.nn.Parameter(torch.tensor([1.0, 2.0]))]

    def broken(flat):
        flat.zero_()  # a half-done reduce must not reach the parameters
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(RuntimeError):
        average_parameters(params, broken, 2)
    assert params[0].tolist() == [1.0, 2.0]


# -- options, placement and registration ---------------------------------------------------------


# configure_run does what `rlkit run` does before anything is written: validate the recipe and the
# communicator's options, check the placement against its layout, call its rlkit_configure
@pytest.mark.parametrize("override, message", [
    ("k=0", "communication.options.k: 0 is not allowed; must be >= 1"),
    ("k=1.5", "communication.options.k"),
    ("timeout_s=0", "communication.options.timeout_s: 0.0 is not allowed; must be > 0"),
    ("backend=mpi", "communication.options.backend: 'mpi' is not allowed; choose one of: auto, gloo, nccl"),
    ("kk=1", "communication.options.kk: unknown key 'kk'")])
def test_options_are_checked_by_the_schema(tmp_path, override, message):
    with pytest.raises(UserError, match=message):
        configure_run(rlkit_localsgd, RECIPE, [f"communication.options.{override}"], run_dir=tmp_path)


def test_defaults(tmp_path):
    run, _ = configure_run(rlkit_localsgd, RECIPE, run_dir=tmp_path)
    assert isinstance(run.options, LocalSGDConfig)
    assert (run.options.k, run.options.backend, run.options.timeout_s) == (8, "auto", 120.0)


def test_two_learners_are_accepted_and_laid_out_synchronously(tmp_path):
    overrides = ["communication.options.k=3", "communication.options.backend=gloo", "communication.options.timeout_s=30"]
    run, comm = configure_run(rlkit_localsgd, RECIPE, overrides, run_dir=tmp_path)
    assert isinstance(comm, LocalSGDCommunicator) and run.options.k == 3
    assert comm.rlkit_learner_layout(run=run) == LearnerLayout(Topology.SYNCHRONOUS, backend="gloo", timeout_s=30.0,
                                                               min_learners=2, own_optimizer_state=True,
                                                               sync_every=3)


def test_the_recipe_is_valid(tmp_path):
    run, _ = configure_run(rlkit_localsgd, yaml.safe_load(RECIPE_PATH.read_text()), run_dir=tmp_path)
    assert run.recipe.placement.learners == 2 and run.options.k == 8


@pytest.mark.parametrize("overrides, message", [
    # the core checks the placement against the layout: learners = devices x learners_per_device x nodes
    (["placement.learners=3"], "placement.learners: 3 is not allowed with trainer.devices=2"),
    # ... and min_learners=2: averaging one learner is communicator local
    (["placement.learners=1", "trainer.devices=1"], "placement.learners: 1 is not allowed with communicator localsgd"),
    # the plugin's own check (rlkit_configure)
    (["algo.on_nonfinite=skip"], "algo.on_nonfinite: skip is not allowed with communicator localsgd")])
def test_what_rlkit_run_refuses(tmp_path, overrides, message):
    with pytest.raises(UserError, match=message):
        configure_run(rlkit_localsgd, RECIPE, overrides, run_dir=tmp_path)


def test_registered_under_its_name(tmp_path):
    (spec,) = rlkit_localsgd.rlkit_communicators()
    assert spec.name == "localsgd" and spec.options_schema is LocalSGDConfig and "local SGD" in spec.summary
    assert isinstance(spec.factory(LocalSGDConfig(), None), LocalSGDCommunicator)
    # selected by name once the module is registered (configure_run registers it as the entry point would)
    _, comm = configure_run(rlkit_localsgd, RECIPE, run_dir=tmp_path)
    assert isinstance(comm, LocalSGDCommunicator)


def test_the_registration_module_does_not_import_torch():
    code = "import sys, rlkit_localsgd; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- the hooks on a stand-in learner ----------------------------------------------------------------


class StandInLearner(torch.nn.Module):
    """What the hooks use of a learner (rlkit.api.Learner): parameters, rank, world size, step."""

    def __init__(self, rank: int = 0, world_size: int = 2, w=(0.0, 0.0), b=0.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w))
        self.b = torch.nn.Parameter(torch.tensor([b]))
        self.global_rank, self.world_size, self.global_step = rank, world_size, 0

    def lost_peers(self) -> str:
        return "learner 1 (pid 4242) exited with code -9"


def make_comm(tmp_path, k: int):
    run, comm = configure_run(rlkit_localsgd, RECIPE, [f"communication.options.k={k}"], run_dir=tmp_path)
    return run, comm


def step(comm, run, module, update: int, w, b) -> None:
    """Stand-in for one optimizer step (it leaves w, b), then the hook."""
    with torch.no_grad():
        module.w.copy_(torch.tensor(w))
        module.b.fill_(b)
    module.global_step = update
    comm.rlkit_after_optimizer_step(run=run, module=module, update=update)


def test_averages_every_k_updates_then_once_at_the_end(tmp_path, monkeypatch):
    run, comm = make_comm(tmp_path, k=2)
    peer = torch.tensor([4.0, 0.0, 2.0])  # the other learner's flat parameters, whenever it averages
    calls = []

    def fake_all_reduce(flat, op=None):
        calls.append(flat.clone())
        flat.add_(peer)

    monkeypatch.setattr(communicator.dist, "all_reduce", fake_all_reduce)
    module = StandInLearner()
    assert comm.rlkit_metrics(run=run, module=module) == {"localsgd/averages": 0.0}  # nothing measured yet

    step(comm, run, module, 1, (1.0, 1.0), 1.0)
    assert not calls and module.w.tolist() == [1.0, 1.0]  # update 1: no average
    step(comm, run, module, 2, (2.0, 2.0), 0.0)
    # update 2: mean of (2, 2, 0) and (4, 0, 2) = (3, 1, 1); distance |(-1, 1, -1)| = sqrt(3)
    assert len(calls) == 1 and module.w.tolist() == [3.0, 1.0] and module.b.tolist() == [1.0]
    assert comm.rlkit_metrics(run=run, module=module) == {"localsgd/averages": 1.0,
                                                          "localsgd/dist_before": pytest.approx(math.sqrt(3))}

    step(comm, run, module, 3, (6.0, 0.0), 2.0)
    comm.rlkit_train_end(run=run, module=module)  # budget ended after update 3: the final average
    assert len(calls) == 2 and module.w.tolist() == [5.0, 0.0] and module.b.tolist() == [2.0]
    assert comm.rlkit_metrics(run=run, module=module)["localsgd/averages"] == 2.0

    step(comm, run, module, 4, (4.0, 0.0), 2.0)  # an average at update 4 (here to the same point as the peer's)
    comm.rlkit_train_end(run=run, module=module)  # ended right after an average: none more
    assert len(calls) == 3 and comm.averages == 3


def test_counter_survives_a_checkpoint(tmp_path, monkeypatch):
    run, comm = make_comm(tmp_path, k=1)
    monkeypatch.setattr(communicator.dist, "all_reduce", lambda flat, op=None: flat.mul_(2))
    module = StandInLearner()
    for update in (1, 2, 3):
        step(comm, run, module, update, (1.0, 2.0), 3.0)
    state = comm.rlkit_state_dict(run=run, module=module)
    assert state == {"localsgd": {"averages": 3}}
    _, restored = make_comm(tmp_path, k=1)
    restored.rlkit_load_state_dict(run=run, module=module, state={"other": {}, **state})
    assert restored.averages == 3
    restored.rlkit_load_state_dict(run=run, module=module, state={})  # a checkpoint of another communicator
    assert restored.averages == 3


@pytest.mark.parametrize("error", [RuntimeError, torch.distributed.DistBackendError])
def test_a_failed_all_reduce_is_one_line_naming_the_lost_peer(tmp_path, monkeypatch, error):
    run, comm = make_comm(tmp_path, k=1)

    def broken(flat, op=None):
        raise error("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242\nmore detail")

    monkeypatch.setattr(communicator.dist, "all_reduce", broken)
    module = StandInLearner(rank=0, w=(1.0, 2.0))
    with pytest.raises(RunFailed) as info:
        step(comm, run, module, 1, (1.0, 2.0), 0.0)
    message = str(info.value)
    assert message.startswith("localsgd: learner 0 lost its peers in the parameter average: "
                              "learner 1 (pid 4242) exited with code -9; after update 1")
    assert "Connection closed by peer" in message and "\n" not in message and "more detail" not in message
    assert module.w.tolist() == [1.0, 2.0] and comm.averages == 0


# -- a real process group: two gloo ranks --------------------------------------------------------


def _gloo_worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)  # each learner its own parameters
        module = StandInLearner(rank, world, w=torch.randn(2).tolist(), b=float(rank))
        own = [p.detach().clone() for p in module.parameters()]
        comm = LocalSGDCommunicator(LocalSGDConfig(k=4), None)
        comm.rlkit_after_optimizer_step(run=None, module=module, update=3)  # not a multiple of k: local
        local = [p.detach().clone() for p in module.parameters()]
        comm.rlkit_after_optimizer_step(run=None, module=module, update=4)
        torch.save({"own": own, "local": local, "averaged": [p.detach().clone() for p in module.parameters()],
                    "metrics": comm.rlkit_metrics(run=None, module=module)}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_end_with_the_mean_of_their_parameters(tmp_path):
    torch.multiprocessing.spawn(_gloo_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for own0, own1, loc0, avg0, avg1 in zip(r0["own"], r1["own"], r0["local"], r0["averaged"], r1["averaged"]):
        assert not torch.equal(own0, own1) and torch.equal(loc0, own0)
        assert torch.allclose(avg0, (own0 + own1) / 2) and torch.equal(avg0, avg1)
    gap = float(torch.linalg.vector_norm(flatten(r0["own"]) - flatten(r1["own"])))
    for r in (r0, r1):  # two learners: each is half the gap from the mean
        assert r["metrics"]["localsgd/averages"] == 1.0
        assert r["metrics"]["localsgd/dist_before"] == pytest.approx(gap / 2)


# -- a real run: two learner processes through the CLI ---------------------------------------------

# An installed plugin (a fake distribution on PYTHONPATH) that writes each learner's parameters,
# after the communicator's hooks (trylast): mid-interval, right after an average and at the end.
DUMP_PLUGIN = '''
import os
import torch
from rlkit.api import hookimpl

def _dump(module, tag):
    path = os.path.join(os.environ["LOCALSGD_TEST_DUMP"], f"{tag}-rank{module.global_rank}.pt")
    torch.save([p.detach().cpu().clone() for p in module.parameters()], path)

COLLECTIVES = {"all_gather": [], "all_reduce": []}  # the update each collective was called after

@hookimpl
def rlkit_learner_start(run, module):
    import torch.distributed as dist

    for name, calls in COLLECTIVES.items():
        def counted(*args, _real=getattr(dist, name), _calls=calls, **kwargs):
            _calls.append(module.global_step)
            return _real(*args, **kwargs)
        setattr(dist, name, counted)

@hookimpl(trylast=True)
def rlkit_after_optimizer_step(run, module, update):
    if update in (4, 6):
        _dump(module, f"update{update}")

@hookimpl(trylast=True)
def rlkit_train_end(run, module):
    _dump(module, "final")
    torch.save(COLLECTIVES, os.path.join(os.environ["LOCALSGD_TEST_DUMP"], f"calls-rank{module.global_rank}.pt"))
'''


@pytest.mark.slow
def test_two_learners_train_apart_and_end_on_one_model(tmp_path):
    env = plugin_env(tmp_path, "localsgd_test_dump", DUMP_PLUGIN, LOCALSGD_TEST_DUMP=str(tmp_path),
                     WANDB_MODE="offline")
    k = 3
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", str(RECIPE_PATH), "algo.total_steps=4000",
                          f"communication.options.k={k}", "trainer.progress_bar=false", "logging.backends=[csv]",
                          f"logging.root={tmp_path}", "logging.run_name=ls", "trainer.log_every_n_updates=10"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "ls"
    result = json.loads((run_dir / "result.json").read_text())
    updates = result["updates"]
    assert result["agent_steps"] == 4000 and updates == 100  # 2 learners x 4 envs x 5 steps per update

    def dumped(tag: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return tuple(torch.load(tmp_path / f"{tag}-rank{r}.pt") for r in (0, 1))

    mid0, mid1 = dumped("update4")  # one update after the average at 3: each learner trained on its own
    assert any(not torch.equal(a, b) for a, b in zip(mid0, mid1)), "learners did not train apart"
    for tag in ("update6", "final"):  # right after an average, and after the final one (100 % 3 != 0)
        p0, p1 = dumped(tag)
        assert all(torch.equal(a, b) for a, b in zip(p0, p1)), f"{tag}: learners differ after the average"

    # independent between syncs: every collective (the core's shared scores and stop agreement, the
    # plugin's averages) happens at a sync point (after update 3, 6, ..., 99 and the last, 100)
    syncs = [*range(k, updates + 1, k), updates]
    for rank in (0, 1):
        calls = torch.load(tmp_path / f"calls-rank{rank}.pt")
        assert calls["all_gather"] == syncs, calls["all_gather"]  # the episodes, shared at each sync only
        assert set(calls["all_reduce"]) <= {0, *syncs} and set(syncs[:-1]) <= set(calls["all_reduce"])

    # last.ckpt (learner 0's) holds the consensus model and the count: 100 // 3 in training + 1 final
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    final0, _ = dumped("final")
    saved = [t for t in ckpt["state_dict"].values() if t.is_floating_point()]
    assert len(saved) == len(final0) and all(torch.equal(a, b) for a, b in zip(saved, final0))
    assert ckpt["rlkit"]["plugins"]["localsgd"] == {"averages": updates // k + 1}

    # learner 0's metrics at the log interval (update 1, then every 10): the count at each logged
    # update, and the learners' distance from the average just before it (> 0: they diverge)
    with open(run_dir / "csv" / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("localsgd/averages")]
    assert [int(r["step"]) for r in rows] == [1, *range(10, updates + 1, 10)]
    assert all(float(r["localsgd/averages"]) == int(r["step"]) // k for r in rows)
    dists = [float(r["localsgd/dist_before"]) for r in rows if r.get("localsgd/dist_before")]
    assert len(dists) == len(rows) - 1 and all(d > 0 for d in dists)  # none before the first average
    for rank in (0, 1):  # the core's per-learner diagnostics, one row per log interval
        assert (run_dir / "csv" / f"learner{rank}.csv").is_file()
