"""Gossip math: graphs and one mixing step, on fixed vectors, against the formulas."""

import pytest
import torch

from rlkit_gossip import graphs, mixing


def test_uniform_mix_is_the_average_of_own_and_received():
    own = torch.tensor([1.0, 2.0])
    msgs = [mixing.uniform_message(torch.tensor([3.0, 4.0])), mixing.uniform_message(torch.tensor([5.0, 0.0]))]
    assert torch.allclose(mixing.uniform_mix(own, msgs), torch.tensor([3.0, 2.0]))  # 1/(k+1) each, k = 2
    assert mixing.uniform_mix(own, []) is own


def test_push_sum_split_and_mix_follow_the_formula_and_conserve_mass():
    x = {0: torch.tensor([4.0, 0.0]), 1: torch.tensor([0.0, 8.0])}
    w = {0: 1.0, 1: 0.5}
    # 0 sends to 1 (k=1); 1 sends to nobody this round
    kept0, msg0 = mixing.push_sum_split(x[0], w[0], 1)
    assert kept0 == 0.5 and torch.allclose(msg0[0], torch.tensor([2.0, 0.0])) and msg0[1] == 0.5
    new1, w1 = mixing.push_sum_mix(x[1], w[1], [msg0])
    # z = 0.5*[0, 8] + [2, 0] = [2, 4], w = 1.0  -> x = [2, 4]
    assert w1 == 1.0 and torch.allclose(new1, torch.tensor([2.0, 4.0]))
    new0, w0 = mixing.push_sum_mix(x[0], kept0, [])
    assert torch.allclose(new0, x[0])  # de-biased: a learner that only sent keeps its parameters
    before = x[0] * w[0] + x[1] * w[1]
    after = new0 * w0 + new1 * w1
    assert torch.allclose(before, after) and w0 + w1 == w[0] + w[1]


@pytest.mark.parametrize("graph,m,expected", [("ring", 4, [1]), ("exponential", 8, [1, 2, 4]),
                                              ("exponential", 5, [1, 2, 4]), ("bipartite_exponential", 8, [1, 3, 7]),
                                              ("full", 4, [1, 2, 3]), ("ring", 1, [])])
def test_candidate_offsets(graph, m, expected):
    assert graphs.candidate_offsets(graph, m) == expected


def test_rotation_cycles_through_the_peers():
    seen = [graphs.offsets_at("exponential", 8, 1, True, t) for t in range(4)]
    assert seen == [[1], [2], [4], [1]]
    assert graphs.offsets_at("exponential", 8, 1, False, 3) == [1]
    outs, ins = graphs.peers_at([0, 1, 3], 3, "ring", 1, False, 0)  # learner 2 dropped: ring over the rest
    assert outs == [0] and ins == [1]


@pytest.mark.parametrize("graph,k", [("ring", 1), ("exponential", 2), ("bipartite_exponential", 2), ("full", 3)])
def test_built_in_graphs_are_regular_and_uniform_mixing_is_doubly_stochastic(graph, k):
    outs = {p: graphs.peers_at(list(range(4)), p, graph, k, False, 0)[0] for p in range(4)}
    assert graphs.is_regular(outs)
    w = torch.tensor(graphs.mixing_matrix(outs, "uniform"))
    assert torch.allclose(w.sum(0), torch.ones(4)) and torch.allclose(w.sum(1), torch.ones(4))


def test_irregular_graph_needs_push_sum():
    outs = {0: [1, 2], 1: [2], 2: [0]}
    assert not graphs.is_regular(outs)
    uniform = torch.tensor(graphs.mixing_matrix(outs, "uniform"))
    push = torch.tensor(graphs.mixing_matrix(outs, "push_sum"))
    assert not torch.allclose(uniform.sum(0), torch.ones(3))  # uniform loses the average
    assert torch.allclose(push.sum(0), torch.ones(3))  # push-sum keeps it (column stochastic)
