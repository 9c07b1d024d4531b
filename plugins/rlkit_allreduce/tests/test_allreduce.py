"""allreduce: real gloo process groups, real learner processes launched by Lightning."""

import os
import subprocess
import sys

import pytest
import torch

from rlkit.testing import plugin_env, processes_of_run, torchrun_nodes

TWO = ("placement.learners=2", "trainer.devices=2", "env.num_envs=4")


def _average_worker(rank, world, port, out):
    import torch.distributed as dist

    from rlkit.testing import check_options, load_recipe
    from rlkit_allreduce import AllreduceConfig
    from rlkit_allreduce.communicator import AllreduceCommunicator

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    batch = torch.randn(5, 3, generator=torch.Generator().manual_seed(100 + rank))  # a fixed batch per rank
    model(batch).pow(2).sum().backward()
    own = [p.grad.clone() for p in model.parameters()]
    recipe = load_recipe("a2c-cartpole-allreduce")
    comm = AllreduceCommunicator(check_options(AllreduceConfig, {}), recipe)
    assert comm.rlkit_sync_gradients(run=None, module=model) is True
    torch.save({"own": own, "synced": [p.grad.clone() for p in model.parameters()]}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_averaged_gradient_is_the_mean_of_the_ranks_gradients(tmp_path):
    port = 29500 + os.getpid() % 1000
    torch.multiprocessing.spawn(_average_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{i}.pt") for i in (0, 1))
    for own0, own1, s0, s1 in zip(r0["own"], r1["own"], r0["synced"], r1["synced"]):
        assert not torch.equal(own0, own1)  # the ranks really had different gradients
        assert torch.allclose(s0, (own0 + own1) / 2, atol=1e-7)
        assert torch.equal(s0, s1)


DUMP_PLUGIN = '''
import os, torch
from rlkit.api import hookimpl

def _dump(module, tag):
    path = os.path.join(os.environ["RLKIT_TEST_DUMP"], f"{tag}-rank{module.global_rank}.pt")
    torch.save({k: v.detach().clone() for k, v in module.model.state_dict().items()}, path)

@hookimpl
def rlkit_make_rollout_source(run, module):
    _dump(module, "initial")

@hookimpl
def rlkit_after_optimizer_step(run, module, update):
    if update == int(os.environ["RLKIT_TEST_DUMP_AT"]):
        _dump(module, "final")
'''


def _dump_env(tmp_path, at: int) -> dict:
    """The environment of a run whose learners (found through the plugin's entry point) save their
    parameters at the start and after update ``at`` under tmp_path."""
    return plugin_env(tmp_path, "rlkit_test_dump", DUMP_PLUGIN, RLKIT_TEST_DUMP=str(tmp_path),
                      RLKIT_TEST_DUMP_AT=str(at), WANDB_MODE="offline")


def _load_dumps(tmp_path) -> tuple[dict, dict, dict, dict]:
    """(initial rank 0, initial rank 1, final rank 0, final rank 1) parameters."""
    return tuple(torch.load(tmp_path / f"{t}-rank{r}.pt")
                 for t, r in (("initial", 0), ("initial", 1), ("final", 0), ("final", 1)))


@pytest.mark.slow
def test_parameters_are_bit_identical_across_ranks_after_training(tmp_path):
    env = _dump_env(tmp_path, 50)
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-allreduce", *TWO,
                          "algo.total_steps=4000", "trainer.progress_bar=false", "logging.backends=[csv]",
                          f"logging.root={tmp_path}", "logging.run_name=ar"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    init0, init1, fin0, fin1 = _load_dumps(tmp_path)
    for name in fin0:
        assert torch.equal(init0[name], init1[name]), name  # rank 0's parameters were broadcast
        assert torch.equal(fin0[name], fin1[name]), f"{name} differs across ranks after 50 updates"
    assert any(not torch.equal(init0[n], fin0[n]) for n in fin0), "training did not change the parameters"
    header = (tmp_path / "ar" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "comm/allreduce_ms" in header and "comm/allreduce_frac" in header
    assert "value/explained_variance" in header and "model/dead_units" in header
    # every learner writes its own diagnostics, one row per log interval
    import csv

    for rank in (0, 1):
        with open(tmp_path / "ar" / "csv" / f"learner{rank}.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [int(r["step"]) for r in rows][:2] == [1, 20], rows[:2]  # update 1, then every 20
        assert all(-50 < float(r["value/explained_variance"]) <= 1 for r in rows)
        assert int(float(rows[-1]["learner_agent_steps"])) == int(rows[-1]["step"]) * 4 * 5  # 4 envs x 5 steps


@pytest.mark.slow
def test_cartpole_allreduce_two_learners_solves_within_300k_total_steps(tmp_path):
    import json

    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-allreduce",
                          "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
                          "logging.run_name=solve"], capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, WANDB_MODE="offline"))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "solve" / "result.json").read_text())
    assert result["solved"] and result["score_mean"] >= 475, result
    # stop_at_score ended it strictly before the recipe's budget (300k, summed over both learners)
    assert result["agent_steps"] < 300_000, result
    assert result["agent_steps"] == result["updates"] * 2 * 4 * 5, result  # 2 learners x 4 envs x 5 steps


@pytest.mark.slow
def test_with_no_restarts_a_dead_learner_stops_the_run_within_seconds_in_one_line(tmp_path):
    """fault.max_restarts=0: SIGKILL of learner 1 ends the run (the other learner fails its next
    all-reduce at once) with one `run failed` line naming it, exit code 1, within seconds."""
    import signal
    import time

    from rlkit.testing import learner_pid, processes_of_run, wait_for_log_rows

    run_dir = tmp_path / "kill"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-allreduce",
                             "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
                             "logging.run_name=kill", "algo.stop_at_score=null", "fault.max_restarts=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for_log_rows(run_dir, 3)  # both learners are training
        victim = learner_pid(run_dir, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert time.monotonic() - killed < 15, time.monotonic() - killed
    failed = [line for line in err.splitlines() if line.startswith("rlkit: run failed:")]
    assert len(failed) == 1 and f"learner 1 (pid {victim}) killed by SIGKILL" in failed[0], err[-3000:]
    assert "fault.max_restarts=0" in failed[0] and "restarting" not in err, err[-3000:]
    assert "Traceback" not in err
    assert not processes_of_run(run_dir)


@pytest.mark.slow
def test_two_nodes_on_loopback_train_and_exit_cleanly(tmp_path):
    """The documented multi-node launch: one torchrun per node (here both on 127.0.0.1)."""
    outs = torchrun_nodes(tmp_path, "a2c-cartpole-allreduce", 2, 1,
                          ["trainer.torch_threads=1", "algo.total_steps=3990", "trainer.progress_bar=false",
                           "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=two-nodes"])
    for code, _, err in outs:
        assert code == 0, err[-3000:]
    import json

    result = json.loads((tmp_path / "two-nodes" / "result.json").read_text())
    # whole updates of 2 learners x 4 envs x 5 steps = 40 agent steps until the budget is covered:
    # ceil(3990 / 40) = 100 updates, 4000 agent steps
    assert (result["updates"], result["agent_steps"]) == (100, 4000), result
    assert outs[0][1].count("agent steps") == 1 and "agent steps" not in outs[1][1]
    assert (tmp_path / "two-nodes" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.skip(reason="hangs after the restart on a busy host (passes alone in 32 s; killed at 300 s in the "
                         "suite and beside two CPU hogs, 2 of 2): issue 33, not supported yet")
def test_torchrun_max_restarts_restarts_both_nodes_from_the_newest_checkpoint(tmp_path):
    """Across hosts torchrun's elastic agent is the supervisor (c10d rendezvous, --max-restarts):
    learner 1 is SIGKILLed after update 150; the survivor fails its next all-reduce, both nodes'
    agents start their learners again, and every learner continues from the run's newest
    checkpoint (update 100): exit code 0 on both nodes, the whole budget, one log without repeated
    or missing rows, no process left. A new torchrun into the same folder is refused (the folder
    holds a run; `rlkit resume` continues it), not silently continued."""
    import csv
    import json

    run_dir = tmp_path / "elastic"
    args = ["trainer.torch_threads=1", "algo.total_steps=16000", "algo.stop_at_score=null", "checkpoint.every_steps=4000",
            "fault.kill_learner=1", "fault.kill_at_update=150", "trainer.progress_bar=false", "logging.backends=[csv]",
            "trainer.log_every_n_updates=10", f"logging.root={tmp_path}", "logging.run_name=elastic"]
    outs = torchrun_nodes(tmp_path, "a2c-cartpole-allreduce", 2, 1, args, max_restarts=1)
    err = "".join(e for _, _, e in outs)
    for code, _, node_err in outs:
        assert code == 0, node_err[-3000:]
    assert "kills itself with SIGKILL after update 150" in err, err[-3000:]  # the fault happened
    assert f"every learner restarted (by torchrun) from {run_dir / 'checkpoints' / 'update-100.ckpt'} (update 100)" in err, \
        err[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["updates"], result["agent_steps"]) == (400, 16000), result  # 2 x 4 envs x 5 steps per update
    with open(run_dir / "csv" / "metrics.csv", newline="") as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert steps == [1, *range(10, 401, 10)], steps  # rows 110-150 of the lost attempt logged once, again
    assert not processes_of_run(run_dir)

    again = torchrun_nodes(tmp_path, "a2c-cartpole-allreduce", 2, 1, [a for a in args if not a.startswith("fault.")],
                           max_restarts=1, timeout_s=120)
    assert all(code != 0 for code, _, _ in again), again
    assert f"logging.run_name: {run_dir} already holds a run's checkpoints" in "".join(e for _, _, e in again)


@pytest.mark.slow
def test_two_learners_share_one_device(tmp_path):
    """placement.learners_per_device: 2 learner processes on 1 device (gloo), gradients still averaged:
    every logged update timed an all-reduce between 2 ranks, and the two learners' parameters are
    identical after the last update (each stepping on its own gradients would set them apart)."""
    import csv
    import json

    # ceil(7990 / (2 learners x 4 envs x 5 steps)) = 200 updates = 8000 agent steps
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-allreduce", "trainer.devices=1",
                          "placement.learners=2", "placement.learners_per_device=2", "algo.total_steps=7990",
                          "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
                          "logging.run_name=shared"], capture_output=True, text=True, timeout=300,
                         env=_dump_env(tmp_path, 200))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "shared" / "result.json").read_text())
    assert (result["updates"], result["agent_steps"]) == (200, 8000), result
    with open(tmp_path / "shared" / "csv" / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1, *range(20, 201, 20)], [r["step"] for r in rows]
    for r in rows:
        assert float(r["comm/world_size"]) == 2.0, r
        assert float(r["comm/allreduce_ms"]) > 0 and 0 < float(r["comm/allreduce_frac"]) < 1, r
    init0, init1, fin0, fin1 = _load_dumps(tmp_path)
    for name in fin0:
        assert torch.equal(fin0[name], fin1[name]), f"{name} differs across the two learners after 200 updates"
    assert any(not torch.equal(init0[n], fin0[n]) for n in fin0), "training did not change the parameters"
