"""``rlkit compare`` on hand-made run folders: grouping, the table's numbers, the files."""

import json
import subprocess
import sys

import pytest

from rlkit.commands.compare import compare, steps_to_target
from rlkit.commands.stats import iqm_estimate


def make_run(folder, env_id, communicator, final, curve, sps=1000.0, finished=True):
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(f"env:\n  id: {env_id}\ncommunication:\n  name: {communicator}\n")
    if finished:
        (folder / "result.json").write_text(json.dumps({"score_mean": final, "agent_steps": curve[-1][0]}))
    rows = ["agent_steps,score_mean,sps,step"] + [f"{s},{v},{sps},{i}" for i, (s, v) in enumerate(curve)]
    (folder / "csv").mkdir()
    (folder / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "runs" / "s"
    root.mkdir(parents=True)
    (root / "sweep.json").write_text("{}")
    finals = {"a2c-x-local": [1.0, 2.0, 3.0, 10.0], "a2c-x-gossip": [5.0, 5.0, 5.0, 5.0]}
    for label, scores in finals.items():
        for seed, final in enumerate(scores):
            curve = [(1000, 0.0), (2000, final / 2), (3000, final)]
            make_run(root / label / f"seed{seed}", "Toy-v0", label.rsplit("-", 1)[1], final, curve,
                     sps=100.0 * (seed + 1))
    return root


def test_table_per_env_and_recipe(sweep):
    text, table, png = compare([str(sweep)], target=2.5)
    assert table == sweep / "compare.md" and png == sweep / "curves.png" and png.stat().st_size > 1000
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| a2c-")}
    local, gossip = rows["a2c-x-local"], rows["a2c-x-gossip"]
    # IQM of [1, 2, 3, 10] is the mean of 2 and 3; the interval comes from the stats module
    assert local[1:3] == ["local", "4"] and local[3] == str(iqm_estimate([1.0, 2.0, 3.0, 10.0]))
    assert local[3].startswith("2.50 [") and local[4:6] == ["2.50", "4.00"]
    # to 2.5: the runs ending at 3 and 10 reach it (at 3000 and 2000), those at 1 and 2 never: the
    # median over all four runs is not a number of steps
    assert local[6] == "not reached (2/4)" and local[7] == "250 |"
    assert gossip[3] == "5.00 [5.00, 5.00]" and gossip[6] == "2,000 (4/4)"
    assert "## Toy-v0" in text and table.read_text() == text
    # the numbers behind the table and the plot
    import csv
    runs = list(csv.DictReader((sweep / "runs.csv").open()))
    assert len(runs) == 8 and {r["run"] for r in runs} == {f"seed{k}" for k in range(4)}
    finals = sorted(float(r["final_score"]) for r in runs if r["recipe"] == "a2c-x-local")
    assert finals == [1.0, 2.0, 3.0, 10.0]
    assert sorted(float(r["agent_steps_per_s"]) for r in runs if r["recipe"] == "a2c-x-local") == [100.0, 200.0, 300.0, 400.0]
    curves = list(csv.DictReader((sweep / "curves.csv").open()))
    assert len(curves) == 8 * 3
    seed3 = [(int(r["agent_steps"]), float(r["score_mean"])) for r in curves
             if r["recipe"] == "a2c-x-local" and r["run"] == "seed3"]
    assert seed3 == [(1000, 0.0), (2000, 5.0), (3000, 10.0)]
    # to 1.5: at 3000 (final 2), 2000 (final 3: 1.5 at 2000), 2000 (final 10) and never: median 2500
    text, _, _ = compare([str(sweep)], target=1.5)
    assert "| a2c-x-local | local | 4 | 2.50 [" in text and "| 2,500 (3/4) | 250 |" in text


def test_run_folders_outside_a_sweep_group_by_communicator_and_env(tmp_path):
    make_run(tmp_path / "a", "Toy-v0", "local", 2.0, [(100, 1.0), (200, 2.0)])
    make_run(tmp_path / "b", "Toy-v0", "local", 4.0, [(100, 3.0), (200, 4.0)], finished=False)
    make_run(tmp_path / "c", "Other-v0", "queues", 7.0, [(100, 7.0), (200, 7.0)])
    text, table, _ = compare([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")],
                             out_dir=str(tmp_path / "out"))
    assert table == tmp_path / "out" / "compare.md"
    assert "| local | local | 2 (1 unfinished) | 3.00 [2.00, 4.00] |" in text
    assert "## Other-v0" in text and "| queues | queues | 1 |" in text


def test_one_recipe_in_two_sweeps_is_a_row_per_sweep(tmp_path):
    """The same recipe swept twice (with and without an override: a fault, say) is compared, not
    pooled: a row per sweep, labelled by the sweep's folder, in the table and the CSVs."""
    for name, finals in (("nokill", [4.0, 5.0]), ("kill", [1.0, 2.0])):
        root = tmp_path / name
        root.mkdir()
        (root / "sweep.json").write_text("{}")
        for seed, final in enumerate(finals):
            make_run(root / "a2c-x-gossip" / f"seed{seed}", "Toy-v0", "gossip", final, [(100, final)])
    text, _, _ = compare([str(tmp_path / "nokill"), str(tmp_path / "kill")], out_dir=str(tmp_path / "out"))
    assert "| nokill/a2c-x-gossip | gossip | 2 | 4.50 [4.00, 5.00] |" in text, text
    assert "| kill/a2c-x-gossip | gossip | 2 | 1.50 [1.00, 2.00] |" in text, text
    import csv

    rows = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    assert sorted(r["recipe"] for r in rows) == ["kill/a2c-x-gossip"] * 2 + ["nokill/a2c-x-gossip"] * 2


def test_steps_to_target_is_the_first_logged_crossing():
    import numpy as np

    curve = np.array([[10, 0.0], [20, 5.0], [30, 4.0], [40, 6.0]])
    assert steps_to_target(curve, 5.0) == 20 and steps_to_target(curve, 6.0) == 40
    assert steps_to_target(curve, 7.0) == float("inf")


@pytest.mark.parametrize("args, needle", [
    (["compare", "no-such-dir"], "compare: no-such-dir not found"),
    (["compare", "."], "compare: . holds no runs (no recipe.yaml in it or below it)"),
    (["compare", ".", "--target", "x"], "argument --target: invalid float value: 'x'"),
])
def test_bad_compare_input_is_one_line_exit_2(args, needle, tmp_path):
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr
