"""bench/cpu_bound.py: the machine's share decides where it was measured,
the job's own share otherwise, and the bound is strict."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_bound  # noqa: E402


class CpuBoundTest(unittest.TestCase):
    def test_the_machine_share_decides_where_it_was_measured(self):
        self.assertTrue(cpu_bound.is_cpu_bound(machine_busy_unniced=0.71, job_cpu_share=0.1))
        self.assertFalse(cpu_bound.is_cpu_bound(machine_busy_unniced=0.5, job_cpu_share=0.9))

    def test_the_job_share_decides_otherwise(self):
        self.assertTrue(cpu_bound.is_cpu_bound(job_cpu_share=0.75))
        self.assertFalse(cpu_bound.is_cpu_bound(job_cpu_share=0.58))

    def test_the_bound_is_strict_and_nothing_measured_is_not_bound(self):
        self.assertFalse(cpu_bound.is_cpu_bound(machine_busy_unniced=cpu_bound.CPU_BOUND_SHARE))
        self.assertFalse(cpu_bound.is_cpu_bound())
        self.assertTrue(cpu_bound.is_cpu_bound(job_cpu_share=0.58, share=0.5))

    def test_describe_names_the_share(self):
        self.assertIn("70%", cpu_bound.describe())


if __name__ == "__main__":
    unittest.main()
