#!/usr/bin/python3
"""bench/cost_model.py against the C++ formulas it asks (`gradsync predict`):
the all-reduce family's at the points allreduce/algorithms/cost_model_test.cc
checks, and every formula against a Python reference, kept only here, over a
grid of N × size × α × B × K (GridAgainstReference)."""
import functools
import heapq
import itertools
import math
import unittest

import cost_model
import scaling

LINK = cost_model.Link(1e-3, 1.25e8)  # 1 ms, 1 Gbit/s


# --- The reference: the formulas as Python had them before they moved to C++,
# kept to check the C++ (and the way Python asks it) over the grid. ----------

def ring_time(n, size, link):
    if n == 1:
        return 0.0
    segment = size / n / link.bandwidth
    return max(2 * (n - 1) * segment + link.alpha_s,
               2 * (n - 1) * link.alpha_s + segment)


def halving_doubling_time(n, size, link, eager_bytes=0):
    if n <= 1:
        return 0.0
    p = 1 << (n.bit_length() - 1)
    t = 2 * math.log2(p) * link.alpha_s + 2 * (p - 1) / p * size / link.bandwidth
    if n > p:
        t += 2 * link.alpha_s + 2 * size / link.bandwidth
    wait = link.alpha_s - eager_bytes / link.bandwidth
    if eager_bytes > 0 and wait > 0:
        step = size / 2
        while step > eager_bytes and step * p >= size:
            t += 2 * wait
            step /= 2
        if size / p > eager_bytes:
            t -= wait
    return t


def _bit_trees(n):
    def node(p):
        bit = p & -p
        parent = (p ^ bit) | (bit << 1)
        if parent > n:
            parent = p ^ bit
        children, low = [], bit >> 1
        if low:
            children.append(p - low)
        while low and p + low > n:
            low >>= 1
        if low:
            children.append(p + low)
        return parent, children

    trees = []
    for rank in (lambda p: p - 1, (lambda p: n - p) if n % 2 == 0 else (lambda p: p % n)):
        tree = {}
        for p in range(1, n + 1):
            parent, children = node(p)
            tree[rank(p)] = (rank(parent) if parent else -1, [rank(c) for c in children])
        trees.append(tree)
    return trees


def _midpoint_trees(n):
    nodes = {}

    def build(lo, hi, parent):
        if lo >= hi:
            return -1
        root = lo + (hi - lo) // 2
        left, right = build(lo, root, root), build(root + 1, hi, root)
        nodes[root] = (parent, [c for c in (left, right) if c >= 0])
        return root
    build(0, n, -1)
    trees = []
    for t in (0, 1):
        def rank(x):
            return -1 if x < 0 else (x + t) % n
        trees.append({rank(x): (rank(p), [rank(c) for c in children])
                      for x, (p, children) in nodes.items()})
    return trees


def tree_edges(trees, n):
    return [sum((t[r][0] >= 0) + len(t[r][1]) for t in trees) for r in range(n)]


def double_binary_tree(n, tree):
    def busiest(trees):
        edges = tree_edges(trees, n)
        return max(edges), edges.count(max(edges))
    bit, midpoint = _bit_trees(n), _midpoint_trees(n)
    return (midpoint if busiest(midpoint) < busiest(bit) else bit)[tree]


@functools.lru_cache(maxsize=None)
def tree_rank_costs(n):
    trees = [double_binary_tree(n, 0), double_binary_tree(n, 1)]

    def depth(tree, x):
        d = 0
        while tree[x][0] >= 0:
            x, d = tree[x][0], d + 1
        return d

    def height(tree, x):
        children = tree[x][1]
        return 1 + max(height(tree, c) for c in children) if children else 0

    tree_depth = [max(depth(tree, x) for x in range(n)) for tree in trees]
    costs = set()
    for r in range(n):
        last, edges = {}, 0
        for t, tree in enumerate(trees):
            parent, children = tree[r]
            sends = ([(parent, (height(tree, r), t, 0), depth(tree, r) + tree_depth[t])]
                     if parent >= 0 else [])
            sends += [(c, (tree_depth[t] + depth(tree, r), t, 1), height(tree, r))
                      for c in children]
            for peer, order, hops in sends:
                edges += 1
                if peer not in last or order > last[peer][0]:
                    last[peer] = (order, hops)
        costs.add((edges, max(hops for _, hops in last.values())))
    return sorted(costs)


def tree_time(n, size, link, eager_bytes=0):
    if n <= 1:
        return 0.0
    half = size / 2 / link.bandwidth
    wait = 0.0
    if eager_bytes > 0 and size / 2 > eager_bytes:
        wait = max(0.0, link.alpha_s - eager_bytes / link.bandwidth)
    levels = max(1, (n).bit_length() - 1)
    t = 2 * levels * link.alpha_s + half
    for edges, hops in tree_rank_costs(n):
        t = max(t, edges * half + hops * link.alpha_s + wait)
    return t


def hierarchical_time(n, ranks_per_node, size, link, intra=None, shared=True,
                      eager_bytes=0):
    if n <= 1:
        return 0.0
    intra = intra or link
    r = max(1, ranks_per_node)
    t = 0.0
    if r > 1:
        t += 2 * (intra.alpha_s + (r - 1) / r * size / intra.bandwidth)
    across = cost_model.Link(link.alpha_s, link.bandwidth / r) if shared else link
    return t + halving_doubling_time(n // r, size / r, across, eager_bytes)


def allreduce_pick(n, size, link, eager_bytes=cost_model.EAGER_BYTES):
    best, time = "ring", ring_time(n, size, link)
    for name, t in (("halving_doubling", halving_doubling_time(n, size, link, eager_bytes)),
                    ("tree", tree_time(n, size, link, eager_bytes))):
        if t < time:
            best, time = name, t
    return best, time


def ps_tail_block(last_key, message_bytes=cost_model.PS_MESSAGE_BYTES):
    return min(last_key, message_bytes)


def ps_time(n, size, link, largest_share, last_key=None, message_bytes=cost_model.PS_MESSAGE_BYTES,
            reduce_bytes_per_s=None):
    if last_key is None:
        last_key = min(size, cost_model.PS_CHUNK_BYTES)
    busiest = max(size, n * largest_share * size) / link.bandwidth
    if reduce_bytes_per_s:
        busiest = max(busiest, n * largest_share * size / reduce_bytes_per_s)
    tail = n * ps_tail_block(last_key, message_bytes)
    return busiest + tail / link.bandwidth + 2 * link.alpha_s


def colocated_ps_time(n, size, link, last_key=None, message_bytes=cost_model.PS_MESSAGE_BYTES,
                      largest_share=None):
    if n == 1:
        return 0.0
    if last_key is None:
        last_key = min(size, cost_model.PS_CHUNK_BYTES)
    share = 1.0 / n if largest_share is None else largest_share
    tail = (n - 1) * ps_tail_block(last_key, message_bytes)
    return _serving_worker_time(n, size, share, link) + tail / link.bandwidth


def _serving_worker_time(n, size, share, link):
    busy = (size + (n - 2) * share * size) / link.bandwidth
    pushes = (1 - share) * size / link.bandwidth
    return max(busy + link.alpha_s, 2 * link.alpha_s + pushes)


def byteps_time(n, k, size, link):
    if n == 1:
        return 0.0
    return 2 * n * (n - 1) * size / ((n * n + k * n - 2 * k) * link.bandwidth)


def mixed_ps_time(n, colocated, separate, size, link, last_key=None,
                  message_bytes=cost_model.PS_MESSAGE_BYTES, largest_share=None,
                  separate_share=None):
    k = colocated + separate
    if k < 1 or colocated > n:
        raise ValueError(f"no servers or more colocated ({colocated}) than workers ({n})")
    share = 1.0 / k if largest_share is None else largest_share
    far_share = share if separate_share is None else separate_share
    if colocated == 0:
        return ps_time(n, size, link, far_share, last_key=last_key,
                       message_bytes=message_bytes)
    if n == 1 and separate == 0:
        return 0.0  # the only worker's own server: nothing crosses a link
    if last_key is None:
        last_key = min(size, cost_model.PS_CHUNK_BYTES)
    time = _serving_worker_time(n, size, share, link)
    if separate or colocated < n:
        # A separate server's link or a worker that does not serve: one
        # kind of traffic each way, both latencies paid, as in (2).
        one_way = max(n * far_share * size if separate else 0.0, size)
        time = max(time, one_way / link.bandwidth + 2 * link.alpha_s)
    tail = (n - 1) * ps_tail_block(last_key, message_bytes)
    return time + tail / link.bandwidth


def placement_shares(n, colocated, separate, partition="equal"):
    k = colocated + separate
    if k < 1 or colocated > n or colocated < 0 or separate < 0:
        raise ValueError(f"no servers or more colocated ({colocated}) than workers ({n})")
    if partition not in ("equal", "balanced"):
        raise ValueError(f"unknown partition {partition}")
    if partition == "equal" or colocated == 0 or separate == 0 or n == 1:
        return 1.0 / k, 1.0 / k
    f_c = max(0.0, (n - separate) / (separate * (n - 2) + n * colocated))
    return f_c, (1 - colocated * f_c) / separate


def placed_shares(size, n, colocated, separate, partition="equal", chunk=cost_model.PS_CHUNK_BYTES):
    f_c, f_s = placement_shares(n, colocated, separate, partition)
    targets = [f_c] * colocated + [f_s] * separate
    keys = [chunk] * int(size // chunk)
    if size - chunk * len(keys) > 0:
        keys.append(size - chunk * len(keys))
    loads = [0.0] * len(targets)
    for key in keys:  # already largest first
        fills = [(loads[s] + key) / t if t > 0 else math.inf for s, t in enumerate(targets)]
        s = fills.index(min(fills))
        loads[s] += key
    return (max(loads[:colocated], default=0.0) / size,
            max(loads[colocated:], default=0.0) / size)


def balanced_share(size, k, chunk=cost_model.PS_CHUNK_BYTES):
    keys = [chunk] * int(size // chunk)
    if size - chunk * len(keys) > 0:
        keys.append(size - chunk * len(keys))
    loads = [0.0] * min(k, len(keys))
    heapq.heapify(loads)
    for key in keys:  # already largest first
        heapq.heapreplace(loads, loads[0] + key)
    return max(loads) / size


# The grid: N (powers of two and not, one rank), S (a byte to a large model),
# α (none to a WAN's), B (100 Mbit/s to 100 Gbit/s), K (one server to N).
GRID_N = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 31, 64)
GRID_BYTES = (1, 4096, 65536, 1 << 20, 25 << 20, 300_000_000)
GRID_ALPHA = (0.0, 1e-5, 1e-3, 5e-3)
GRID_BANDWIDTH = (1.25e7, 1.25e8, 1.25e10)
GRID_LINKS = [cost_model.Link(a, b) for a, b in itertools.product(GRID_ALPHA, GRID_BANDWIDTH)]


# Keys of the placement checks: 1 MiB, so that the largest size is a few
# hundred keys and the pure-Python reference stays quick.
PLACED_CHUNK = 1 << 20


def grid_servers(n):
    return sorted({1, 2, 4, 8, n})


class GridAgainstReference(unittest.TestCase):
    """Every formula's query, as cost_model.py builds it, asked of the C++ in
    one batch per test and held against the reference."""

    def assertClose(self, got, want, where):
        self.assertTrue(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15),
                        f"{where}: C++ {got!r}, reference {want!r}")

    def check(self, cases, key="seconds"):
        """`cases`: (query, reference value, where); one batch."""
        answers = cost_model.ask_many([query for query, _, _ in cases])
        for (query, want, where), answer in zip(cases, answers):
            self.assertClose(answer[key], want, f"{query['formula']} {where}")
        return answers

    def test_trees_are_the_reference_trees(self):
        for n in range(1, 70):
            for t in (0, 1):
                self.assertEqual(cost_model.double_binary_tree(n, t), double_binary_tree(n, t), n)
            if n > 1:
                self.assertEqual(cost_model.tree_rank_costs(n), tree_rank_costs(n), n)

    def test_all_reduce_family(self):
        intra = cost_model.Link(2e-6, 1e10)
        cases, picks = [], []
        for n, size, link in itertools.product(GRID_N, GRID_BYTES, GRID_LINKS):
            where = f"N={n} S={size} {link}"
            cases.append((cost_model.ring_query(n, size, link), ring_time(n, size, link), where))
            for eager in (0, cost_model.EAGER_BYTES):
                cases.append((cost_model.halving_doubling_query(n, size, link, eager),
                              halving_doubling_time(n, size, link, eager), where))
                cases.append((cost_model.tree_query(n, size, link, eager),
                              tree_time(n, size, link, eager), where))
            for r, shared in itertools.product((1, 2, 4), (True, False)):
                cases.append((cost_model.hierarchical_query(n, r, size, link, intra, shared),
                              hierarchical_time(n, r, size, link, intra, shared),
                              f"R={r} shared={shared} {where}"))
            cases.append((cost_model.allgather_query(n, size, link),
                          0.0 if n <= 1 else (n - 1) * link.alpha_s
                          + (n - 1) * (size + 24) / link.bandwidth, where))
            name, seconds = allreduce_pick(n, size, link)
            cases.append((cost_model.allreduce_query(n, size, link), seconds, where))
            picks.append((name, n, size, link))
        answers = self.check(cases)
        chosen = [a["algorithm"] for a in answers if "algorithm" in a]
        self.assertEqual(len(chosen), len(picks))
        for got, (want, n, size, link) in zip(chosen, picks):
            if got != want:  # only on a tie within rounding
                times = {"ring": ring_time(n, size, link),
                         "halving_doubling": halving_doubling_time(
                             n, size, link, cost_model.EAGER_BYTES),
                         "tree": tree_time(n, size, link, cost_model.EAGER_BYTES)}
                self.assertClose(times[got], times[want], f"pick's tie N={n} S={size} {link}")

    def test_parameter_server(self):
        shares = {}
        share_cases = []
        for n, size in itertools.product(GRID_N, GRID_BYTES):
            for k, chunk in itertools.product(grid_servers(n), (64 << 10, 4 << 20)):
                shares[(size, k, chunk)] = balanced_share(size, k, chunk)
                share_cases.append((cost_model.balanced_share_query(size, k, chunk),
                                    shares[(size, k, chunk)], f"S={size} K={k} chunk={chunk}"))
        self.check(share_cases, "share")
        cases = []
        for n, size, link in itertools.product(GRID_N, GRID_BYTES, GRID_LINKS):
            for k, chunk in itertools.product(grid_servers(n), (64 << 10, 4 << 20)):
                where = f"N={n} K={k} chunk={chunk} S={size} {link}"
                share = shares[(size, k, chunk)]
                for last_key, message, gamma in ((None, 1 << 20, None), (0, 1 << 20, None),
                                                 (chunk, 64 << 10, 2e9)):
                    cases.append((cost_model.ps_query(n, size, link, share, last_key, message,
                                                      gamma),
                                  ps_time(n, size, link, share, last_key, message, gamma),
                                  f"{where} key={last_key} message={message} γ={gamma}"))
                cases.append((cost_model.byteps_query(n, k, size, link),
                              byteps_time(n, k, size, link), where))
            for last_key in (None, 0, 64 << 10):
                cases.append((cost_model.colocated_ps_query(n, size, link, last_key),
                              colocated_ps_time(n, size, link, last_key),
                              f"N={n} S={size} key={last_key} {link}"))
        self.check(cases)

    def test_mixed_placements(self):
        layouts = [(n, size, c, s, partition)
                   for n, size in itertools.product(GRID_N, GRID_BYTES)
                   for c, s in itertools.product(sorted({0, 1, n // 2, n}), sorted({0, 1, 2, n}))
                   if 1 <= c + s and c <= n
                   for partition in ("equal", "balanced")]
        targets = [(cost_model.placement_shares_query(n, c, s, partition),
                    placement_shares(n, c, s, partition), f"N={n} c={c} s={s} {partition}")
                   for n, _, c, s, partition in layouts]
        for (query, want, where), answer in zip(targets, cost_model.ask_many(
                [query for query, _, _ in targets])):
            self.assertClose(answer["shares"][0], want[0], where)
            self.assertClose(answer["shares"][-1], want[1], where)
        placed = [placed_shares(size, n, c, s, partition, PLACED_CHUNK)
                  for n, size, c, s, partition in layouts]
        answers = cost_model.ask_many([
            cost_model.placed_shares_query(size, n, c, s, partition, PLACED_CHUNK)
            for n, size, c, s, partition in layouts])
        for layout, want, answer in zip(layouts, placed, answers):
            self.assertClose(answer["colocated_share"], want[0], f"placed {layout}")
            self.assertClose(answer["separate_share"], want[1], f"placed {layout}")
        cases = []
        for (n, size, c, s, partition), (f_c, f_s) in zip(layouts, placed):
            for link in GRID_LINKS:
                cases.append((cost_model.mixed_ps_query(n, c, s, size, link,
                                                        largest_share=f_c or None,
                                                        separate_share=f_s),
                              mixed_ps_time(n, c, s, size, link, largest_share=f_c or None,
                                            separate_share=f_s),
                              f"N={n} c={c} s={s} {partition} S={size} {link}"))
        self.check(cases)

    def test_refusals_are_value_errors(self):
        with self.assertRaises(ValueError):
            cost_model.mixed_ps_time(4, 5, 0, 1 << 20, LINK)
        with self.assertRaises(ValueError):
            cost_model.placement_shares(4, 2, 2, "lopsided")
        with self.assertRaises(ValueError):
            cost_model.ring_time(0, 1 << 20, LINK)
        # The process refused and ended; the next query starts another.
        self.assertEqual(cost_model.ring_time(1, 1 << 20, LINK), 0.0)

    def test_the_functions_ask_what_the_batches_ask(self):
        link = cost_model.Link(1e-4, 1.25e8)
        for n, size in itertools.product(GRID_N, GRID_BYTES):
            self.assertEqual(cost_model.tree_time(n, size, link, 4096),
                             cost_model.ask_many([cost_model.tree_query(n, size, link, 4096)])
                             [0]["seconds"])
            self.assertClose(cost_model.mixed_ps_time(n, n, 1, size, link),
                             mixed_ps_time(n, n, 1, size, link), f"N={n} S={size}")


class FamilyFormulas(unittest.TestCase):
    def test_ring_point(self):
        # Latency-bound: 14 hops and one 8 KiB segment.
        self.assertAlmostEqual(cost_model.ring_time(8, 65536, LINK),
                               14e-3 + 8192 / 1.25e8, places=12)
        # Bandwidth-bound: 14 segments of 8 MiB and one latency.
        big = 64 << 20
        self.assertAlmostEqual(cost_model.ring_time(8, big, LINK),
                               14 * big / 8 / 1.25e8 + 1e-3, places=12)

    def test_halving_doubling_points(self):
        self.assertAlmostEqual(cost_model.halving_doubling_time(8, 65536, LINK),
                               6e-3 + 1.75 * 65536 / 1.25e8, places=12)
        self.assertAlmostEqual(cost_model.halving_doubling_time(6, 65536, LINK),
                               4e-3 + 1.5 * 65536 / 1.25e8 + 2e-3 + 2 * 65536 / 1.25e8,
                               places=12)

    def test_halving_doubling_waits_for_clears_to_send(self):
        # 5 ms, 1 Gbit/s, N = 8, 4 MiB: steps of 2, 1 and 0.5 MiB, all above
        # the 256 KiB prefix, each waiting 5 ms − 256 KiB/B in both phases
        # but the first all-gather step (the same partner as the step before).
        slow = cost_model.Link(5e-3, 1.25e8)
        size = 4 << 20
        wait = 5e-3 - (256 << 10) / 1.25e8
        self.assertAlmostEqual(
            cost_model.halving_doubling_time(8, size, slow, 256 << 10),
            cost_model.halving_doubling_time(8, size, slow) + 5 * wait, places=12)
        # Only the steps above the prefix: 1 MiB has one (512 KiB).
        self.assertAlmostEqual(
            cost_model.halving_doubling_time(8, 1 << 20, slow, 256 << 10),
            cost_model.halving_doubling_time(8, 1 << 20, slow) + 2 * wait, places=12)
        self.assertAlmostEqual(
            cost_model.halving_doubling_time(2, 1 << 20, slow, 256 << 10),
            cost_model.halving_doubling_time(2, 1 << 20, slow) + wait, places=12)
        # Where the prefix covers the header's flight (1 ms), nothing.
        self.assertEqual(cost_model.halving_doubling_time(8, size, LINK, 256 << 10),
                         cost_model.halving_doubling_time(8, size, LINK))

    def test_tree_point_and_shape(self):
        # N = 8: depth 3; every rank with 4 edges is a leaf of depth 3 in one
        # tree: 4 halves, then 3 hops up and 3 down.
        self.assertAlmostEqual(cost_model.tree_time(8, 65536, LINK),
                               4 * 32768 / 1.25e8 + 6e-3, places=12)
        self.assertAlmostEqual(cost_model.tree_time(8, 16 << 20, LINK),
                               4 * (8 << 20) / 1.25e8 + 6e-3, places=12)
        # N = 4 (midpoint trees): the pairs allreduce/algorithms/cost_model_test.cc names.
        self.assertEqual(cost_model.tree_rank_costs(4), [(2, 4), (3, 2), (3, 3), (4, 2)])
        self.assertAlmostEqual(cost_model.tree_time(4, 1 << 20, LINK),
                               4 * (1 << 19) / 1.25e8 + 2e-3, places=12)
        self.assertAlmostEqual(cost_model.tree_time(4, 65536, LINK),
                               2 * 32768 / 1.25e8 + 4e-3, places=12)
        self.assertAlmostEqual(cost_model.tree_time(2, 1 << 20, LINK),
                               2 * (1 << 19) / 1.25e8 + 1e-3, places=12)
        slow, eager = cost_model.Link(5e-3, 1.25e8), 256 << 10
        self.assertAlmostEqual(cost_model.tree_time(2, 1 << 20, slow, eager),
                               2 * (1 << 19) / 1.25e8 + 5e-3 + (5e-3 - eager / 1.25e8),
                               places=12)
        self.assertEqual(cost_model.tree_time(8, 16 << 20, LINK, eager),
                         cost_model.tree_time(8, 16 << 20, LINK))
        for n in range(2, 18):
            trees = [cost_model.double_binary_tree(n, t) for t in (0, 1)]
            for tree in trees:
                self.assertEqual(sorted(tree), list(range(n)))
                self.assertEqual(sum(1 for p, _ in tree.values() if p < 0), 1)
                for rank, (_, children) in tree.items():
                    for child in children:
                        self.assertEqual(tree[child][0], rank)
            # The same trees as the C++ (allreduce_family_test): at most 4
            # edges a rank over both trees, depth floor(log2 n).
            edges = cost_model.tree_edges(trees, n)
            self.assertLessEqual(max(edges), 4, n)
            for tree in trees:
                deepest = 0
                for rank in range(n):
                    depth = 0
                    while tree[rank][0] >= 0:
                        rank, depth = tree[rank][0], depth + 1
                    deepest = max(deepest, depth)
                self.assertEqual(deepest, n.bit_length() - 1, n)
        # N = 4: the midpoint trees (one rank with 4 edges, the bit trees two);
        # N = 8: the bit trees (the midpoint's busiest rank has 5).
        self.assertEqual(sorted(cost_model.tree_edges(
            [cost_model.double_binary_tree(4, t) for t in (0, 1)], 4)), [2, 3, 3, 4])
        self.assertEqual(cost_model.double_binary_tree(8, 0)[7], (-1, [3]))

    def test_hierarchical_shared_link_point(self):
        self.assertAlmostEqual(cost_model.hierarchical_time(8, 2, 65536, LINK),
                               2 * (1e-3 + 0.5 * 65536 / 1.25e8) + 4e-3
                               + 1.5 * 32768 / (1.25e8 / 2), places=12)

    def test_hierarchical_with_one_rank_per_node_is_halving_doubling(self):
        self.assertAlmostEqual(cost_model.hierarchical_time(8, 1, 65536, LINK),
                               cost_model.halving_doubling_time(8, 65536, LINK), places=12)

    def test_crossover(self):
        # Latency-bound: both beat the ring by 2x, halving-doubling by a
        # little more (it moves 1.75·S, the tree's busiest rank 2·S before
        # its last byte's 6 hops); bandwidth-bound: the ring wins.
        small, big = 65536, 64 << 20
        ring = cost_model.ring_time(8, small, LINK)
        self.assertLess(2 * cost_model.halving_doubling_time(8, small, LINK), ring)
        self.assertLess(cost_model.tree_time(8, small, LINK), ring)
        self.assertLessEqual(cost_model.ring_time(8, big, LINK),
                             cost_model.tree_time(8, big, LINK))
        # At 64 MiB halving-doubling has the ring's bandwidth term (a power
        # of two) and 6 latencies to the ring's one: the ring; at 64 KiB
        # halving-doubling, at N = 6 (a fold) the tree (as
        # allreduce_family_test.cc's selector with one link for all three).
        self.assertGreater(cost_model.halving_doubling_time(8, big, LINK),
                           cost_model.ring_time(8, big, LINK))
        self.assertEqual(cost_model.allreduce_pick(8, big, LINK)[0], "ring")
        self.assertEqual(cost_model.allreduce_pick(8, small, LINK, 0)[0],
                         "halving_doubling")
        self.assertEqual(cost_model.allreduce_pick(6, 4096, LINK)[0], "tree")
        self.assertEqual(cost_model.allreduce_pick(8, 1 << 20, LINK)[0], "ring")

    def test_scaling_accepts_the_family(self):
        for strategy in ("halving_doubling", "tree", "allreduce"):
            points = scaling.strategy_points({}, strategy, 4, "1")
            self.assertEqual([p["strategy"] for p in points], [strategy])
        self.assertEqual(scaling.strategy_points({}, "hierarchical", 4, "1")[0]["ranks_per_node"], 2)
        self.assertEqual(scaling.strategy_points({}, "tree", 1, "1"), [])


class StepUnderASchedule(unittest.TestCase):
    """(14), the "step" query, as predict() and `gradsync compare` ask it."""

    # Two ranks without latency at half a byte-unit per second: the ring
    # moves a bucket of one unit in 2 s (core/sync/schedule_cost_model_test.cc's
    # comparable case, through the binary and Python's argument order).
    SLOW = cost_model.Link(0.0, 0.5)

    def test_three_buckets_by_hand(self):
        steps = cost_model.scheduled_step(cost_model.ring_query(2, 0, self.SLOW), [1, 1, 1],
                                          backward_s=3.0, forward_s=[1, 1, 1])
        self.assertEqual(steps["fifo"]["bucket_done_s"], [7, 5, 3])
        self.assertAlmostEqual(steps["fifo"]["exposed_s"], 4)
        self.assertEqual(steps["priority"]["bucket_done_s"], [5, 7, 3])
        self.assertAlmostEqual(steps["priority"]["exposed_s"], 3)
        self.assertAlmostEqual(steps["priority"]["step_s"], 9)
        halves = cost_model.scheduled_step(cost_model.ring_query(2, 0, self.SLOW), [1, 1, 1],
                                           3.0, 3.0, schedule="priority", partition_bytes=0.5)
        self.assertEqual(list(halves), ["priority"])
        # The same backward given as the moments the buckets became ready.
        query = cost_model.step_query(cost_model.ring_query(2, 0, self.SLOW), [1, 1, 1],
                                      backward_s=None, forward_s=[1, 1, 1])
        del query["backward_s"]
        traced = cost_model.ask(dict(query, ready_s=[3, 2, 1]))
        self.assertEqual(traced, steps)
        with self.assertRaisesRegex(ValueError, "bucket 1 is ready at 2 s.*no earlier than bucket 2's"):
            cost_model.ask(dict(query, ready_s=[1, 2, 3]))
        self.assertAlmostEqual(halves["priority"]["exposed_s"], 2)
        self.assertEqual(halves["priority"]["transfers"], 6)

    def test_fifo_without_forward_is_the_old_bucket_queue(self):
        # With no forward and no overlap the timeline is exposed_communication's
        # queue, the PS's tail added at its end.
        cases = []
        for link, sizes in itertools.product(GRID_LINKS[::3], ([1 << 20], [4e6, 1e6, 2.5e7],
                                                               [65536] * 5)):
            compute = 0.05
            for query, time in (
                    (cost_model.ring_query(4, 0, link),
                     lambda size, link=link: cost_model.ring_time(4, size, link)),
                    (cost_model.ps_query(4, 0, link, 0.25, last_key=65536),
                     lambda size, link=link: cost_model.ps_time(4, size, link, 0.25, 0))):
                forward_order = list(reversed(sizes))
                step = cost_model.scheduled_step(query, forward_order, compute, 0.0, "fifo",
                                                 overlap_next_forward=False)["fifo"]
                _, exposed = cost_model.exposed_communication(sizes, compute, time)
                if query["formula"] == "ps":
                    exposed += (cost_model.ps_time(4, sum(sizes), link, 0.25, 65536)
                                - cost_model.ps_time(4, sum(sizes), link, 0.25, 0))
                cases.append((step["exposed_s"], exposed, f"{query['formula']} {sizes} {link}"))
        for got, want, where in cases:
            self.assertTrue(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12),
                            f"{where}: {got} vs {want}")

    def test_predict_reports_the_schedule_that_ran(self):
        link = cost_model.Link(1e-4, 1.25e7)  # 100 Mbit/s
        sizes = [2e6, 1e6, 1e6]  # hand-off order: the last layers' bucket first
        real = {"strategy": "ring", "workers": 4, "servers": 0, "compute_ms": 0}
        fifo = cost_model.predict(real, link, sizes, 300, 320)
        self.assertEqual(fifo["predicted_schedule"], "fifo")
        self.assertAlmostEqual(fifo["predicted_step_ms"], fifo["predicted_fifo_step_ms"])
        asked = cost_model.predict(dict(real, sweep="--schedule=priority"), link, sizes, 300, 320)
        self.assertEqual(asked["predicted_schedule"], "priority")
        self.assertAlmostEqual(asked["predicted_step_ms"], asked["predicted_priority_step_ms"])
        # The job's own record wins over the flag asked (a strategy that ran fifo).
        ran = cost_model.predict(dict(real, sweep="--schedule=priority", schedule="fifo"),
                                 link, sizes, 300, 320)
        self.assertEqual(ran["predicted_schedule"], "fifo")
        # A real model's forward overlaps the queue's end: priority hides more.
        self.assertLess(fifo["predicted_priority_exposed_ms"],
                        fifo["predicted_fifo_exposed_ms"])
        # A sleeping synthetic model has no forward to overlap: nothing to gain.
        synthetic = cost_model.predict(dict(real, compute_ms=300), link, sizes, 300, 320)
        self.assertGreaterEqual(synthetic["predicted_priority_exposed_ms"],
                                synthetic["predicted_fifo_exposed_ms"] - 1e-9)
        # Without the overlap the order cannot matter.
        waits = cost_model.predict(dict(real, sweep="--overlap_next_forward=false"), link,
                                   sizes, 300, 320)
        self.assertAlmostEqual(waits["predicted_priority_exposed_ms"],
                               waits["predicted_fifo_exposed_ms"])

    def test_where_priority_gains_over_link_rates(self):
        # ResNet-18's gradient in 4 buckets, 300 ms of compute (100 ms forward),
        # no latency so partitions cost nothing of their own.
        fast, comparable, slow = 1.25e11, 1.25e8, 1.25e6
        rows = cost_model.schedule_rows(4, 44.7e6, 4, 0.3, [fast, comparable, slow],
                                        alpha_s=0.0)
        for name in ("ring", "ps"):
            (fifo_fast, priority_fast, _, _), (fifo_mid, priority_mid, _, _), \
                (fifo_slow, priority_slow, _, _) = (r[name] for r in rows)
            # Compute-bound: no queue forms, nothing to reorder.
            self.assertAlmostEqual(priority_fast, fifo_fast, places=9)
            # Comparable: the first layers' bytes overtake, the forward overlaps.
            self.assertLess(priority_mid, 0.95 * fifo_mid, name)
            # Bandwidth-bound: at most the forward of the layers it delivers early.
            self.assertLess(priority_slow, fifo_slow, name)
            self.assertLessEqual(fifo_slow - priority_slow, 0.1 + 1e-9, name)
            self.assertLess((fifo_slow - priority_slow) / fifo_slow, 0.05, name)

    def test_bad_step_queries_are_value_errors(self):
        query = cost_model.ring_query(2, 0, self.SLOW)
        with self.assertRaisesRegex(ValueError, "need fifo, priority or both"):
            cost_model.scheduled_step(query, [1], 1.0, 0.0, schedule="lifo")
        with self.assertRaisesRegex(ValueError, "one per bucket"):
            cost_model.scheduled_step(query, [1, 2], [1.0], 0.0)
        with self.assertRaisesRegex(ValueError, "a step is timed with one of"):
            cost_model.scheduled_step(dict(query, formula="allgather"), [1], 1.0, 0.0)


class CompressionFormulas(unittest.TestCase):
    """(9)–(13) at hand-computed points: 10 MB buckets, N = 8."""
    S = 10_000_000  # bytes: 2.5 M floats
    N = 8

    def test_ring_family_bytes_per_link(self):
        bytes_of = cost_model.compressed_link_bytes
        self.assertAlmostEqual(bytes_of("ring", "none", self.N, self.S), 1.75 * self.S)
        self.assertAlmostEqual(bytes_of("ring", "fp16", self.N, self.S), 1.75 * self.S / 2)
        # top-k 1 %: k = 25 000 pairs of 8 bytes (+21) from each of N−1 ranks.
        self.assertEqual(bytes_of("ring", "topk:0.01", self.N, self.S), 7 * (21 + 8 * 25_000))
        # randomk: a dense ring of k floats.
        self.assertAlmostEqual(bytes_of("ring", "randomk:0.01", self.N, self.S),
                               1.75 * 4 * 25_000)
        # onebit: S/32 (+17) per rank.
        self.assertEqual(bytes_of("ring", "onebit", self.N, self.S),
                         7 * (17 + 8 * 39_063))

    def test_all_gather_grows_with_n_and_the_ring_does_not(self):
        gathered = [cost_model.compressed_link_bytes("ring", "topk:0.01", n, self.S)
                    for n in (2, 4, 8)]
        self.assertEqual([g / gathered[0] for g in gathered], [1, 3, 7])
        dense = [cost_model.compressed_link_bytes("ring", "none", n, self.S) for n in (2, 4, 8)]
        self.assertLess(dense[2] / dense[0], 2)

    def test_ps_push_and_pull(self):
        pairs = cost_model.ps_compressed_bytes
        k = 25_000
        self.assertEqual(pairs("topk", 0.01, self.N, self.S, "union"), (8 * k, 8 * self.N * k))
        self.assertEqual(pairs("topk", 0.01, self.N, self.S, "topk"), (8 * k, 8 * k))
        self.assertEqual(pairs("topk", 0.01, self.N, self.S, "dense"), (8 * k, self.S))
        self.assertEqual(pairs("randomk", 0.01, self.N, self.S, "union"), (8 * k, 8 * k))
        # A union past half the bucket is pulled dense (4 bytes a float).
        self.assertEqual(pairs("topk", 0.2, self.N, self.S, "union"), (8 * 500_000, self.S))
        self.assertEqual(pairs("fp16", 1.0, self.N, self.S), (self.S / 2, self.S / 2))
        # K = N balanced: the busiest link is a worker's pull of N·k pairs.
        self.assertEqual(cost_model.compressed_link_bytes("ps", "topk:0.01", self.N, self.S,
                                                          1 / self.N), 8 * self.N * k)

    def test_time_is_alpha_beta_plus_the_codec(self):
        link = cost_model.Link(1e-4, 1.25e7)  # 100 us, 100 Mbit/s
        encode, decode = cost_model.CODEC_MS_PER_MB["topk"]
        want = (7 * 1e-4 + 7 * (21 + 8 * 25_000 + 24) / 1.25e7
                + (encode + 8 * decode) * 10 / 1000)
        self.assertAlmostEqual(cost_model.compressed_sync_time(
            "ring", self.N, 0, self.S, link, "topk:0.01"), want, places=12)
        self.assertEqual(cost_model.compressed_sync_time("ring", self.N, 0, self.S, link, "none"),
                         cost_model.ring_time(self.N, self.S, link))

    def test_bad_compression_is_refused(self):
        for bad in ("topk:0", "topk:2", "topk", "fp16:0.5", "zip"):
            with self.assertRaises(ValueError):
                cost_model.parse_compression(bad)


if __name__ == "__main__":
    unittest.main()
