"""Debian's Python interpreter as a local repository, for python/.

Runs `/usr/bin/python3` once at fetch time (no network) and records what an
extension module needs: the C headers (Python.h) and the file-name suffix the
interpreter imports (EXT_SUFFIX, ".cpython-311-x86_64-linux-gnu.so"). Debian's
PyTorch lives in that interpreter, so the extension and the Python tests use it
explicitly rather than whatever `python3` is first on PATH.
"""

_QUERY = "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"

def _system_python_impl(ctx):
    interpreter = ctx.attr.interpreter
    result = ctx.execute([interpreter, "-c", _QUERY])
    if result.return_code != 0:
        fail("cannot ask %s for its headers and extension suffix: %s (install python3; tools/install_deps.sh)" % (interpreter, result.stderr))
    include_dir, ext_suffix = result.stdout.strip().split("\n")
    ctx.symlink(include_dir, "include")
    ctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)

py_runtime(
    name = "runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(interpreter = interpreter))
    ctx.file("defs.bzl", """
PYTHON_INTERPRETER = "{interpreter}"
PYTHON_EXT_SUFFIX = "{suffix}"
""".format(interpreter = interpreter, suffix = ext_suffix))

system_python = repository_rule(
    implementation = _system_python_impl,
    attrs = {"interpreter": attr.string(default = "/usr/bin/python3")},
    local = True,
)
