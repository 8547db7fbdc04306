"""gradsync for Python: gradsync's C++ strategies behind PyTorch's DDP.

    import gradsync.torch
    state = gradsync.torch.connect()          # joins the job (--sync=ring|ps|...)
    model = DDP(model)
    model.register_comm_hook(state, gradsync.torch.comm_hook)

`gradsync.extension` is the strategies' library, libgradsync_c.so, loaded
with ctypes (gradsync/_library.py says where it is looked for): one build
serves every CPython and every torch. Install the package into the Python
you train with by `tools/install_python.sh --python PY` (or `PY -m pip
install gradsync-*.whl`, offline, from a bundle); in a checkout,
`bazel build //python:libgradsync_c.so` and python/ on PYTHONPATH also work.
Importing `gradsync` needs no torch; `gradsync.torch` does (1.13 or newer).
"""

from gradsync import _library as extension

__all__ = ["extension"]
__version__ = "0.1.0"
