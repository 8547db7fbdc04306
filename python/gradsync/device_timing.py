"""The GPU's forward + backward of a hooked DDP step, from CUDA events.

On a GPU the host queues forward and backward long before the GPU runs them,
so the host's clock cannot tell compute from communication (docs/metrics.md,
"How times are measured on each device"). Native workers put events on the
compute stream (core/device/device_clock.h); the hook does the same with
torch's events:

  forward starts   the model's forward pre-hook records `start` on the
                   current stream of the parameters' device (the first
                   forward since the last step ended: gradient accumulation
                   under no_sync() runs several);
  backward ends    the hook records `end` on the bucket's current stream as
                   DDP hands over its last bucket.

Neither is waited for on its own. host_staging.to_host() waits for the copy
of the last bucket, which its staging stream orders after everything the
current stream had queued, `end` included; so when it returns, `end` has
been reached and reading it stalls nothing. `start` is then reached too
where forward and backward share a stream (the usual case); where it has not
been (a program that runs forward on another stream), the step keeps the
host's rule and nothing waits.

compute_ms is then the GPU's time from forward's start to backward's end.
Exposed communication stays the host's time in the strategy's Finish: it
starts after to_host's wait, when the GPU has finished backward, so it is
the GPU's idle time waiting for the average (rule 3 of
core/train/step_timing.h, with the device's end of backward reached first).
"""


class StepClock:
    """CUDA events around one DDP step's compute; a no-op off CUDA.

    `event` makes a timing event (torch.cuda.Event(enable_timing=True) by
    default); tests give a stand-in with record(stream), query() and
    elapsed_time(other).
    """

    def __init__(self, event=None, current_stream=None):
        self._event = event
        self._current_stream = current_stream
        self._start = None
        self._end = None

    def _make(self):
        if self._event is not None:
            return self._event()
        import torch
        return torch.cuda.Event(enable_timing=True)

    def _stream(self, device):
        if self._current_stream is not None:
            return self._current_stream(device)
        import torch
        return torch.cuda.current_stream(device)

    def forward_started(self, device):
        """Before a forward of the model on `device`; only the step's first
        one counts."""
        if device.type != "cuda" or self._start is not None:
            return
        self._start = self._make()
        self._start.record(self._stream(device))

    def backward_ended(self, device):
        """As DDP hands over the step's last bucket, before it is staged."""
        if device.type != "cuda" or self._start is None:
            return
        self._end = self._make()
        self._end.record(self._stream(device))

    def compute_ms(self):
        """The step's GPU time from forward's start to backward's end, or
        None (off CUDA, no forward seen, or `start` not reached yet); the
        next step starts afresh either way."""
        start, end = self._start, self._end
        self._start = self._end = None
        if start is None or end is None:
            return None
        if not (start.query() and end.query()):
            return None
        return float(start.elapsed_time(end))
