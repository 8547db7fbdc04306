"""Fresh Python environments for python/'s install tests: the wheel, virtual
environments made and filled in TEST_TMPDIR, a second CPython to find, and
free ports for jobs started the way torchrun starts them."""

import glob
import os
import pwd
import random
import re
import socket
import subprocess
import sys

# The CPython versions gradsync's package supports.
SUPPORTED = [(3, minor) for minor in range(9, 14)]
# Every command here gives up after this, naming what it ran.
COMMAND_DEADLINE_S = 300


def runfiles_root():
    root = os.environ.get("TEST_SRCDIR")
    if not root:
        raise RuntimeError("TEST_SRCDIR is not set: run this under `bazel test`")
    return os.path.join(root, "gradsync")


def scratch(name):
    root = os.environ.get("TEST_TMPDIR")
    if not root:
        raise RuntimeError("TEST_TMPDIR is not set: run this under `bazel test`")
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def wheel():
    """The wheel //python:wheel built, from the test's runfiles."""
    found = glob.glob(os.path.join(runfiles_root(), "python",
                                   "gradsync-*-py3-none-linux_x86_64.whl"))
    if len(found) != 1:
        raise RuntimeError("expected one gradsync wheel in the runfiles' "
                           "python/, found %r: add //python:wheel to the "
                           "test's data" % found)
    return found[0]


def clean_env(**extra):
    """The environment a user's shell would give: no PYTHONPATH (Bazel's
    would put the checkout's package first), no bytecode written into the
    runfiles, no pip cache or version check outside TEST_TMPDIR."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH",
                 "RUNFILES_DIR", "RUNFILES_MANIFEST_FILE", "GRADSYNC_LIBRARY"):
        env.pop(name, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_NO_CACHE_DIR"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    env.update(extra)
    return env


def run(command, cwd="/", env=None, deadline_s=COMMAND_DEADLINE_S):
    """(exit code, output) of `command`; a command past its deadline is an
    error naming it."""
    try:
        done = subprocess.run(command, cwd=cwd, env=env or clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=deadline_s)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError("%s did not end within %d s:\n%s" %
                             (" ".join(command), deadline_s, expired.output))
    return done.returncode, done.stdout


def make_venv(base_python, name, system_site_packages):
    """A new virtual environment of `base_python` in TEST_TMPDIR; returns
    its python."""
    folder = os.path.join(scratch("venvs"), name)
    command = [base_python, "-m", "venv"]
    if system_site_packages:
        command.append("--system-site-packages")
    code, output = run(command + [folder])
    if code != 0:
        raise AssertionError("%s failed (%d):\n%s" % (" ".join(command), code,
                                                      output))
    return os.path.join(folder, "bin", "python")


def install_command(python, wheel_path):
    """The one command that installs gradsync into `python`'s environment,
    offline, as on a GPU node with the bundle (tools/bundle.sh)."""
    return [python, "-m", "pip", "install", "--no-index", "--no-deps",
            "--force-reinstall", wheel_path]


def version_of(python):
    code, output = run([python, "-c",
                        "import sys; print('%d.%d' % sys.version_info[:2])"],
                       deadline_s=60)
    if code != 0:
        return None
    match = re.search(r"^(\d+)\.(\d+)$", output.strip(), re.M)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _home():
    home = os.environ.get("HOME")
    if home and os.path.isdir(os.path.join(home, ".pyenv")):
        return home
    # Bazel's test environment need not carry the user's HOME.
    return pwd.getpwuid(os.getuid()).pw_dir


def second_interpreter_candidates():
    """Where a second CPython is looked for, in this order (the rule
    python/README.md states):
      1. GRADSYNC_TEST_PYTHON (give it with --test_env);
      2. pyenv's versions: $PYENV_ROOT/versions/*/bin/python3, else
         ~/.pyenv/versions/*/bin/python3 (~ from HOME, else the password
         database: Bazel's test environment need not carry HOME);
      3. python3.13 ... python3.9 on PATH and in /usr/bin, /usr/local/bin.
    Returns (path, where) pairs."""
    candidates = []
    given = os.environ.get("GRADSYNC_TEST_PYTHON")
    if given:
        candidates.append((given, "GRADSYNC_TEST_PYTHON"))
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.join(_home(), ".pyenv")
    def numeric(path):
        # versions/3.13.0/bin/python3 -> (3, 13, 0): newest first.
        name = os.path.basename(os.path.dirname(os.path.dirname(path)))
        return tuple(int(part) for part in re.findall(r"\d+", name))

    for path in sorted(glob.glob(os.path.join(pyenv_root, "versions", "*",
                                              "bin", "python3")),
                       key=numeric, reverse=True):
        candidates.append((path, "pyenv (%s)" % pyenv_root))
    folders = os.environ.get("PATH", "").split(os.pathsep) + [
        "/usr/local/bin", "/usr/bin"]
    for major, minor in reversed(SUPPORTED):
        for folder in folders:
            path = os.path.join(folder, "python%d.%d" % (major, minor))
            if os.access(path, os.X_OK):
                candidates.append((path, "PATH"))
    return candidates


def find_second_interpreter():
    """(path, (major, minor)) of a supported CPython other than this one's
    version, newest first; (None, what was looked at) if none."""
    this = sys.version_info[:2]
    looked = []
    for path, where in second_interpreter_candidates():
        version = version_of(path)
        looked.append("%s (%s): %s" % (path, where, "%d.%d" % version
                                       if version else "does not run"))
        if version and version != this and version in SUPPORTED:
            return path, version
    return None, looked


# The sockets holding the ports free_port_pair gave, open until this process
# exits (core/launch/launcher.h's PickFreePort does the same).
_RESERVED = []


def _reserve(port):
    """Binds `port` on every address exclusively, then allows reuse: no other
    picker takes it while this process lives, its listener (SO_REUSEADDR, as
    torch's store and gRPC set it) still can. The socket, or None."""
    sock = socket.socket()
    try:
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        return None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def free_port_pair():
    """A port P with P + 1 also free: torchrun's MASTER_PORT and gradsync's
    coordinator beside it (MASTER_PORT + 1). Picked below the kernel's
    ephemeral range, where outgoing connections cannot take them, and held
    until this process exits, so no other picker does."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        low = int(ports.read().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, low - 1 if low > 11000 else 65535)
        first = _reserve(port)
        if first is None:
            continue
        second = _reserve(port + 1)
        if second is None:
            first.close()
            continue
        _RESERVED.extend([first, second])
        return port
    raise RuntimeError("found no two adjacent free ports below %d" % low)
