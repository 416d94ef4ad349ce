#!/usr/bin/env python3
"""profile_summary.py: what a training step costs on the host and on the device,
side by side for several Kineto traces (`ringside-train --profile`,
`benches/ddp_torch.py --profile`, or any torch.profiler Chrome trace).

For each trace, per step (the counts divided by --steps, the number of steps it
recorded): the ops dispatched (every aten:: call, nested ones included, and the
top-level ones a program called itself), the CUDA runtime and driver calls, the
kernels, copies and memsets the device ran and their time, how much of the
recorded span the device was busy, and the host threads that dispatched ops.
Then the kernels by total time, so two programs' steps can be compared line by
line. Standard library only: it runs on a bare GPU node's python.

    python3 benches/profile_summary.py --steps 10 ours=prof-ringside.json eager=prof-eager.json
"""

import argparse
import json
import sys
from collections import Counter, defaultdict


def load(path):
    with open(path) as f:
        trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def union_us(intervals):
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarise(events, steps):
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    cpu = [e for e in spans if e.get("cat") == "cpu_op"]
    # Top level: a cpu_op not inside another cpu_op of the same thread.
    top, by_tid = 0, defaultdict(list)
    for e in cpu:
        by_tid[e.get("tid")].append(e)
    for ops in by_tid.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_end = None
        for e in ops:
            if open_end is None or e["ts"] >= open_end:
                top += 1
                open_end = e["ts"] + e["dur"]
    runtime = [e for e in spans if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kernels = [e for e in spans if e.get("cat") == "kernel"]
    copies = [e for e in spans if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    device = kernels + copies
    if spans:
        t0 = min(e["ts"] for e in spans)
        t1 = max(e["ts"] + e["dur"] for e in spans)
    else:
        t0 = t1 = 0.0
    span = t1 - t0
    busy = union_us([(e["ts"], e["ts"] + e["dur"]) for e in device])
    launches = Counter(e["name"] for e in runtime)
    per = lambda n: n / steps
    return {
        "span_ms": span / 1000 / steps,
        "ops": per(len(cpu)),
        "top_ops": per(top),
        "host_threads": len(by_tid),
        "runtime_calls": per(len(runtime)),
        "launches": per(sum(n for k, n in launches.items() if "Launch" in k)),
        "kernels": per(len(kernels)),
        "copies": per(len(copies)),
        "device_ms": sum(e["dur"] for e in device) / 1000 / steps,
        "busy_pct": 100.0 * busy / span if span > 0 else 0.0,
        "kernel_time": Counter(
            {k: v / steps for k, v in _sum_by_name(device).items()}
        ),
        "kernel_count": Counter({k: v / steps for k, v in Counter(e["name"][:70] for e in device).items()}),
        "top_calls": launches.most_common(6),
    }


def _sum_by_name(events):
    out = defaultdict(float)
    for e in events:
        out[e["name"][:70]] += e["dur"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, required=True, help="steps each trace recorded (--profile-steps)")
    p.add_argument("--top", type=int, default=15, help="kernels to list")
    p.add_argument("traces", nargs="+", metavar="LABEL=FILE.json")
    args = p.parse_args()
    runs = []
    for spec in args.traces:
        label, _, path = spec.partition("=")
        if not path:
            label, path = path or spec, spec
        try:
            runs.append((label, summarise(load(path), args.steps)))
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"profile_summary.py: cannot read {path}: {e}")
    labels = [l for l, _ in runs]
    print("| per step | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(runs))
    rows = [
        ("recorded span (ms, profiler on)", "span_ms", "{:.3f}"),
        ("ops dispatched (all / top level)", None, None),
        ("CUDA runtime + driver calls", "runtime_calls", "{:.1f}"),
        ("of them kernel launches", "launches", "{:.1f}"),
        ("kernels / copies + memsets", None, None),
        ("device time (ms)", "device_ms", "{:.3f}"),
        ("device busy (% of span)", "busy_pct", "{:.1f}"),
        ("host threads dispatching ops", "host_threads", "{}"),
    ]
    for name, key, fmt in rows:
        if name.startswith("ops"):
            cells = [f"{r['ops']:.1f} / {r['top_ops']:.1f}" for _, r in runs]
        elif name.startswith("kernels"):
            cells = [f"{r['kernels']:.1f} / {r['copies']:.1f}" for _, r in runs]
        else:
            cells = [fmt.format(r[key]) for _, r in runs]
        print(f"| {name} | " + " | ".join(cells) + " |")
    names = Counter()
    for _, r in runs:
        names.update(r["kernel_time"])
    print()
    print(f"Device work by name, µs per step (count per step), the {args.top} largest over all traces:")
    print()
    print("| kernel | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(runs))
    for name, _ in names.most_common(args.top):
        cells = [
            f"{r['kernel_time'].get(name, 0.0):.1f} ({r['kernel_count'].get(name, 0.0):.1f})" for _, r in runs
        ]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print()
    for label, r in runs:
        calls = ", ".join(f"{k} {n / args.steps:.1f}" for k, n in r["top_calls"])
        print(f"- {label}: runtime calls per step: {calls}")


if __name__ == "__main__":
    main()
