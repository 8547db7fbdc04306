#!/usr/bin/python3
"""The all-reduce family's α–β formulas in cost_model.py at the points that
allreduce/algorithms/cost_model_test.cc checks the C++ copy at, so the two agree."""
import unittest

import cost_model
import scaling

LINK = cost_model.Link(1e-3, 1.25e8)  # 1 ms, 1 Gbit/s


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
