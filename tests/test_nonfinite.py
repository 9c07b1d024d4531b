"""NaN/inf in an update: ``algo.on_nonfinite=stop`` ends the run with a message naming the update and
leaves only checkpoints with finite parameters; ``skip`` drops such updates (parameters untouched),
counts them, and trains on."""

import csv
import math

import pytest
import torch

from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.infra.errors import RunFailed
from rlkit.training.checkpoints import load_checkpoint
from rlkit.training.run import train


class PoisonGradients:
    """Turns the gradients of the given updates (counted from 1, skipped ones included) into NaN."""

    def __init__(self, updates):
        self.updates, self.calls, self.params_before, self.params_after = set(updates), 0, {}, {}

    @hookimpl(tryfirst=True)
    def rlkit_sync_gradients(self, run, module):
        self.calls += 1
        if self.calls - 1 in self.params_before:  # the parameters the poisoned update left
            self.params_after[self.calls - 1] = [p.detach().clone() for p in module.parameters()]
        if self.calls in self.updates:
            self.params_before[self.calls] = [p.detach().clone() for p in module.parameters()]
            for p in module.parameters():
                p.grad.fill_(math.nan)

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update):
        for p in module.parameters():
            assert torch.isfinite(p).all()


def run(tmp_path, poison, *overrides):
    manager = build_plugin_manager()
    manager.pm.register(poison)
    return train("a2c-cartpole-local", [f"logging.root={tmp_path}", "logging.run_name=nf", "logging.backends=[csv]",
                                        "trainer.progress_bar=false", "algo.stop_at_score=null",
                                        "trainer.log_every_n_updates=10", *overrides], manager)


def test_stop_names_the_update_and_keeps_only_finite_checkpoints(tmp_path):
    poison = PoisonGradients({60})
    with pytest.raises(RunFailed, match=r"learner 0: loss .*gradient norm nan at update 60;.*last good checkpoint"):
        run(tmp_path, poison, "algo.total_steps=20000", "checkpoint.every_steps=400")
    ckpts = sorted((tmp_path / "nf" / "checkpoints").glob("*.ckpt"))
    assert len(ckpts) >= 2, ckpts
    for ckpt in ckpts:
        state = load_checkpoint(ckpt)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values()), ckpt


def test_skip_drops_the_update_and_trains_on(tmp_path):
    poison = PoisonGradients({20, 21, 22})
    result = run(tmp_path, poison, "algo.total_steps=6000", "algo.on_nonfinite=skip")
    # 6000 agent steps = 150 updates of 8 envs x 5 steps; the 3 skipped ones are redone
    assert result.updates == 150 and poison.calls == 153, (result.updates, poison.calls)
    rows = list(csv.DictReader(open(tmp_path / "nf" / "csv" / "metrics.csv")))
    assert float(rows[-1]["nonfinite/skipped"]) == 3.0
    # a skipped update leaves every parameter exactly as it was
    assert sorted(poison.params_after) == [20, 21, 22]
    for update in (20, 21, 22):
        for before, after in zip(poison.params_before[update], poison.params_after[update]):
            assert torch.equal(before, after), update
    # ... while the finite updates after them did change them
    final = list(load_checkpoint(tmp_path / "nf" / "checkpoints" / "last.ckpt")["state_dict"].values())
    assert len(final) == len(poison.params_before[20])
    assert not all(torch.equal(a, b) for a, b in zip(poison.params_before[20], final))
    assert all(math.isfinite(float(r["loss/total"])) for r in rows)


def test_a_long_run_of_nonfinite_updates_stops_even_when_skipping(tmp_path):
    poison = PoisonGradients(range(10, 1000))
    with pytest.raises(RunFailed, match="100 non-finite updates in a row"):
        run(tmp_path, poison, "algo.total_steps=60000", "algo.on_nonfinite=skip")
