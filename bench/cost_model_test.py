#!/usr/bin/python3
"""The all-reduce family's α–β formulas in cost_model.py at the points that
allreduce/cost_model_test.cc checks the C++ copy at, so the two agree."""
import unittest

import cost_model
import scaling

LINK = cost_model.Link(1e-3, 1.25e8)  # 1 ms, 1 Gbit/s


class FamilyFormulas(unittest.TestCase):
    def test_ring_point(self):
        self.assertAlmostEqual(cost_model.ring_time(8, 65536, LINK),
                               14e-3 + 1.75 * 65536 / 1.25e8, places=12)

    def test_halving_doubling_points(self):
        self.assertAlmostEqual(cost_model.halving_doubling_time(8, 65536, LINK),
                               6e-3 + 1.75 * 65536 / 1.25e8, places=12)
        self.assertAlmostEqual(cost_model.halving_doubling_time(6, 65536, LINK),
                               4e-3 + 1.5 * 65536 / 1.25e8 + 2e-3 + 2 * 65536 / 1.25e8,
                               places=12)

    def test_tree_point_and_shape(self):
        # N = 8: depth 3, the busiest rank has 5 edges over both trees.
        self.assertAlmostEqual(cost_model.tree_time(8, 65536, LINK),
                               6e-3 + 5 * 32768 / 1.25e8, places=12)
        for n in range(2, 18):
            for shift in (0, 1):
                tree = cost_model.double_binary_tree(n, shift)
                self.assertEqual(sorted(tree), list(range(n)))
                self.assertEqual(sum(1 for p, _ in tree.values() if p < 0), 1)
                for rank, (_, children) in tree.items():
                    for child in children:
                        self.assertEqual(tree[child][0], rank)

    def test_hierarchical_shared_link_point(self):
        self.assertAlmostEqual(cost_model.hierarchical_time(8, 2, 65536, LINK),
                               2 * (1e-3 + 0.5 * 65536 / 1.25e8) + 4e-3
                               + 1.5 * 32768 / (1.25e8 / 2), places=12)

    def test_hierarchical_with_one_rank_per_node_is_halving_doubling(self):
        self.assertAlmostEqual(cost_model.hierarchical_time(8, 1, 65536, LINK),
                               cost_model.halving_doubling_time(8, 65536, LINK), places=12)

    def test_crossover(self):
        # Latency-bound: both beat the ring by 2x; bandwidth-bound: the ring wins.
        small, big = 65536, 64 << 20
        ring = cost_model.ring_time(8, small, LINK)
        self.assertLess(2 * cost_model.halving_doubling_time(8, small, LINK), ring)
        self.assertLess(cost_model.tree_time(8, small, LINK), ring)
        self.assertLessEqual(cost_model.ring_time(8, big, LINK),
                             cost_model.tree_time(8, big, LINK))
        # At 64 MiB halving-doubling's prediction is a hair under the ring's
        # (same bandwidth term for a power of two): the selector keeps the
        # ring; at 64 KiB it takes halving-doubling (as selecting_allreduce.cc).
        self.assertLess(cost_model.halving_doubling_time(8, big, LINK),
                        cost_model.ring_time(8, big, LINK))
        self.assertEqual(cost_model.allreduce_pick(8, big, LINK)[0], "ring")
        self.assertEqual(cost_model.allreduce_pick(8, small, LINK)[0], "halving_doubling")

    def test_scaling_accepts_the_family(self):
        for strategy in ("halving_doubling", "tree", "allreduce"):
            points = scaling.strategy_points({}, strategy, 4, "1")
            self.assertEqual([p["strategy"] for p in points], [strategy])
        self.assertEqual(scaling.strategy_points({}, "hierarchical", 4, "1")[0]["ranks_per_node"], 2)
        self.assertEqual(scaling.strategy_points({}, "tree", 1, "1"), [])


if __name__ == "__main__":
    unittest.main()
