"""The hook's host staging of GPU buckets (gradsync/host_staging.py), with
CPU tensors: Debian's torch has no CUDA, so this checks the bookkeeping and
the copies' direction, not a device."""

import unittest

import torch

from gradsync import host_staging


class HostStagingTest(unittest.TestCase):

    def test_a_bucket_is_copied_out_and_its_average_back(self):
        staging = host_staging.HostStaging(pin_memory=False)
        bucket = torch.arange(6, dtype=torch.float32)
        host = staging.to_host(0, bucket)
        self.assertNotEqual(host.data_ptr(), bucket.data_ptr())
        self.assertTrue(torch.equal(host, bucket))
        host.mul_(0.5)  # what the strategy does to the host copy
        self.assertEqual(bucket[5].item(), 5.0)  # DDP's bucket untouched...
        staging.back(bucket, host)
        self.assertTrue(torch.equal(bucket, torch.arange(6) * 0.5))  # ...until back

    def test_one_buffer_per_bucket_kept_while_its_size_is(self):
        staging = host_staging.HostStaging(pin_memory=False)
        first = staging.to_host(0, torch.ones(4)).data_ptr()
        other = staging.to_host(1, torch.ones(4)).data_ptr()
        self.assertNotEqual(first, other)
        self.assertEqual(staging.to_host(0, torch.full((4,), 2.0)).data_ptr(), first)
        # DDP's first iteration has one bucket; its rebuilt bucket 0 differs.
        regrown = staging.to_host(0, torch.full((9,), 3.0))
        self.assertEqual(regrown.numel(), 9)
        self.assertTrue(torch.equal(regrown, torch.full((9,), 3.0)))

    def test_only_device_memory_is_staged(self):
        self.assertFalse(host_staging.needs_staging(torch.ones(2)))
        self.assertTrue(host_staging.needs_staging(torch.ones(2, device="meta")))

    def test_host_memory_is_pinned_only_with_cuda(self):
        staging = host_staging.HostStaging()
        host = staging.to_host(0, torch.ones(3))
        self.assertEqual(host.is_pinned(), torch.cuda.is_available())


if __name__ == "__main__":
    unittest.main()
