#!/usr/bin/env bash
# Installs gradsync's Python package into the Python you train with:
#
#   tools/install_python.sh                       # into `python3` on PATH
#   tools/install_python.sh --python ~/venv/bin/python
#   tools/install_python.sh --wheel-only          # only build dist/gradsync-*.whl
#   tools/install_python.sh --wheel W.whl --python PY   # install a built wheel
#   tools/install_python.sh --python PY -- --user       # more arguments for pip
#
# Builds //python:wheel with Bazel when no --wheel is given (the library
# libgradsync_c.so, the package, the shared libraries it needs; see
# python/make_wheel.py), copies it to dist/, and installs it with
#   PY -m pip install --no-index --no-deps --force-reinstall dist/gradsync-*.whl
# offline, with no build backend: the one command that also installs the
# wheel from tools/bundle.sh's bundle on a machine without Bazel. Any CPython
# 3.9-3.13, any torch 1.13 or newer (pip, conda or a distribution's; CPU or
# CUDA): the package loads its library with ctypes, so nothing in it is built
# for one interpreter or one torch, and torch is not a dependency pip could
# replace. Afterwards `import gradsync.torch` works from any directory.
#
# Debian's and Ubuntu's own python3 refuses pip installs (PEP 668: "externally
# managed"); install into a virtual environment instead:
#   /usr/bin/python3 -m venv --system-site-packages ~/gradsync-env
#   tools/install_python.sh --python ~/gradsync-env/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."

python=""
wheel=""
wheel_only=0
pip_args=()
while (($#)); do
  case "$1" in
    --python) python="${2:?--python needs a path}"; shift 2 ;;
    --python=*) python="${1#--python=}"; shift ;;
    --wheel) wheel="${2:?--wheel needs a path}"; shift 2 ;;
    --wheel=*) wheel="${1#--wheel=}"; shift ;;
    --wheel-only) wheel_only=1; shift ;;
    --) shift; pip_args=("$@"); break ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "install_python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$wheel" ]]; then
  if ! command -v bazel > /dev/null; then
    echo "install_python.sh: bazel not found; build the wheel on a machine with" \
         "gradsync's build (tools/install_deps.sh), or give a built one with" \
         "--wheel (a bundle has it in python/)" >&2
    exit 1
  fi
  echo "== bazel build //python:wheel"
  bazel build --color=no --curses=no //python:wheel
  built=$(ls "$(bazel info bazel-bin 2>/dev/null)"/python/gradsync-*-py3-none-linux_x86_64.whl)
  mkdir -p dist
  wheel="dist/$(basename "$built")"
  cp -f "$built" "$wheel"
  chmod 644 "$wheel"
  echo "== $wheel"
fi
if [[ ! -f "$wheel" ]]; then
  echo "install_python.sh: --wheel $wheel: no such file" >&2
  exit 1
fi
((wheel_only)) && exit 0

if [[ -z "$python" ]]; then
  python=$(command -v python3 || true)
  if [[ -z "$python" ]]; then
    echo "install_python.sh: no python3 on PATH; name the interpreter with --python" >&2
    exit 1
  fi
fi
if ! version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>&1); then
  echo "install_python.sh: --python $python does not run: $version" >&2
  exit 1
fi
case "$version" in
  3.9|3.1[0-3]) ;;
  *) echo "install_python.sh: $python is Python $version; gradsync supports CPython 3.9-3.13" >&2
     exit 1 ;;
esac
if ! "$python" -m pip --version > /dev/null 2>&1; then
  echo "install_python.sh: $python has no pip; run \`$python -m ensurepip\` or" \
       "install it in a virtual environment (\`$python -m venv ENV\`)" >&2
  exit 1
fi

echo "== $python -m pip install --no-index --no-deps --force-reinstall $wheel ${pip_args[*]:-}"
if ! "$python" -m pip install --no-index --no-deps --force-reinstall "$wheel" \
     ${pip_args[@]+"${pip_args[@]}"}; then
  echo "install_python.sh: pip could not install $wheel into $python (above)." \
       "If it says the environment is externally managed, make a virtual" \
       "environment (see --help) and give its python with --python" >&2
  exit 1
fi
# From / so that a checkout's python/ folder cannot be what is imported.
(cd / && env -u PYTHONPATH "$python" -c '
import gradsync
print("== gradsync %s for Python %d.%d: %s" % ((gradsync.__version__,) +
      tuple(__import__("sys").version_info[:2]) + (gradsync.extension.library_path,)))
try:
    import torch
except ImportError:
    print("   (no torch in this environment: gradsync.torch needs torch 1.13 or newer)")
else:
    import gradsync.torch
    print("   gradsync.torch with torch %s" % torch.__version__)
')
