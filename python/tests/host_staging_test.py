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


class HalfPrecisionTest(unittest.TestCase):
    """bfloat16 and float16 buckets go through a float32 host copy: the sum
    over the workers is formed in float32, the average rounded once."""

    def test_half_buckets_are_staged_in_float32_and_back(self):
        for dtype in (torch.bfloat16, torch.float16):
            staging = host_staging.HostStaging(pin_memory=False)
            bucket = torch.tensor([1.5, -2.25, 3.0, 0.125], dtype=dtype)
            self.assertTrue(host_staging.needs_staging(bucket))
            host = staging.to_host(0, bucket)
            self.assertEqual(host.dtype, torch.float32)
            self.assertTrue(torch.equal(host, bucket.float()))
            host.mul_(0.5)
            staging.back(bucket, host)
            self.assertEqual(bucket.dtype, dtype)
            self.assertTrue(torch.equal(bucket.float(),
                                        torch.tensor([0.75, -1.125, 1.5, 0.0625])))


class FakeBucket:
    """What DDP's hook receives (torch.distributed.GradBucket's documented
    methods), for the hook alone in one process."""

    def __init__(self, index, buffer, params, is_last):
        self._index, self._buffer = index, buffer
        self._params, self._is_last = params, is_last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def is_last(self):
        return self._is_last


class HookDtypeTest(unittest.TestCase):

    def test_a_bfloat16_bucket_comes_back_in_bfloat16(self):
        import gradsync.torch
        state = gradsync.torch.connect(sync="local", timeout_s=30)
        try:
            param = torch.zeros(6, dtype=torch.bfloat16)
            for step in range(2):
                values = torch.arange(6, dtype=torch.float32) + step
                bucket = FakeBucket(0, values.to(torch.bfloat16), [param], True)
                future = gradsync.torch.comm_hook(state, bucket)
                self.assertTrue(future.done())
                averaged = future.wait()
                self.assertIs(averaged, bucket.buffer())
                self.assertEqual(averaged.dtype, torch.bfloat16)
                # One worker: the average is the bucket itself.
                self.assertTrue(torch.equal(averaged.float(), values))
        finally:
            state.close()

    def test_float64_is_refused_saying_what_to_do(self):
        import gradsync.torch
        bucket = FakeBucket(3, torch.zeros(4, dtype=torch.float64), [], True)
        with self.assertRaises(TypeError) as raised:
            gradsync.torch.comm_hook(None, bucket)
        message = str(raised.exception)
        self.assertIn("DDP bucket 3 is torch.float64", message)
        self.assertIn("float32, bfloat16 or float16", message)
        self.assertIn("model.float()", message)


if __name__ == "__main__":
    unittest.main()
