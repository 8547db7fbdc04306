#!/usr/bin/python3
"""Test accuracy of compressed training against uncompressed, same epochs.

Runs one `gradsync launch` job per (model, method, seed): N workers on the
ring (or the PS with --strategy=ps), each with --compression=METHOD, for the
same epochs, learning rate and seed as the uncompressed job, then prints the
final test accuracy of each, the mean and spread over seeds, and the
difference from `none`. Accuracy does not depend on the machine's load, so
this runs on a shared machine; its step times do, and are not reported.

    /usr/bin/python3 bench/compression_accuracy.py --models=mlp,cnn \\
        --methods=none,fp16,bf16,topk:0.01,onebit --seeds=1,2 --workers=2

Needs `bazel build //tools:gradsync` and Fashion-MNIST (gradsync fetches it
on first use, see docs/models-and-data.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Per model: per-worker batch, learning rate for that batch (scaled
# linearly by the workers), optimizer flags, and the default epochs; the
# demo's settings (tools/demo.sh).
MODELS = {
    "mlp": dict(batch=64, lr=0.05, flags=[], epochs=3),
    "cnn": dict(batch=16, lr=0.0005, flags=["--optimizer=adam"], epochs=1),
}


def run_job(args, model, method, seed, out_dir):
    settings = MODELS[model]
    run_dir = os.path.join(out_dir, f"{model}-{method.replace(':', '_')}-seed{seed}")
    launch = [args.gradsync, "launch", f"--workers={args.workers}",
              f"--run_dir={run_dir}"]
    if args.strategy == "ps":
        launch.append(f"--servers={args.workers}")
    training = ["--", f"--sync={args.strategy}", f"--model={model}",
                f"--epochs={args.epochs or settings['epochs']}",
                f"--batch_size={settings['batch']}", f"--lr={settings['lr']}",
                "--lr_scaling=linear", f"--seed={seed}", "--progress=false",
                f"--compression={method}", *settings["flags"], *args.extra]
    started = time.time()
    result = subprocess.run(launch + training, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"compression_accuracy: {' '.join(launch + training)} failed "
                 f"(exit {result.returncode}):\n{result.stdout[-3000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    accuracy = summary.get("test_accuracy")
    if accuracy is None:
        sys.exit(f"compression_accuracy: {run_dir}/summary.json has no test_accuracy")
    print(f"{model} {method} seed {seed}: {100 * accuracy:.2f} % "
          f"({time.time() - started:.0f} s)", flush=True)
    return 100 * accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp")
    parser.add_argument("--methods", default="none,fp16,bf16,topk:0.01,onebit")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--strategy", default="ring", choices=["ring", "ps"])
    parser.add_argument("--epochs", type=int, default=0,
                        help="0: the model's default (mlp 3, cnn 1)")
    parser.add_argument("--out", default=f"runs/compression-accuracy-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--gradsync", default="bazel-bin/tools/gradsync")
    parser.add_argument("extra", nargs="*", help="training flags after --")
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    if "none" not in methods:
        methods.insert(0, "none")
    seeds = [int(s) for s in args.seeds.split(",")]
    for model in args.models.split(","):
        if model not in MODELS:
            sys.exit(f"compression_accuracy: --models: '{model}' is not one of "
                     f"{', '.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    table = {}
    for model in args.models.split(","):
        for method in methods:
            table[model, method] = [run_job(args, model, method, seed, args.out)
                                    for seed in seeds]
    rows = []
    print(f"\n{args.strategy}, N = {args.workers}, seeds {args.seeds}: final test accuracy (%)")
    print("| model | method | per seed | mean | difference from none (mean) |")
    print("| --- | --- | --- | ---: | ---: |")
    for model in args.models.split(","):
        reference = statistics.mean(table[model, "none"])
        for method in methods:
            values = table[model, method]
            mean = statistics.mean(values)
            rows.append(dict(model=model, method=method, accuracy=values, mean=mean,
                             difference=mean - reference))
            print(f"| {model} | {method} | {', '.join(f'{v:.2f}' for v in values)} | "
                  f"{mean:.2f} | {mean - reference:+.2f} |")
    with open(os.path.join(args.out, "accuracy.json"), "w") as f:
        json.dump(dict(strategy=args.strategy, workers=args.workers, seeds=seeds,
                       rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
