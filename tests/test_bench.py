"""``rlkit bench``: the ratio and report logic on made-up numbers, and the reference A2C loop's
correctness on CartPole. No benchmark figure is asserted here."""

import numpy as np
import pytest

from rlkit.bench.peers import (
    format_report,
    round_ratios,
    steady_sps,
    summarize,
    windows_from_csv_rows,
    windows_from_update_times,
)


def test_steady_sps_skips_the_first_fifth_of_the_updates():
    # 100 updates of 10 agent steps; windows of 10 updates; 1 s per window except a slow start
    windows = [(0, 0.0), (1, 5.0)] + [(u, 5.0 + u / 10) for u in range(10, 101, 10)]
    assert steady_sps(windows, steps_per_update=10, total_updates=100) == pytest.approx(100.0)
    assert steady_sps(windows[:3], steps_per_update=10, total_updates=100) is None  # nothing after warm-up


def test_windows_from_update_times_start_after_the_first_update():
    times = [10.0 + i for i in range(6)]  # update i + 1 ends at 10 + i
    assert windows_from_update_times(times, every=2) == [(1, 10.0), (2, 11.0), (4, 13.0), (6, 15.0)]
    assert windows_from_update_times(times, every=1)[:3] == [(1, 10.0), (2, 11.0), (3, 12.0)]


def test_csv_rows_give_back_the_logged_rates():
    rows = [{"step": "1", "sps": "50"}, {"step": "20", "sps": "400"}, {"step": "", "sps": ""},
            {"step": "40", "sps": "500"}, {"step": "60", "sps": "600"}]
    windows = windows_from_csv_rows(rows, steps_per_update=40)
    assert [u for u, _ in windows] == [0, 1, 20, 40, 60]
    rates = [(u1 - u0) * 40 / (t1 - t0) for (u0, t0), (u1, t1) in zip(windows, windows[1:])]
    assert rates == pytest.approx([50, 400, 500, 600])
    assert steady_sps(windows, 40, total_updates=60) == pytest.approx(550)  # the windows from update 20 on


ROUND = {"raw_env": {"steady": 8000.0}, "reference": {"whole": 800.0, "steady": 1000.0},
         "rlkit": {"whole": 900.0, "steady": 1100.0}, "sb3": {"whole": 450.0, "steady": 500.0}}


def test_round_ratios_are_within_the_round_and_skip_absent_contenders():
    r = round_ratios(ROUND)
    assert r["rlkit/reference (whole)"] == pytest.approx(900 / 800)
    assert r["rlkit/reference (steady)"] == pytest.approx(1.1)
    assert r["rlkit/sb3 (whole)"] == pytest.approx(2.0) and r["rlkit/sb3 (steady)"] == pytest.approx(2.2)
    assert r["reference/raw_env (steady)"] == pytest.approx(1000 / 8000)
    assert not any(k.startswith("rlkit_bf16") for k in r)
    no_sb3 = round_ratios({k: v for k, v in ROUND.items() if k != "sb3"})
    assert not any("sb3" in k for k in no_sb3)


def test_bf16_is_compared_with_the_reference_loop_under_the_same_autocast():
    r = round_ratios(dict(ROUND, reference_bf16={"whole": 1000.0, "steady": 1250.0},
                          rlkit_bf16={"whole": 1100.0, "steady": 1300.0}))
    assert r["rlkit_bf16/reference_bf16 (whole)"] == pytest.approx(1.1)
    assert r["rlkit_bf16/reference_bf16 (steady)"] == pytest.approx(1300 / 1250)
    assert r["rlkit_bf16/sb3 (whole)"] == pytest.approx(1100 / 450)
    assert r["rlkit_bf16/rlkit (whole)"] == pytest.approx(1100 / 900)


def test_summary_takes_medians_over_rounds_and_the_report_shows_every_round():
    slower = {k: {kind: x / 2 for kind, x in v.items()} for k, v in ROUND.items()}
    faster_rlkit = dict(ROUND, rlkit={"whole": 1600.0, "steady": 2000.0})
    s = summarize([ROUND, slower, faster_rlkit])
    assert s["ratios"]["rlkit/reference (whole)"]["rounds"] == pytest.approx([1.125, 1.125, 2.0])
    assert s["ratios"]["rlkit/reference (whole)"]["median"] == pytest.approx(1.125)
    assert s["sps"]["rlkit"]["whole"] == pytest.approx(900) and s["sps"]["raw_env"] == {"steady": 8000.0}
    text = format_report("pong", s, rounds=3, steps=40000)
    assert "3 rounds of 40,000 agent steps" in text
    assert "rlkit/reference (whole)              median 1.12  (rounds: 1.12 1.12 2.00)" in text


def test_the_cli_refuses_a_bad_bench_before_running_anything(capsys):
    from rlkit.cli import main

    assert main(["bench", "--env", "mars"]) == 2
    assert main(["bench", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_reference_loop_refuses_what_it_does_not_implement():
    from rlkit.bench.reference import a2c
    from rlkit.config.recipes import load_recipe

    with pytest.raises(ValueError, match="plain A2C"):
        a2c(load_recipe("a2c-cartpole-local", ["algo.gae_lambda=0.95"]), 40)


@pytest.mark.slow
def test_reference_loop_learns_cartpole():
    import torch

    from rlkit.bench.reference import a2c
    from rlkit.config.recipes import load_recipe

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = a2c(load_recipe("a2c-cartpole-local"), 30_000, seed=0)
    finally:
        torch.set_num_threads(threads)
    assert got["agent_steps"] == 30_000 and len(got["update_times"]) == 30_000 // 40
    scores = got["scores"]
    assert np.mean(scores[-20:]) > 2 * np.mean(scores[:20])  # a random policy's games last ~22 steps


def test_each_contender_runs_the_recipe_its_own_way(monkeypatch, tmp_path):
    """bf16 contenders get the precision override, the loops their own modules, everyone the --set ones."""
    import rlkit.bench.peers as bp

    seen = {}
    monkeypatch.setattr(bp, "rlkit_contender", lambda recipe, ovr, *a: seen.setdefault(a[-1], ("cli", ovr)))
    monkeypatch.setattr(bp, "loop_contender", lambda module, recipe, ovr, *a: seen.setdefault(a[-1].stem,
                                                                                              (module, ovr)))
    for c in ("reference", "reference_bf16", "rlkit", "rlkit_bf16", "sb3"):
        bp._measure(c, "a2c-pong-local", None, ["seed=3"], 800, "cpu", 10, 80, 10, tmp_path, 0)
    bf16 = "trainer.precision=bf16-mixed"
    assert seen == {"reference-0": ("rlkit.bench.reference", ["seed=3"]),
                    "reference_bf16-0": ("rlkit.bench.reference", ["seed=3", bf16]),
                    "rlkit-0": ("cli", ["seed=3"]), "rlkit_bf16-0": ("cli", ["seed=3", bf16]),
                    "sb3-0": ("rlkit.bench.sb3", ["seed=3"])}


def test_env_all_skips_minatar_when_it_is_not_installed(monkeypatch, capsys):
    import importlib.util

    import rlkit.bench.peers as bp

    ran = []
    monkeypatch.setattr(bp, "bench_one", lambda name, *a: ran.append(name) or {"summary": {}})
    monkeypatch.setattr(bp, "format_report", lambda *a: "")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "minatar" else real(n, *a))
    bp.run_peers_bench("all", 800, 1, "cpu", False, False, [], None)
    assert "minatar-breakout" not in ran and {"pong", "cartpole"} <= set(ran)
    assert "MinAtar is not installed" in capsys.readouterr().out


def test_rounds_rotate_and_keep_rlkit_beside_its_reference_loop():
    from rlkit.bench.peers import round_order

    contenders = ["raw_env", "reference", "rlkit", "reference_bf16", "rlkit_bf16", "sb3"]
    orders = [round_order(contenders, r) for r in range(8)]
    assert orders[0] == contenders
    assert all(sorted(o) == sorted(contenders) for o in orders)
    assert len({o[0] for o in orders[:4]}) == 4  # the start moves round to round
    for o in orders:  # each ratio's two processes run back to back
        for a, b in (("reference", "rlkit"), ("reference_bf16", "rlkit_bf16")):
            assert abs(o.index(a) - o.index(b)) == 1
    firsts = [o.index("rlkit") < o.index("reference") for o in orders]
    assert firsts[:4] == [False, True, False, True] and firsts[4:] == [True, False, True, False]
    assert round_order(["raw_env", "reference", "rlkit"], 1) == ["rlkit", "reference", "raw_env"]
