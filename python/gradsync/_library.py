"""libgradsync_c.so through ctypes: gradsync's C++ strategies for any CPython.

The library's C API (python/gradsync_c_api.h) takes buffer addresses and
lengths and returns errors as strings, so one build serves every interpreter
(CPython 3.9-3.13) and every torch build: nothing here is compiled against
Python or torch. ctypes releases the GIL for the length of every call, so a
call that waits on the network (joining, a step's end, close) lets the
program's other threads run.

Where the library is looked for, first found wins:
  1. GRADSYNC_LIBRARY: the path of a libgradsync_c.so (a build of one's own);
  2. beside this file: the installed package (tools/install_python.sh, or
     `python -m pip install gradsync-*.whl`);
  3. beside the package's folder: Bazel's runfiles (py_test, py_binary);
  4. a checkout's bazel-bin/python/ with python/ on PYTHONPATH
     (`bazel build //python:libgradsync_c.so`).

The wheel also carries the shared libraries the library needs that a machine
cannot be assumed to have (gRPC, Protobuf, Abseil, OpenBLAS, ...: see
python/make_wheel.py) in gradsync/_libs/, loaded here first in dependency
order; one that the process already has loaded (same soname) is left to that
copy, so two copies of one library never meet. The wheel in tools/bundle.sh's
bundle leaves them out (the bundle's lib/ has them): they are then loaded
from $GRADSYNC_LIBS_DIR.
"""

import ctypes
import json
import os
import sys

__all__ = ["TorchWorker", "strategies", "library_path"]

# gradsync_c_api.h's GRADSYNC_C_API_VERSION, which this file is written for.
API_VERSION = 2

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_NAME = "libgradsync_c.so"
_VENDORED = os.path.join(_HERE, "_libs")


def _candidates():
    given = os.environ.get("GRADSYNC_LIBRARY")
    if given:
        yield given, "GRADSYNC_LIBRARY"
        return
    yield os.path.join(_HERE, _LIBRARY_NAME), "the installed package"
    # Bazel's runfiles of a target that depends on //python:gradsync.
    yield os.path.join(_HERE, "..", _LIBRARY_NAME), "Bazel's runfiles"
    yield (os.path.join(_HERE, "..", "..", "bazel-bin", "python", _LIBRARY_NAME),
           "a checkout's bazel-bin")


def _glibc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    except (AttributeError, ValueError, OSError, IndexError):
        return None


def _version_tuple(text):
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _check_glibc():
    # make_wheel.py writes the newest glibc symbol version anything in the
    # wheel asks for; an older glibc would fail in the loader with a message
    # that names a symbol, not the cause.
    needed_file = os.path.join(_VENDORED, "glibc-needed")
    if not os.path.exists(needed_file):
        return
    with open(needed_file) as f:
        needed = f.read().strip()
    have = _glibc_version()
    if have and needed and _version_tuple(have) < _version_tuple(needed):
        raise ImportError(
            "gradsync: this machine has glibc %s; the installed gradsync wheel "
            "was built against glibc %s and needs that or newer. Build the "
            "wheel on this machine (tools/install_python.sh) instead" %
            (have, needed))


def _preload_vendored():
    order_file = os.path.join(_VENDORED, "load-order")
    if not os.path.exists(order_file):
        return
    with open(order_file) as f:
        sonames = [line.strip() for line in f if line.strip()]
    no_load = getattr(os, "RTLD_NOLOAD", 4)
    for soname in sonames:
        try:
            # Already in the process (torch's, the system's): keep that copy.
            ctypes.CDLL(soname, mode=no_load | os.RTLD_LAZY)
            continue
        except OSError:
            pass
        path = os.path.join(_VENDORED, soname)
        if not os.path.exists(path):
            beside = os.environ.get("GRADSYNC_LIBS_DIR", "")
            path = os.path.join(beside, soname) if beside else ""
            if not path or not os.path.exists(path):
                raise ImportError(
                    "gradsync: %s is not in the installed wheel (a bundle's "
                    "wheel leaves its libraries in the bundle's lib/ folder)"
                    " and GRADSYNC_LIBS_DIR=%s does not have it: set "
                    "GRADSYNC_LIBS_DIR to the bundle's lib/ folder, or "
                    "install the full wheel (tools/install_python.sh)" %
                    (soname, beside or "(unset)"))
        try:
            ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as error:
            raise ImportError(
                "gradsync: could not load %s, which the installed gradsync "
                "wheel carries for its library: %s. Reinstall the wheel, or "
                "build it on this machine (tools/install_python.sh)" %
                (path, error))


def _load():
    tried = []
    for path, origin in _candidates():
        if not os.path.exists(path):
            tried.append("%s (%s)" % (path, origin))
            continue
        path = os.path.realpath(path)
        if os.path.dirname(path) == os.path.realpath(_HERE):
            _check_glibc()
            _preload_vendored()
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        except OSError as error:
            raise ImportError(
                "gradsync: %s (%s) does not load: %s. Rebuild it "
                "(tools/install_python.sh)" % (path, origin, error))
        version = library.gradsync_api_version()
        if version != API_VERSION:
            raise ImportError(
                "gradsync: %s has C API version %d but this package is "
                "written for version %d: the library and the Python files "
                "come from different builds; reinstall with "
                "tools/install_python.sh" % (path, version, API_VERSION))
        return library, path
    raise ImportError(
        "gradsync: libgradsync_c.so not found for %s; looked in: %s. Install "
        "the package with tools/install_python.sh (or `python -m pip install "
        "gradsync-*.whl` from a bundle), build it in a checkout with `bazel "
        "build //python:libgradsync_c.so`, or set GRADSYNC_LIBRARY to its "
        "path" % (sys.executable, "; ".join(tried)))


def _declare(library):
    c_int, c_int64, c_double = ctypes.c_int, ctypes.c_int64, ctypes.c_double
    c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
    int64_p = ctypes.POINTER(c_int64)
    signatures = {
        "gradsync_api_version": (c_int, []),
        "gradsync_last_error": (c_char_p, []),
        "gradsync_strategies": (c_char_p, []),
        "gradsync_worker_create": (c_int, [
            c_char_p, c_double, ctypes.POINTER(c_char_p), c_int, c_char_p,
            c_char_p, c_int64, c_int64, c_int64, c_char_p, c_int64,
            ctypes.POINTER(c_void_p)]),
        "gradsync_worker_add_bucket": (c_int, [
            c_void_p, c_int, c_void_p, c_int64, int64_p, int64_p, c_int64,
            c_int, ctypes.POINTER(c_int)]),
        "gradsync_worker_set_bucket_caps": (c_int, [c_void_p, c_int64, c_int64]),
        "gradsync_worker_set_ready_order": (c_int, [c_void_p, int64_p, c_int64]),
        "gradsync_worker_set_loss": (c_int, [c_void_p, c_double]),
        "gradsync_worker_set_device_compute_ms": (c_int, [c_void_p, c_double]),
        "gradsync_worker_fail": (c_int, [c_void_p, c_char_p]),
        "gradsync_worker_close": (c_int, [c_void_p]),
        "gradsync_worker_destroy": (None, [c_void_p]),
        "gradsync_worker_rank": (c_int, [c_void_p]),
        "gradsync_worker_world_size": (c_int, [c_void_p]),
        "gradsync_worker_num_servers": (c_int, [c_void_p]),
        "gradsync_worker_sync": (c_char_p, [c_void_p]),
        "gradsync_worker_layout": (c_char_p, [c_void_p]),
        "gradsync_worker_summary_json": (c_char_p, [c_void_p]),
        "gradsync_worker_last_step_json": (c_char_p, [c_void_p]),
    }
    for name, (result, arguments) in signatures.items():
        function = getattr(library, name)
        function.restype = result
        function.argtypes = arguments
    return library


_lib, library_path = _load()
_declare(_lib)


def _text(raw):
    return raw.decode("utf-8", "replace") if raw is not None else ""


def _check(code):
    if code != 0:
        raise RuntimeError(_text(_lib.gradsync_last_error()))


def _int64_array(values):
    values = list(values)
    return (ctypes.c_int64 * len(values))(*values), len(values)


def strategies():
    """The --sync names this build has."""
    return [name for name in _text(_lib.gradsync_strategies()).split(",") if name]


class TorchWorker:
    """One joined worker and its DDP hook's strategy (gradsync_c_api.h).

    Every failure raises RuntimeError with gradsync's message.
    """

    def __init__(self, sync, timeout_s, flags, metrics_dir="", trace_path="",
                 trace_steps=20, warmup_steps=0, batch_size=0, model="pytorch",
                 total_steps=0):
        self._handle = None
        encoded = [str(flag).encode() for flag in flags]
        flag_array = (ctypes.c_char_p * max(1, len(encoded)))(*encoded)
        handle = ctypes.c_void_p()
        _check(_lib.gradsync_worker_create(
            str(sync).encode(), float(timeout_s), flag_array, len(encoded),
            str(metrics_dir).encode(), str(trace_path).encode(),
            int(trace_steps), int(warmup_steps), int(batch_size),
            str(model).encode(), int(total_steps), ctypes.byref(handle)))
        self._handle = handle

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None and _lib is not None:
            _lib.gradsync_worker_destroy(handle)

    def add_bucket(self, index, address, numel, params, is_last):
        """Bucket `index`: `numel` float32 values at host `address`, made of
        `params` [(key, numel)]. True when this call ended the step (every
        bucket of it then holds the average)."""
        keys, count = _int64_array(key for key, _ in params)
        numels, _ = _int64_array(n for _, n in params)
        ended = ctypes.c_int(0)
        _check(_lib.gradsync_worker_add_bucket(
            self._handle, int(index), ctypes.c_void_p(int(address)), int(numel),
            keys, numels, count, 1 if is_last else 0, ctypes.byref(ended)))
        return bool(ended.value)

    def set_bucket_caps(self, first_bucket_bytes, bucket_bytes):
        _check(_lib.gradsync_worker_set_bucket_caps(
            self._handle, int(first_bucket_bytes), int(bucket_bytes)))

    def set_ready_order(self, keys):
        array, count = _int64_array(keys)
        _check(_lib.gradsync_worker_set_ready_order(self._handle, array, count))

    def set_loss(self, loss):
        _check(_lib.gradsync_worker_set_loss(self._handle, float(loss)))

    def last_step(self):
        return json.loads(_text(_lib.gradsync_worker_last_step_json(self._handle)))

    def set_device_compute_ms(self, compute_ms):
        _check(_lib.gradsync_worker_set_device_compute_ms(
            self._handle, float(compute_ms)))

    def fail(self, message):
        _check(_lib.gradsync_worker_fail(self._handle, str(message).encode()))

    def close(self):
        _check(_lib.gradsync_worker_close(self._handle))

    @property
    def rank(self):
        return _lib.gradsync_worker_rank(self._handle)

    @property
    def world_size(self):
        return _lib.gradsync_worker_world_size(self._handle)

    @property
    def num_servers(self):
        return _lib.gradsync_worker_num_servers(self._handle)

    @property
    def sync(self):
        return _text(_lib.gradsync_worker_sync(self._handle))

    @property
    def layout(self):
        return _text(_lib.gradsync_worker_layout(self._handle))

    @property
    def summary_json(self):
        return _text(_lib.gradsync_worker_summary_json(self._handle))
