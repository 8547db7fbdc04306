"""gradsync.torch: DDP's gradient buckets through gradsync's strategies.

    import gradsync.torch
    state = gradsync.torch.connect()   # --sync from the argument, GRADSYNC_SYNC,
                                       # or --sync=NAME on the command line
    ddp = DistributedDataParallel(model)
    gradsync.torch.register(ddp, state)   # or ddp.register_comm_hook(state,
                                          #        gradsync.torch.comm_hook)

connect() joins the gradsync job as native workers do: rank and world from
torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, LOCAL_RANK, as `gradsync
launch` sets them), the job token and id from gradsync's. torch's own c10d
store, which DDP's process group needs, keeps MASTER_PORT; gradsync's
coordinator listens on GRADSYNC_COORDINATOR_PORT (set by `gradsync launch`),
else MASTER_PORT + 1.

The hook hands each bucket to the strategy as DDP produces it, so the
communication overlaps backward; the call for DDP's last bucket waits (GIL
released) until the step is summed and averaged, and completes every bucket's
future. See python/README.md.
"""

import atexit
import os
import sys

import torch
import torch.distributed as dist

from gradsync import device_timing
from gradsync import extension
from gradsync import host_staging

__all__ = ["connect", "comm_hook", "register", "GradsyncState"]

DEFAULT_SYNC = "ring"
# DistributedDataParallel's default bucket_cap_mb.
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def _first_bucket_bytes():
    # DDP's first bucket cap after its first iteration: the process group
    # module's _DEFAULT_FIRST_BUCKET_BYTES in torch 1.13 and 2.x alike (a
    # program may change it before building DDP, which DDP then reads);
    # 1 MiB, c10d's kDefaultFirstBucketBytes, where a build lacks it.
    return int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024))


def _sync_from_argv(argv):
    for i, arg in enumerate(argv):
        if arg.startswith("--sync="):
            return arg.split("=", 1)[1]
        if arg == "--sync" and i + 1 < len(argv):
            return argv[i + 1]
    return None


class GradsyncState:
    """One worker's membership of the job and its strategy (the hook's state).

    Not shared between models: each DistributedDataParallel gets its own.
    """

    def __init__(self, worker):
        self._worker = worker
        self._pending = []
        self._models = []
        self._closed = False
        self._caps_set = False
        self._ready_order = []
        self._ready_hooks = []
        self._staging = host_staging.HostStaging()
        # The GPU's forward + backward from CUDA events (device_timing.py);
        # needs the forward pre-hook register() adds.
        self._clock = device_timing.StepClock()
        self._forward_hook = None

    @property
    def rank(self):
        return self._worker.rank

    @property
    def world_size(self):
        return self._worker.world_size

    @property
    def sync(self):
        return self._worker.sync

    @property
    def layout(self):
        """The strategy's buckets (DDP's of the first step); '' before it."""
        return self._worker.layout

    def last_step(self):
        """step, step_ms, sync_wait_ms, bytes_sent, bytes_recv of the last step."""
        return self._worker.last_step()

    def record_loss(self, loss):
        """The loss of the step in progress, for its line in
        worker<r>.jsonl (optional: without it the line says 0)."""
        self._worker.set_loss(float(loss))

    def _set_caps(self, bucket_bytes):
        # DDP's buckets after its first iteration: first_bucket_bytes, then
        # bucket_cap_mb (ddp_bucket_sync.h derives the strategy's buckets).
        self._worker.set_bucket_caps(_first_bucket_bytes(), int(bucket_bytes))
        self._caps_set = True

    def _record_ready_order(self, model):
        # The order backward makes gradients final in the first step, as
        # DDP's reducer records it to rebuild its buckets: the strategy's
        # buckets are derived from it (ddp_bucket_sync.h).
        def recorder(key):
            def hook(grad):
                self._ready_order.append(key)
            return hook

        for param in model.parameters():
            if param.requires_grad:
                self._ready_hooks.append(
                    param.register_hook(recorder(param.data_ptr())))

    def _stop_recording(self):
        if self._ready_hooks:
            self._worker.set_ready_order(self._ready_order)
        for handle in self._ready_hooks:
            handle.remove()
        self._ready_hooks = []

    def _fail_pending(self, error):
        pending, self._pending = self._pending, []
        for future, _, _ in pending:
            future.set_exception(error)

    def close(self):
        """Ends this worker's part of the job: the strategy's shutdown, this
        worker's timeline and summary (worker 0 writes summary.json and the
        merged --trace), then a barrier of the workers (worker 0 hosts the
        coordinator). Called at exit if the program does not."""
        if self._closed:
            return
        self._closed = True
        self._worker.close()


_live_states = []
_previous_excepthook = None


def _fail_on_uncaught_exception(kind, value, traceback):
    # A worker dying of an exception leaves the job with it, so the others
    # stop at once ("the job lost worker r: it failed: ...") instead of
    # waiting in close()'s barrier or their next step until the timeout.
    for state in _live_states:
        if not state._closed:
            state._closed = True
            state._worker.fail("%s: %s" % (kind.__name__, value))
    _previous_excepthook(kind, value, traceback)


def _int_from_env(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError("gradsync: %s=%r is not a whole number" % (name, value))


def connect(sync=None, timeout_s=None, flags=None, metrics_dir=None,
            trace=None, trace_steps=None, warmup_steps=None, batch_size=None,
            total_steps=None):
    """Joins the gradsync job; returns the hook's state.

    sync: a strategy name (gradsync.extension.strategies()); default the
      GRADSYNC_SYNC variable, else --sync=NAME in sys.argv, else "ring".
    timeout_s: every wait on a peer gives up after this, naming the peer;
      default GRADSYNC_TIMEOUT_S, else 60.
    flags: the strategy's own flags, ["--allreduce_chunk_kb=256", ...]; default
      GRADSYNC_FLAGS (space-separated).
    metrics_dir: the run folder, as a native worker's --metrics_dir:
      worker<r>.jsonl (one line per step), and from worker 0 layout.json and
      summary.json (every worker's figures and the manifest); default
      GRADSYNC_METRICS_DIR (set by `gradsync launch`), else none.
    trace: a Perfetto timeline of steps 1..trace_steps, as --trace (worker 0
      merges every process's); default GRADSYNC_TRACE (set by `gradsync
      launch --trace=PATH`), else none. trace_steps: default
      GRADSYNC_TRACE_STEPS, else 20.
    warmup_steps: steps left out of the summary's means (step 0, which sets
      the strategy up, always is); default GRADSYNC_WARMUP_STEPS, else 1.
    batch_size: samples per worker per step, for samples_per_s; default
      unknown (0).
    total_steps: the steps the program will run; given, worker 0 prints
      gradsync's progress line (step, loss, samples/s, time left) every 2 s.
    """
    sync = (sync or os.environ.get("GRADSYNC_SYNC") or
            _sync_from_argv(sys.argv[1:]) or DEFAULT_SYNC)
    if sync not in extension.strategies():
        raise ValueError("gradsync: unknown --sync=%s; this build has %s" %
                         (sync, ", ".join(extension.strategies())))
    if timeout_s is None:
        timeout_s = float(os.environ.get("GRADSYNC_TIMEOUT_S", "60"))
    if flags is None:
        flags = os.environ.get("GRADSYNC_FLAGS", "").split()
    if metrics_dir is None:
        metrics_dir = os.environ.get("GRADSYNC_METRICS_DIR", "")
    if trace is None:
        trace = os.environ.get("GRADSYNC_TRACE", "")
    if trace_steps is None:
        trace_steps = _int_from_env("GRADSYNC_TRACE_STEPS", 20)
    if warmup_steps is None:
        warmup_steps = _int_from_env("GRADSYNC_WARMUP_STEPS", 1)
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    worker = extension.TorchWorker(
        sync, float(timeout_s), list(flags), metrics_dir=metrics_dir,
        trace_path=trace, trace_steps=int(trace_steps),
        warmup_steps=int(warmup_steps), batch_size=int(batch_size or 0),
        model="pytorch:" + program, total_steps=int(total_steps or 0))
    state = GradsyncState(worker)
    global _previous_excepthook
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _fail_on_uncaught_exception
    _live_states.append(state)
    atexit.register(state.close)
    return state


def comm_hook(state, bucket):
    """DDP communication hook: the bucket through gradsync's strategy.

    Returns a future that completes with the bucket averaged over the workers.
    """
    buffer = bucket.buffer()
    if (buffer.dtype not in host_staging.STAGED_DTYPES or
            buffer.device.type not in ("cpu", "cuda") or
            not buffer.is_contiguous()):
        raise TypeError(
            "gradsync's hook takes contiguous float32, bfloat16 or float16 "
            "gradients on the CPU or a CUDA device; DDP bucket %d is %s on %s. "
            "Give the model float32, bfloat16 or float16 parameters (e.g. "
            "model.float() before DistributedDataParallel)" %
            (bucket.index(), buffer.dtype, buffer.device))
    if not state._caps_set:
        # Registered without gradsync.torch.register: DDP's default cap.
        state._set_caps(DEFAULT_BUCKET_BYTES)
    if bucket.is_last() and state._ready_hooks:
        state._stop_recording()
    params = [(p.data_ptr(), p.numel()) for p in bucket.parameters()]
    if bucket.is_last():
        state._clock.backward_ended(buffer.device)
    # A GPU bucket goes through pinned host memory, a bfloat16 or float16 one
    # through a float32 copy, summed in float32 (host_staging.py; the GPU
    # path ran on one H200 with float32 buckets).
    host = (state._staging.to_host(bucket.index(), buffer)
            if host_staging.needs_staging(buffer) else buffer)
    # A future holding a CUDA tensor must name its device, so that whoever
    # waits on it is ordered after the copy back on that device's stream.
    future = (torch.futures.Future(devices=[buffer.device])
              if buffer.device.type == "cuda" else torch.futures.Future())
    if bucket.is_last():
        # to_host() has waited for the last bucket's copy, which the GPU
        # ran after backward's end: reading the events waits for nothing.
        compute_ms = state._clock.compute_ms()
        if compute_ms is not None:
            state._worker.set_device_compute_ms(compute_ms)
    state._pending.append((future, buffer, host))
    try:
        ended = state._worker.add_bucket(bucket.index(), host.data_ptr(),
                                         host.numel(), params,
                                         bucket.is_last())
    except RuntimeError as error:
        state._fail_pending(error)
        raise
    if ended:
        pending, state._pending = state._pending, []
        for done, averaged, host in pending:
            if host is not averaged:
                # Before set_result: a CUDA future records the device's
                # current stream then, and back() orders that stream after
                # the copy into DDP's bucket.
                state._staging.back(averaged, host)
            done.set_result(averaged)
    return future


def register(model, state):
    """model.register_comm_hook(state, comm_hook), refusing a state that
    already serves another model."""
    if state._models:
        raise RuntimeError(
            "gradsync: this state is already the hook of another model; call "
            "gradsync.torch.connect() once per DistributedDataParallel model")
    state._models.append(model)
    state._set_caps(model.bucket_bytes_cap)
    state._record_ready_order(model)
    state._forward_hook = model.register_forward_pre_hook(
        _forward_pre_hook(state, model))
    model.register_comm_hook(state, comm_hook)


def _forward_pre_hook(state, model):
    # Where the model's parameters live: a CUDA model's step is timed with
    # CUDA events from here (device_timing.py); a CPU model's with the host's
    # clock, as before.
    device = next((p.device for p in model.parameters()), None)

    def hook(module, inputs):
        # Only a forward that backward will follow: an evaluation's forward
        # under no_grad() between two steps is not the next step's compute.
        if device is not None and torch.is_grad_enabled():
            state._clock.forward_started(device)
    return hook
