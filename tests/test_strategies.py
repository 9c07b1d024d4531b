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


# -- learners that meet only at syncs (LearnerLayout.sync_every) ---------------------------------


def test_sync_points_are_every_kth_update_and_the_last():
    from rlkit.learner.group import is_sync_point

    assert [u for u in range(1, 11) if is_sync_point(u, 3, last_update=10)] == [3, 6, 9, 10]
    assert [u for u in range(1, 6) if is_sync_point(u, 1, last_update=5)] == [1, 2, 3, 4, 5]


def test_the_episode_buffer_keeps_what_ended_between_syncs_and_the_newest_at_capacity():
    from rlkit.learner.group import EpisodeBuffer

    buffer = EpisodeBuffer()
    buffer.add([1.0], [10.0], False)
    buffer.add([], [], True)  # a stop asked between syncs is kept for the next one
    buffer.add([2.0, 3.0], [20.0, 30.0], False)
    assert buffer.take(capacity=2) == ([2.0, 3.0], [20.0, 30.0], True)
    assert buffer.take(capacity=2) == ([], [], False), "taken means emptied"


class _Trainer:
    def __init__(self, global_step, max_steps):
        self.global_step, self.max_steps = global_step, max_steps


def test_between_syncs_a_synchronous_learner_shares_nothing_and_does_not_stop(one_process_group, monkeypatch):
    """With sync_every=3 the episodes of updates 1 and 2 are held, and a stop decision waits; after
    update 3 they are shared (one all-gather, here over a group of one) and the stop is taken."""
    strategy = LearnerProcesses(sync_every=3)
    trainer = _Trainer(1, max_steps=10)
    monkeypatch.setattr(LearnerProcesses, "lightning_module", property(lambda self: type("M", (), {"trainer": trainer})))
    monkeypatch.setattr(LearnerProcesses, "root_device", property(lambda self: __import__("torch").device("cpu")))
    monkeypatch.setattr(LearnerProcesses, "world_size", property(lambda self: 1))
    gathers = []
    real = dist.all_gather
    monkeypatch.setattr(dist, "all_gather", lambda *a, **k: (gathers.append(trainer.global_step), real(*a, **k)))
    assert strategy.share_episodes([5.0], [50.0], False, capacity=4) == ([], [], False)
    assert strategy.any_learner_stops(True) is False, "a stop between syncs must wait for the sync"
    trainer.global_step = 2
    assert strategy.share_episodes([], [], True, capacity=4) == ([], [], False)
    trainer.global_step = 3
    assert strategy.share_episodes([7.0], [70.0], False, capacity=4) == ([5.0, 7.0], [50.0, 70.0], True)
    assert strategy.any_learner_stops(True) is True and gathers == [3]


def test_sync_every_is_for_synchronous_layouts():
    from rlkit.hooks.layout import LearnerLayout, Topology

    with pytest.raises(ValueError, match="needs Topology.SYNCHRONOUS"):
        LearnerLayout(Topology.INDEPENDENT, sync_every=4)
    with pytest.raises(ValueError, match="must be >= 1"):
        LearnerLayout(Topology.SYNCHRONOUS, sync_every=0)


def test_an_independent_learner_resumes_only_its_own_checkpoint(tmp_path):
    """Learner 0's are checkpoints/*.ckpt, learner r's checkpoints/learner<r>/*.ckpt; one with none
    of its own starts at update 0 (None), never from another learner's state."""
    import torch

    from rlkit.training.supervisor import own_checkpoint

    ckpts = tmp_path / "checkpoints"
    (ckpts / "learner1").mkdir(parents=True)
    for path, step in [(ckpts / "update-200.ckpt", 200), (ckpts / "update-400.ckpt", 400),
                       (ckpts / "learner1" / "update-200.ckpt", 200)]:
        torch.save({"global_step": step}, path)
    (ckpts / "learner1" / "last.ckpt").write_bytes(b"cut short")  # unreadable: passed over
    assert own_checkpoint(ckpts, 0) == ckpts / "update-400.ckpt"
    assert own_checkpoint(ckpts, 1) == ckpts / "learner1" / "update-200.ckpt"
    assert own_checkpoint(ckpts, 2) is None
