"""gradsync for Python: gradsync's C++ strategies behind PyTorch's DDP.

    import gradsync.torch
    state = gradsync.torch.connect()          # joins the job (--sync=ring|ps|...)
    model = DDP(model)
    model.register_comm_hook(state, gradsync.torch.comm_hook)

The extension module `_gradsync` is built by Bazel (`bazel build //python:all`).
In a checkout, put `python/` on PYTHONPATH: the package finds the module in
`bazel-bin/python/gradsync/` beside it, or in GRADSYNC_EXTENSION_DIR.
"""

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["extension"]


def _candidate_dirs():
    here = os.path.dirname(os.path.abspath(__file__))
    given = os.environ.get("GRADSYNC_EXTENSION_DIR")
    if given:
        yield given
    yield here
    # A checkout: python/gradsync/ -> bazel-bin/python/gradsync/.
    yield os.path.join(here, "..", "..", "bazel-bin", "python", "gradsync")


def _load_extension():
    name = "_gradsync" + importlib.machinery.EXTENSION_SUFFIXES[0]
    for folder in _candidate_dirs():
        path = os.path.join(folder, name)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("gradsync._gradsync",
                                                          path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["gradsync._gradsync"] = module
            return module
    raise ImportError(
        "gradsync's extension module %s is not built for this interpreter "
        "(%s): run `bazel build //python:all` in the gradsync checkout, or "
        "set GRADSYNC_EXTENSION_DIR to the folder that holds it" %
        (name, sys.executable))


extension = _load_extension()
