"""Issue 41's GPU check of the hook, for a node with the bundle: DDP on Gloo
over CUDA tensors, and gradsync's ring and PS behind the hook (buckets staged
through pinned host memory), two processes sharing one GPU, 20 steps; every
rank's parameters must equal DDP-on-Gloo's within 1e-5.

    python3 -m pip install --no-index python/gradsync-*.whl   # the bundle's
    python3 python/cuda_hook_check.py --gradsync bin/gradsync

Prints one line per job (its time and its largest difference from DDP on
Gloo) and, on CUDA, worker 0's median step, compute (the GPU's forward +
backward from the hook's CUDA events) and exposed communication; exits 1 if
any job fails or differs, or if no CUDA event was read. --device=cpu runs the same
jobs without a GPU (how it was checked where none was at hand).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-5
JOB_DEADLINE_S = 300


def run_job(args, name, worker_args, servers, out_root):
    folder = os.path.join(out_root, name)
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, "params")
    command = [
        args.gradsync, "launch", "--workers=2", "--servers=%d" % servers,
        "--run_dir=%s" % folder, "--job_deadline_s=%d" % JOB_DEADLINE_S, "--",
        args.python, os.path.join(HERE, "ddp_worker.py"),
        "--device=%s" % args.device, "--steps=%d" % args.steps,
        "--out=%s" % prefix
    ] + worker_args
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=JOB_DEADLINE_S + 30)
    except subprocess.TimeoutExpired as expired:
        print("%s: did not end within %d s\n%s" %
              (name, JOB_DEADLINE_S + 30, expired.output))
        return None
    with open(os.path.join(folder, "console.txt"), "w") as f:
        f.write(done.stdout)
    if done.returncode != 0:
        print("%s: failed (exit %d); its output:\n%s" %
              (name, done.returncode, done.stdout[-4000:]))
        return None
    return [torch.load("%s.rank%d.pt" % (prefix, rank)) for rank in range(2)]


def step_times(folder):
    """Worker 0's measured steps: (step_ms, compute_ms, sync_wait_ms)."""
    with open(os.path.join(folder, "worker0.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [(l["step_ms"], l["compute_ms"], l["sync_wait_ms"])
            for l in lines if l.get("type") == "step" and l["step"] >= 1]


def check_device_timing(folder):
    """On CUDA the hook's compute_ms is the GPU's, from CUDA events
    (gradsync/device_timing.py): never above the step, and not the host's
    step_ms - sync_wait_ms on every step (which would mean no event was
    read). Returns (ok, a line saying what was seen)."""
    steps = step_times(folder)
    if not steps:
        return False, "no measured step lines in worker0.jsonl"
    median = lambda values: sorted(values)[len(values) // 2]
    step_ms = median([s for s, _, _ in steps])
    compute_ms = median([c for _, c, _ in steps])
    wait_ms = median([w for _, _, w in steps])
    host_rule = all(abs(c - max(0.0, s - w)) < 1e-6 for s, c, w in steps)
    over = [c for s, c, _ in steps if c > s + 1e-6]
    ok = not host_rule and not over
    return ok, ("step %.2f ms, compute (CUDA events) %.2f, exposed %.2f%s%s" %
                (step_ms, compute_ms, wait_ms,
                 "; compute is the host's step - wait on every step: no "
                 "CUDA event was read" if host_rule else "",
                 "; compute above the step on %d steps" % len(over)
                 if over else ""))


def difference(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradsync", required=True,
                        help="the gradsync program (the bundle's bin/gradsync)")
    parser.add_argument("--python", default=sys.executable,
                        help="the workers' Python (with gradsync installed)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default="",
                        help="where the jobs' folders go (default: a new "
                        "temporary folder)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_hook_check: torch %s sees no CUDA device; --device=cpu "
              "runs the jobs without one" % torch.__version__)
        return 1
    out_root = args.out or tempfile.mkdtemp(prefix="gradsync_cuda_hook_")
    print("torch %s, Python %d.%d, device %s%s, %d steps, jobs in %s" %
          ((torch.__version__,) + sys.version_info[:2] +
           (args.device, " (%s)" % torch.cuda.get_device_name(0)
            if args.device == "cuda" else "", args.steps, out_root)),
          flush=True)
    gloo = run_job(args, "gloo", ["--mode=gloo"], 0, out_root)
    if gloo is None:
        return 1
    ok = difference(gloo[0], gloo[1]) < TOLERANCE
    print("gloo: ranks differ by %.3g" % difference(gloo[0], gloo[1]))
    for name, worker_args, servers in [
            ("ring", ["--mode=gradsync", "--sync=ring"], 0),
            ("ps", ["--mode=gradsync", "--sync=ps"], 2)]:
        ranks = run_job(args, name, worker_args, servers, out_root)
        if ranks is None:
            ok = False
            continue
        worst = max(difference(params, gloo[0]) for params in ranks)
        print("%s: largest difference from DDP on Gloo %.3g (%s)" %
              (name, worst, "ok" if worst < TOLERANCE else "TOO LARGE"),
              flush=True)
        ok = ok and worst < TOLERANCE
        if args.device == "cuda":
            timed, seen = check_device_timing(os.path.join(out_root, name))
            print("%s: %s (%s)" % (name, seen, "ok" if timed else "WRONG"),
                  flush=True)
            ok = ok and timed
    print("cuda_hook_check: %s" % ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
