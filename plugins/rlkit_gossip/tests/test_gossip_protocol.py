"""The gossip protocol between real learner processes, with no gradient updates, over each transport
(shared memory; torch.distributed isend/irecv over gloo): lock-step is deterministic and equals
W^t x0; asynchronous gossip on a strongly connected graph drives the consensus distance to ~0; a
dead peer is dropped in bounded time."""

import time

import pytest
import torch

from rlkit_gossip import graphs
from rlkit_gossip.protocol import GossipSettings, consensus_distances
from rlkit_gossip.simulate import initial, run_learners

TRANSPORTS = pytest.mark.parametrize("transport", ["shm", "dist"])


@pytest.mark.parametrize("transport", ["shm", pytest.param("dist", marks=pytest.mark.slow)])
def test_lock_step_is_deterministic_and_equals_the_mixing_matrix(tmp_path, transport):
    s = GossipSettings(graph="ring", mixing="uniform", sync_freq=0, peer_timeout_s=30)
    ages = {}
    first = run_learners(tmp_path / "a", 4, s, 10, transport=transport, ages=ages)
    second = run_learners(tmp_path / "b", 4, s, 10, transport=transport)
    # lock-step: every learner mixes 10 messages (one per update), each sent moments before
    assert sorted(ages) == [0, 1, 2, 3] and all(n == 10 and 0 <= total < 30 for total, n in ages.values()), ages
    outs = {p: graphs.peers_at(list(range(4)), p, "ring", 1, False, 0)[0] for p in range(4)}
    w = torch.tensor(graphs.mixing_matrix(outs, "uniform"), dtype=torch.float64)
    x = torch.stack([initial(r) for r in range(4)]).double()
    expected = torch.linalg.matrix_power(w, 10) @ x
    for r in range(4):
        assert torch.equal(first[r][0], second[r][0])
        assert torch.allclose(first[r][0].double(), expected[r], atol=1e-5)


@pytest.mark.parametrize("mixing,graph,rotate", [("uniform", "ring", False), ("push_sum", "exponential", True)])
@TRANSPORTS
def test_asynchronous_gossip_reaches_consensus(tmp_path, mixing, graph, rotate, transport):
    s = GossipSettings(graph=graph, mixing=mixing, rotate_peers=rotate, sync_freq=5, peer_timeout_s=30)
    start = consensus_distances({r: initial(r) for r in range(4)})
    res = run_learners(tmp_path, 4, s, 400, transport=transport)
    end = consensus_distances({r: x for r, (x, _) in res.items()})
    assert max(start.values()) > 1.0
    assert max(end.values()) < 1e-3 * max(start.values())


@TRANSPORTS
def test_a_dead_peer_is_dropped_and_the_others_finish(tmp_path, transport):
    s = GossipSettings(graph="ring", mixing="uniform", sync_freq=0, peer_timeout_s=2, on_peer_failure="drop")
    t0 = time.monotonic()
    res = run_learners(tmp_path, 4, s, 200, die=(2, 20), timeout=60, transport=transport)
    assert sorted(res) == [0, 1, 3]
    assert any(2 in dropped for _, dropped in res.values())
    assert time.monotonic() - t0 < 45
    end = consensus_distances({r: x for r, (x, _) in res.items()})
    assert max(end.values()) < 1e-3  # the survivors re-formed a ring and agree


def test_a_learner_declared_gone_comes_back_into_every_view_when_it_rejoins():
    """The supervisor declares a dead learner gone (rlkit_learner_exit); its restarted process
    rejoins; every other learner's next poll puts it back in the graph."""
    from torch.distributed import HashStore

    from rlkit_gossip.protocol import Membership, declare_gone

    store = HashStore()
    views = {r: Membership(store, r, 4) for r in range(4)}
    declare_gone(store, 2, "died: killed by signal 9; restarting")
    gone = {r: m.refresh(force=True) for r, m in views.items() if r != 2}
    assert all(g == [(2, "died: killed by signal 9; restarting")] for g in gone.values()), gone
    assert all(views[r].alive == [0, 1, 3] for r in (0, 1, 3))
    restarted = Membership(store, 2, 4)  # a new process: a fresh view
    assert restarted.rejoin() is True and restarted.rejoin() is False  # once: it is back
    for r in (0, 1, 3):
        assert views[r].refresh(force=True) == [] and views[r].alive == [0, 1, 2, 3]
        assert views[r].rejoined == [2]
    # the graph over the live learners is the full ring again, the same in every view
    outs = {r: graphs.peers_at(views[r if r != 2 else 0].alive, r, "ring", 1, False, 0)[0] for r in range(4)}
    assert outs == {0: [1], 1: [2], 2: [3], 3: [0]}
