#!/usr/bin/env python3
"""ddp_compare.py: ringside-train against PyTorch DDP (benches/ddp_torch.py) in one
run, same job (CNN, Fashion-MNIST, batch 64 per rank, SGD lr 0.01*world momentum
0.9, one thread per rank, same steps), at each world size.

Runs alternate (ours, torch, then torch, ours on the next repeat, with seed =
repeat) so a burst of load elsewhere does not favour one side. Prints one line
per run, a table of medians, and one JSON summary line:
ratio = median samples/s ours / median samples/s torch, and the accuracy
difference in points (ours - torch). The load average before and after is part
of the output: on a shared machine, a number measured under load is a different
number.

    cargo build --release -p trainers --bin ringside-train
    .ringside/venv/bin/python benches/ddp_compare.py --steps 500 --repeats 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ringside-train sets these allocator thresholds itself (see keep_freed_memory in
# trainers/src/bin/ringside-train.rs); "torch+malloc" gives them to PyTorch too.
TUNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


def run_json(cmd, env=None):
    out = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=3600, env=env
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}")
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no JSON line from: {' '.join(cmd)}\n{out.stdout[-2000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backend", default="reference", help="ours: reference, gloo or mpi")
    p.add_argument("--ours", default=os.path.join(ROOT, "target", "release", "ringside-train"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--no-tuned-torch", action="store_true", help="skip the torch+malloc runs")
    p.add_argument(
        "--torch-channels-last",
        action="store_true",
        help="give PyTorch channels-last convolution weights too, as ringside-train lays them out "
        "on the CPU (the like-for-like layout; without it PyTorch runs as a model is usually written)",
    )
    args = p.parse_args()

    load_before = os.getloadavg()
    rows = {}
    for rep in range(args.repeats):
        for world in [int(w) for w in args.worlds.split(",")]:
            common = ["--steps", str(args.steps), "--batch", str(args.batch)]
            common += ["--threads", str(args.threads), "--seed", str(rep)]
            ours = [args.ours, "--nproc", str(world), "--backend", args.backend, "--json"] + common
            torch = [args.python, os.path.join(HERE, "ddp_torch.py"), "--nproc", str(world)] + common
            if args.torch_channels_last:
                torch.append("--channels-last")
            tuned = dict(os.environ, GLIBC_TUNABLES=TUNED)
            order = [("ours", ours, None), ("torch", torch, None)]
            if not args.no_tuned_torch:
                order.append(("torch+malloc", torch, tuned))
            if rep % 2:
                order.reverse()
            for name, cmd, env in order:
                r = run_json(cmd, env)
                rows.setdefault((world, name), []).append(r)
                print(
                    f"repeat {rep} world {world} {name:12}: {r['samples_per_s']:8.1f} samples/s, "
                    f"test accuracy {100 * r['test_accuracy']:.2f}%, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    load_after = os.getloadavg()

    summary = {"steps": args.steps, "repeats": args.repeats, "backend": args.backend,
               "load_before": load_before, "load_after": load_after, "worlds": []}
    print(
        f"\n{'world':>5} {'ours/s':>9} {'torch/s':>9} {'ratio':>6} {'acc ours':>9} "
        f"{'acc torch':>9} {'diff':>6} {'torch+malloc/s':>14} {'ratio':>6}"
    )
    for world in [int(w) for w in args.worlds.split(",")]:
        med = lambda name, key: statistics.median(r[key] for r in rows[(world, name)])
        o, t = med("ours", "samples_per_s"), med("torch", "samples_per_s")
        ao, at = med("ours", "test_accuracy"), med("torch", "test_accuracy")
        tt = med("torch+malloc", "samples_per_s") if (world, "torch+malloc") in rows else float("nan")
        print(
            f"{world:>5} {o:9.1f} {t:9.1f} {o / t:6.3f} {100 * ao:8.2f}% {100 * at:8.2f}% "
            f"{100 * (ao - at):+6.2f} {tt:14.1f} {o / tt:6.3f}"
        )
        summary["worlds"].append({
            "world_size": world, "ours_samples_per_s": o, "torch_samples_per_s": t, "ratio": o / t,
            "torch_malloc_samples_per_s": tt, "ratio_vs_torch_malloc": o / tt,
            "ours_accuracy": ao, "torch_accuracy": at, "accuracy_diff_points": 100 * (ao - at),
            "runs": {n: [r["samples_per_s"] for r in rows[(world, n)]]
                     for n in ("ours", "torch", "torch+malloc") if (world, n) in rows},
        })
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
