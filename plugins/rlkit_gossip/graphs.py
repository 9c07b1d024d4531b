"""Pure functions: the peer graphs of gossip, as circulant offsets over the live learners.

Learner ``p`` (its index among the live learners, ``m`` of them) sends to ``(p + o) % m`` and
receives from ``(p - o) % m`` for each offset ``o`` used at iteration ``t``. Every learner uses the
same offsets at the same iteration, so every built-in graph is regular (in-degree = out-degree)
and uniform 1/(k+1) mixing is doubly stochastic on it.
"""

from __future__ import annotations

GRAPHS = ("ring", "exponential", "bipartite_exponential", "full")


def candidate_offsets(graph: str, m: int) -> list[int]:
    """All offsets the graph can use among ``m`` learners (no 0, no duplicates modulo m)."""
    if m <= 1:
        return []
    if graph == "ring":
        raw = [1]
    elif graph == "exponential":  # peers at 2^0, 2^1, ...
        raw = [2 ** i for i in range(m.bit_length()) if 2 ** i < m]
    elif graph == "bipartite_exponential":  # odd offsets 2^i - 1: even learners talk to odd ones
        raw = [2 ** i - 1 for i in range(1, m.bit_length() + 1) if 2 ** i - 1 < m]
    elif graph == "full":
        raw = list(range(1, m))
    else:
        raise ValueError(f"unknown graph {graph!r}; choose one of {', '.join(GRAPHS)}")
    seen: list[int] = []
    for o in raw:
        if o % m and o % m not in seen:
            seen.append(o % m)
    return seen


def offsets_at(graph: str, m: int, peers_per_itr: int, rotate: bool, t: int) -> list[int]:
    """The offsets used at iteration ``t``: the first ``peers_per_itr`` candidates, or, with
    rotation, the next ``peers_per_itr`` of them in turn each iteration."""
    cands = candidate_offsets(graph, m)
    k = min(peers_per_itr, len(cands))
    if not rotate or k == len(cands):
        return cands[:k]
    start = (t * k) % len(cands)
    return [cands[(start + i) % len(cands)] for i in range(k)]


def peers_at(alive: list[int], rank: int, graph: str, peers_per_itr: int, rotate: bool,
             t: int) -> tuple[list[int], list[int]]:
    """(out-peers, in-peers) of ``rank`` among the live learners ``alive`` at iteration ``t``."""
    m, p = len(alive), alive.index(rank)
    offs = offsets_at(graph, m, peers_per_itr, rotate, t)
    return [alive[(p + o) % m] for o in offs], [alive[(p - o) % m] for o in offs]


def all_in_peers(alive: list[int], rank: int, graph: str) -> list[int]:
    """Every learner that may send to ``rank`` at some iteration (with or without rotation)."""
    m, p = len(alive), alive.index(rank)
    return [alive[(p - o) % m] for o in candidate_offsets(graph, m)]


def mixing_matrix(out_peers: dict[int, list[int]], mixing: str) -> list[list[float]]:
    """W with x_next = W x for one lock-step round (rows = receivers), for tests and docs:
    uniform W[i][j] = 1/(1 + in-degree of i); push-sum column j splits 1/(1 + out-degree of j)."""
    n = len(out_peers)
    w = [[0.0] * n for _ in range(n)]
    if mixing == "uniform":
        ins: dict[int, list[int]] = {i: [] for i in range(n)}
        for j, outs in out_peers.items():
            for i in outs:
                ins[i].append(j)
        for i in range(n):
            share = 1.0 / (1 + len(ins[i]))
            w[i][i] = share
            for j in ins[i]:
                w[i][j] += share
    else:
        for j, outs in out_peers.items():
            share = 1.0 / (1 + len(outs))
            w[j][j] += share
            for i in outs:
                w[i][j] += share
    return w


def is_regular(out_peers: dict[int, list[int]]) -> bool:
    indeg = {i: 0 for i in out_peers}
    for outs in out_peers.values():
        for i in outs:
            indeg[i] += 1
    return all(indeg[i] == len(outs) for i, outs in out_peers.items())
