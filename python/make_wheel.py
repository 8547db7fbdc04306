"""Builds gradsync's wheel by hand: gradsync-<version>-py3-none-linux_x86_64.whl.

    make_wheel.py --library bazel-bin/python/libgradsync_c.so \
        --out dist/gradsync-0.1.0-py3-none-linux_x86_64.whl \
        python/gradsync/__init__.py python/gradsync/torch.py ...

A wheel is a zip: the package's files, and gradsync-<version>.dist-info/ with
METADATA, WHEEL and RECORD (every file's sha256 and size). `python -m pip
install` installs one offline, with no build backend, into any environment;
pip needs nothing else from it. The tag py3-none-linux_x86_64 says what is
true: any Python 3 (the package loads its library with ctypes, so no CPython
ABI is involved), x86_64 Linux (the library is machine code).

The wheel carries the shared libraries libgradsync_c.so needs that a user's
machine cannot be assumed to have (found with ldd: gRPC, Protobuf, Abseil,
OpenBLAS, oneDNN, OpenSSL, ...) in gradsync/_libs/, with `load-order` (each
after the ones it needs, from their DT_NEEDED entries) for
gradsync/_library.py to load them first, and `glibc-needed` (the newest
GLIBC_ symbol version any file asks for) for it to check. Left out, as
tools/bundle.sh leaves them: glibc's own libraries (they must match the
machine's loader), and libstdc++ and libgcc_s, which every process that
imports torch already has loaded (a second copy in one process is trouble).

With --libraries=beside (tools/bundle.sh), the shared libraries are left
out and only `load-order` and `glibc-needed` are written: the bundle already
carries the same libraries in its lib/ folder, and gradsync/_library.py loads
them from $GRADSYNC_LIBS_DIR instead, which keeps the bundle small enough to
copy to a node.

torch is deliberately not a dependency in METADATA: the user's torch (pip,
conda, a distribution's; CPU or CUDA) must never be replaced or upgraded by
installing gradsync, and `import gradsync` alone needs no torch.
"""

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

NAME = "gradsync"
TAG = "py3-none-linux_x86_64"
LIBRARY = "libgradsync_c.so"
# A fixed time for every entry: the same inputs give the same wheel.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)

LEFT_TO_THE_MACHINE = re.compile(
    r"^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|"
    r"libutil|libanl|libnsl|libstdc\+\+|libgcc_s)[.-]")


def fail(message):
    sys.stderr.write("make_wheel.py: %s\n" % message)
    sys.exit(1)


def shared_libraries(library):
    """(soname, path) of every library ldd resolves for `library`."""
    try:
        listing = subprocess.run(["ldd", library], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        fail("ldd %s failed: %s" % (library, error))
    found = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] != "=>":
            continue
        soname, path = parts[0], parts[2]
        if LEFT_TO_THE_MACHINE.match(soname):
            continue
        if path == "not":
            fail("%s needs %s, which ldd cannot find on this machine; install "
                 "gradsync's dependencies (tools/install_deps.sh)" %
                 (library, soname))
        found.append((soname, path))
    return found


def needed(path):
    """The DT_NEEDED sonames of a shared library."""
    try:
        dynamic = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        fail("readelf -d %s failed: %s" % (path, error))
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)


def load_order(libraries):
    """Sonames with each after the bundled ones it needs (depth first)."""
    paths = dict(libraries)
    order, state = [], {}

    def visit(soname):
        if state.get(soname) == "done":
            return
        if state.get(soname) == "visiting":
            return  # a cycle: the loader resolves it; any order will do
        state[soname] = "visiting"
        for dependency in needed(paths[soname]):
            if dependency in paths:
                visit(dependency)
        state[soname] = "done"
        order.append(soname)

    for soname, _ in libraries:
        visit(soname)
    return order


def newest_glibc(paths):
    newest = (2, 17)
    for path in paths:
        try:
            symbols = subprocess.run(["objdump", "-T", path],
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True).stdout
        except OSError as error:
            fail("objdump -T %s failed: %s" % (path, error))
        for version in re.findall(r"GLIBC_([0-9]+(?:\.[0-9]+)+)", symbols):
            newest = max(newest, tuple(int(part) for part in version.split(".")))
    return ".".join(str(part) for part in newest)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (name, digest.rstrip(b"=").decode(), len(data))


def package_version(sources):
    for source in sources:
        if os.path.basename(source) == "__init__.py":
            with open(source) as f:
                match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
            if match:
                return match.group(1)
    fail("no __version__ = \"...\" in the package's __init__.py")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="libgradsync_c.so")
    parser.add_argument("--out", required=True,
                        help="the wheel's path (its name must be the wheel's)")
    parser.add_argument("--libraries", choices=("carried", "beside"),
                        default="carried",
                        help="carried: the shared libraries in gradsync/_libs/; "
                        "beside: left out, loaded from $GRADSYNC_LIBS_DIR "
                        "(a bundle's lib/)")
    parser.add_argument("sources", nargs="+",
                        help="the package's .py files (gradsync/<name>)")
    args = parser.parse_args()

    version = package_version(args.sources)
    expected = "%s-%s-%s.whl" % (NAME, version, TAG)
    if os.path.basename(args.out) != expected:
        fail("--out %s: a wheel of gradsync %s must be named %s (pip reads "
             "the name and version from it)" % (args.out, version, expected))
    if not os.path.isfile(args.library):
        fail("--library %s: no such file; build it with `bazel build "
             "//python:libgradsync_c.so`" % args.library)

    files = []  # (name in the wheel, bytes, executable)
    for source in args.sources:
        with open(source, "rb") as f:
            files.append(("%s/%s" % (NAME, os.path.basename(source)), f.read(),
                          False))
    with open(args.library, "rb") as f:
        files.append(("%s/%s" % (NAME, LIBRARY), f.read(), True))
    libraries = shared_libraries(args.library)
    if args.libraries == "carried":
        for soname, path in libraries:
            with open(path, "rb") as f:
                files.append(("%s/_libs/%s" % (NAME, soname), f.read(), True))
    order = load_order(libraries)
    files.append(("%s/_libs/load-order" % NAME,
                  ("\n".join(order) + "\n").encode(), False))
    glibc = newest_glibc([args.library] + [path for _, path in libraries])
    files.append(("%s/_libs/glibc-needed" % NAME, (glibc + "\n").encode(),
                  False))

    info = "%s-%s.dist-info" % (NAME, version)
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: %s" % NAME,
        "Version: %s" % version,
        "Summary: gradsync's gradient-synchronization strategies (ring, "
        "parameter server, ...) behind PyTorch DDP's communication hook",
        "Requires-Python: >=3.9",
        "",
        "Install offline with `python -m pip install <this wheel>`; see "
        "python/README.md in gradsync.",
        ""])
    wheel = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: gradsync python/make_wheel.py",
        "Root-Is-Purelib: false",
        "Tag: %s" % TAG,
        ""])
    files.append(("%s/METADATA" % info, metadata.encode(), False))
    files.append(("%s/WHEEL" % info, wheel.encode(), False))
    files.append(("%s/top_level.txt" % info, (NAME + "\n").encode(), False))
    record = [record_line(name, data) for name, data, _ in files]
    record.append("%s/RECORD,," % info)
    files.append(("%s/RECORD" % info, ("\n".join(record) + "\n").encode(),
                  False))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    partial = args.out + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in files:
            entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = (0o755 if executable else 0o644) << 16
            archive.writestr(entry, data)
    os.replace(partial, args.out)
    print("%s: %d files, %d shared libraries %s, glibc %s or newer" %
          (args.out, len(files), len(libraries),
           "carried" if args.libraries == "carried"
           else "left to $GRADSYNC_LIBS_DIR", glibc))


if __name__ == "__main__":
    main()
