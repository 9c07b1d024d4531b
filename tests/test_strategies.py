"""Independent learners' decisions (LearnerProcesses): Lightning's per-process questions stay local,
and the run-wide stop goes through the process group's store without waiting."""

import time

import pytest
import torch.distributed as dist

from rlkit.training.strategies import STOP_KEY, LearnerProcesses, default_store


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield default_store()
    finally:
        dist.destroy_process_group()


def test_file_exists_questions_stay_local_and_never_stop_the_run(one_process_group):
    """Lightning's ModelCheckpoint asks reduce_boolean_decision(all=False) whether a checkpoint file
    exists; answered as "stop the run", a learner looped for ever in the file-name versioning."""
    strategy = LearnerProcesses(independent=True)
    assert strategy.reduce_boolean_decision(True, all=False) is True
    assert strategy.reduce_boolean_decision(False, all=False) is False
    assert strategy.reduce_boolean_decision(True, all=True) is True
    assert not one_process_group.check([STOP_KEY]), "a file-exists answer set the run's stop flag"


def test_any_learner_stops_through_the_store(one_process_group):
    strategy = LearnerProcesses(independent=True)
    assert strategy.any_learner_stops(False) is False
    one_process_group.set(STOP_KEY, "3")  # another learner reached the target
    deadline = time.monotonic() + 10
    while not strategy.any_learner_stops(False) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert strategy.any_learner_stops(False) is True
    other = LearnerProcesses(independent=True)
    assert other.any_learner_stops(True) is True  # its own decision, said through the store
    assert one_process_group.check([STOP_KEY])
