"""Host staging of DDP's buckets for gradsync's hook: GPU buckets through
pinned host memory, bfloat16 and float16 buckets through float32.

gradsync's strategies behind the hook sum float32 values in host memory (the
library takes an address and a length; NCCL is not linked into it). So:

- a bucket of a model on a GPU is copied into a pinned float32 host buffer
  before the strategy gets it, and the average is copied back into DDP's
  bucket before its future completes;
- a bfloat16 or float16 bucket (on the CPU or a GPU) is converted to float32
  on the way out and back on the way in: the sum over the workers is formed
  in float32, and the average is rounded to the bucket's type once, where an
  all-reduce in the bucket's own type would round at every partial sum.

The ordering on a GPU, on a side stream of its own per device (the staging
stream), so that neither copy holds up the stream backward runs on:

  backward's stream   ..kernels that wrote the bucket..|          |wait|..
  staging stream                     wait_stream ------>|D2H|      |H2D|
  host (the hook)                            event.synchronize ^ strategy ^

1. out: the staging stream waits for the stream the hook is called on (the
   current stream of the bucket's device, where DDP's reducer and backward
   wrote the bucket), copies the bucket into the pinned buffer there
   (non_blocking), and the host waits on an event recorded after that copy
   only, not on the whole device, before the strategy reads the buffer;
2. back: the average is copied into DDP's bucket on the staging stream
   (non_blocking, from pinned memory), and the current stream is made to
   wait for the staging stream before the hook completes the bucket's
   future. A future created with the bucket's device (torch.futures.Future(
   devices=[...])) records the current stream when its result is set, and
   whoever waits on it (DDP's reducer) waits for that: so DDP reads the
   bucket after the copy back;
3. the bucket is marked as used on the staging stream (record_stream), as
   torch's caching allocator requires of memory used on another stream; the
   pinned buffer itself is reused only after the next step's out-copy, which
   the same staging stream orders after this step's copy back, and torch's
   pinned-memory allocator keeps a dropped buffer until its copies are done.

One host buffer per DDP bucket index, kept across steps (DDP's buckets keep
their sizes after its first iteration; a size that changes gets a new one).

The GPU path ran on one H200 with torch 2.11 and float32 buckets
(python/tests/cuda_hook_check.py, which gpu_check.sh --quick runs: ring and
PS behind the hook equal to DDP on Gloo); bfloat16/float16 buckets have not
run on a GPU. It is written to torch's documented stream semantics and its
bookkeeping is tested here with CPU tensors (python/tests/host_staging_test.py).
"""

import torch

# What the hook takes; all summed in float32.
STAGED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def needs_staging(buffer):
    """Whether the hook must copy `buffer` to a float32 host buffer first:
    device memory, or a type other than float32."""
    return buffer.device.type != "cpu" or buffer.dtype != torch.float32


class HostStaging:
    """Float32 host buffers, one per DDP bucket index (pinned where CUDA
    is), and a staging stream per CUDA device."""

    def __init__(self, pin_memory=None):
        # Pinned memory needs a CUDA runtime; without one (CPU tests) plain
        # host memory behaves the same, only the copies are not DMA.
        self._pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._buffers = {}
        self._streams = {}

    def _stream(self, device):
        stream = self._streams.get(device)
        if stream is None:
            stream = torch.cuda.Stream(device=device)
            self._streams[device] = stream
        return stream

    def _buffer(self, index, numel, pin):
        host = self._buffers.get(index)
        if host is None or host.numel() != numel:
            host = torch.empty(numel, dtype=torch.float32, pin_memory=pin)
            self._buffers[index] = host
        return host

    def to_host(self, index, buffer):
        """A float32 host copy of DDP bucket `index`'s `buffer`, complete
        when this returns."""
        flat = buffer.reshape(-1)
        if buffer.device.type != "cuda":
            host = self._buffer(index, flat.numel(), self._pin)
            host.copy_(flat)
            return host
        host = self._buffer(index, flat.numel(), True)
        stream = self._stream(buffer.device)
        stream.wait_stream(torch.cuda.current_stream(buffer.device))
        with torch.cuda.stream(stream):
            host.copy_(flat, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(stream)
        buffer.record_stream(stream)
        copied.synchronize()
        return host

    def back(self, buffer, host):
        """The averaged `host` copy into DDP's `buffer`, ordered before any
        later work on the current stream of `buffer`'s device."""
        flat = buffer.view(-1)
        if buffer.device.type != "cuda":
            flat.copy_(host)
            return
        stream = self._stream(buffer.device)
        current = torch.cuda.current_stream(buffer.device)
        # The copy writes DDP's bucket: after whatever the current stream
        # still does with it.
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            flat.copy_(host, non_blocking=True)
        current.wait_stream(stream)
