"""Host staging of DDP's GPU buckets for gradsync's hook.

gradsync's strategies behind the hook work on host memory (the extension
takes an address and a length; NCCL is not linked into it). A bucket of a
model on a GPU is therefore copied into a pinned host buffer before the
strategy gets it, and the average is copied back into DDP's bucket before
its future completes. Both copies are blocking: a device-to-host copy_ waits
for the kernels of the current stream that wrote the bucket (backward, DDP's
own copy into the bucket) and for itself; a host-to-device copy_ from pinned
memory returns once the data is on the device, so the host buffer may be
reused by the next step. One host buffer per DDP bucket index, kept across
steps (DDP's buckets keep their sizes after its first iteration; a size that
changes gets a new buffer).

This has never run on a GPU: Debian's torch is CPU-only. It is right by
construction and its logic is tested with CPU tensors
(python/tests/host_staging_test.py); run python/'s tests on a GPU build of
torch before relying on it.
"""

import torch


def needs_staging(buffer):
    """Whether the hook must copy `buffer` to host memory first."""
    return buffer.device.type != "cpu"


class HostStaging:
    """Pinned host buffers, one per DDP bucket index."""

    def __init__(self, pin_memory=None):
        # Pinned memory needs a CUDA runtime; without one (CPU tests) plain
        # host memory behaves the same, only the copies are not DMA.
        self._pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._buffers = {}

    def to_host(self, index, buffer):
        """A host copy of DDP bucket `index`'s `buffer` (flat, same dtype)."""
        host = self._buffers.get(index)
        if (host is None or host.numel() != buffer.numel() or
                host.dtype != buffer.dtype):
            host = torch.empty(buffer.numel(), dtype=buffer.dtype,
                               pin_memory=self._pin)
            self._buffers[index] = host
        host.copy_(buffer.reshape(-1), non_blocking=False)
        return host

    def back(self, buffer, host):
        """The averaged `host` copy into DDP's `buffer`."""
        buffer.view(-1).copy_(host, non_blocking=False)
