"""queues end to end: CartPole solved within 500k agent steps with the GA3C metrics in the log (the
conformance suite, Ctrl-C included, runs on queues in plugins/rlkit_<name>/tests/test_<name>_conformance.py)."""

import csv
import json
import subprocess
import sys

import pytest

from rlkit.testing import processes_of_run


def cli(tmp_path, name, *extra):
    return [sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-queues", "trainer.progress_bar=false",
            "logging.backends=[csv]", f"logging.root={tmp_path}", f"logging.run_name={name}", *extra]


@pytest.mark.slow
def test_cartpole_queues_solves_within_500k_steps(tmp_path):
    out = subprocess.run(cli(tmp_path, "solve"), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "solve" / "result.json").read_text())
    assert result["solved"] and result["score_mean"] >= 475, result
    # stop_at_score ended it strictly before the recipe's budget (500k) ran out
    assert result["agent_steps"] < 500_000, result
    assert result["agent_steps"] == result["updates"] * 8 * 5, result  # training batches of 8 segments x 5 steps
    rows = list(csv.DictReader(open(tmp_path / "solve" / "csv" / "metrics.csv")))
    lags = [float(r["queues/policy_lag"]) for r in rows if r.get("queues/policy_lag")]
    assert lags and 0 < sum(lags) / len(lags) < 10  # acting and training really are apart, a little
    assert not processes_of_run(tmp_path / "solve")


@pytest.mark.slow
def test_a_terminal_ctrl_c_checkpoints_in_one_line_without_actor_tracebacks(tmp_path):
    """Ctrl-C in a terminal is SIGINT to the whole process group, the 8 actors included: the run
    still stops as Ctrl-C promises (interrupted.ckpt, the resume line, exit code 1), with no actor's
    KeyboardInterrupt traceback, and no process of the run is left."""
    import os
    import signal

    from rlkit.testing import assert_no_leak, snapshot_tree, wait_for_log_rows

    run_dir = tmp_path / "ctrlc"
    proc = subprocess.Popen(cli(tmp_path, "ctrlc", "algo.total_steps=4000000", "algo.stop_at_score=null"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_log_rows(run_dir, 3)
        tree = snapshot_tree(proc.pid)
        actors = [pid for pid in tree if pid != proc.pid]
        assert len(actors) >= 8, tree  # the actors are up and in the group the signal goes to
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    (line,) = err.strip().splitlines()  # one line: where it stopped, the checkpoint, how to go on
    assert line.endswith(f"continue with: rlkit resume {run_dir}"), err[-3000:]
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    assert_no_leak(tree, run_dir)
