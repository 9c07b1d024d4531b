"""Unit tests of the example plugin: the math, the options schema, the hooks on a stand-in module."""

from __future__ import annotations

import pytest
import torch

import rlkit_lookahead
from rlkit.api import Run, UserError
from rlkit.testing import check_options, configure_run, make_run, plugin_manager
from rlkit_lookahead import LookaheadConfig
from rlkit_lookahead.communicator import LookaheadCommunicator, lookahead_update

RECIPE = {"env": {"id": "CartPole-v1", "num_envs": 2}, "communication": {"name": "lookahead"}}


def lookahead_run(tmp_path, **options) -> Run:
    return make_run(RECIPE, check_options(LookaheadConfig, options), tmp_path)


def test_lookahead_update_by_hand():
    slow, fast = [torch.tensor([0.0, 2.0])], [torch.tensor([4.0, -2.0])]
    lookahead_update(slow, fast, alpha=0.25)
    # slow = [0 + 0.25 * 4, 2 + 0.25 * -4] = [1, 1]; fast restarts from slow.
    assert slow[0].tolist() == [1.0, 1.0]
    assert fast[0].tolist() == [1.0, 1.0]


def test_alpha_one_keeps_the_fast_weights():
    slow, fast = [torch.zeros(3)], [torch.tensor([1.0, 2.0, 3.0])]
    lookahead_update(slow, fast, alpha=1.0)
    assert slow[0].tolist() == fast[0].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("options, message", [({"k": 0}, "communication.options.k: 0 is not allowed; must be >= 1"),
                                              ({"alpha": 0.0}, "must be > 0"), ({"alpha": 1.5}, "must be <= 1"),
                                              ({"beta": 1}, "unknown key 'beta'")])
def test_options_are_checked_by_the_schema(options, message):
    with pytest.raises(UserError, match=message):
        check_options(LookaheadConfig, options)


def test_registered_under_its_name():
    manager = plugin_manager(rlkit_lookahead)
    spec = manager.communicator("lookahead")
    assert spec.options_schema is LookaheadConfig
    assert isinstance(spec.factory(LookaheadConfig(), None), LookaheadCommunicator)


def test_refuses_more_than_one_learner(tmp_path):
    run, comm = configure_run(rlkit_lookahead, RECIPE, run_dir=tmp_path)  # one learner: accepted
    assert isinstance(comm, LookaheadCommunicator)
    with pytest.raises(UserError, match="placement.learners"):
        configure_run(rlkit_lookahead, RECIPE, ["placement.learners=2", "trainer.devices=2"], run_dir=tmp_path)


def test_syncs_every_k_updates_and_restores(tmp_path):
    run = lookahead_run(tmp_path, k=2, alpha=0.5)
    comm = LookaheadCommunicator(run.options, run.recipe)
    module = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        module.weight.fill_(0.0)
    for update, weight in ((1, 1.0), (2, 3.0)):  # stand-ins for what the optimizer would leave
        with torch.no_grad():
            module.weight.fill_(weight)
        comm.rlkit_after_optimizer_step(run=run, module=module, update=update)
    # slow was taken after update 1 (1.0); at update 2: 1 + 0.5 * (3 - 1) = 2.
    assert module.weight.item() == 2.0
    assert comm.rlkit_metrics(run=run, module=module) == {"lookahead/syncs": 1.0}

    restored = LookaheadCommunicator(run.options, run.recipe)
    restored.rlkit_load_state_dict(run=run, module=module, state=comm.rlkit_state_dict(run=run, module=module))
    assert restored.syncs == 1 and restored.slow[0].item() == 2.0
