#!/usr/bin/env python3
"""torch_peer.py: PyTorch's own torch.distributed collectives, timed with ringside's rule.

Start one process per rank with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK), e.g.

    .ringside/venv/bin/torchrun --nproc-per-node 2 cli/src/torch_peer.py -b 8 -e 64M

Rank 0 prints one JSON record per line (ringside's results record,
measure/src/record.rs: label "torch-gloo"/"torch-nccl", backend
"torch", algo = the torch backend, peer true), then one line
{"cpu_cores": C, "ranks": N}: the cores the N ranks used while timed, each
rank's CPU time (all its threads) over its wall time in the sweeps, summed.
Notes (skipped forms, unsupported collectives) go to stderr.

Timing rule (the same as ringside's bench): per size, W warm-up calls, then N
iterations of {barrier; t0; collective; t1} (CUDA: synchronize before t1).
Per-iteration times are combined across ranks (max by default: an iteration
takes as long as its slowest rank), then min/median/mean/p99/max over the
iterations. p99 is the nearest-rank percentile (sorted[ceil(0.99 N) - 1]);
the median of an even N is the mean of the two middle values.
Then one more call on fresh integer-valued input is checked element by element
(`wrong`, summed over ranks; -1 with -c 0). Exit status 1 if anything was wrong,
2 for bad flags or environment.

In-place forms follow nccl-tests (the input lives inside the output buffer).
torch.distributed's all_reduce, broadcast and reduce exist only in place, so
they give in-place records only; all_to_all_single and send/recv have no
in-place form, so they give out-of-place records only.
"""

import argparse
import datetime
import json
import math
import os
import sys
import time

COLLECTIVES = [
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "send_recv",
]
REDUCING = {"all_reduce", "reduce", "reduce_scatter"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
# Sizes count the whole gathered/scattered buffer: n equal blocks.
BLOCKED = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
# torch has only one form of these; the other is skipped with a note.
IN_PLACE_ONLY = {"all_reduce", "broadcast", "reduce"}
OUT_OF_PLACE_ONLY = {"all_to_all", "send_recv"}
DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "u8"]
OPS = ["sum", "prod", "min", "max", "avg"]
# Output cells that were never written keep this (not a value any check expects).
SENTINEL = 99


def busbw_factor(collective, n):
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md)."""
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, send_recv


def parse_size(text):
    """`8`, `4K`, `1M`, `2G` (powers of 1024, optional trailing B)."""
    s = text.strip()
    if s[-1:] in ("B", "b"):
        s = s[:-1]
    mult = 1
    if s[-1:].upper() in ("K", "M", "G"):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[s[-1].upper()]
        s = s[:-1]
    if not s.isdigit():
        raise argparse.ArgumentTypeError(
            f"bad size {text!r}: expected digits with an optional K/M/G suffix (e.g. 4K, 64M)"
        )
    return int(s) * mult


def parse_collectives(text):
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError("empty --collective list")
    if "all" in names:
        if len(names) > 1:
            raise argparse.ArgumentTypeError("'all' cannot be combined with other names")
        return list(COLLECTIVES)
    # Underscores are optional (`allreduce`, `sendrecv`: ringside's own spellings).
    by_key = {c.replace("_", ""): c for c in COLLECTIVES}
    out = []
    for c in names:
        if c.replace("_", "") not in by_key:
            raise argparse.ArgumentTypeError(
                f"unknown collective {c!r}: expected a comma list of {', '.join(COLLECTIVES)}, or all"
            )
        out.append(by_key[c.replace("_", "")])
    # Keep the user's order but drop repeats.
    return list(dict.fromkeys(out))


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_peer.py",
        description="Time torch.distributed collectives with ringside's rule; "
        "rank 0 prints one ringside results record (JSON) per line.",
        epilog="Run one process per rank under torchrun (or set RANK, WORLD_SIZE, "
        "MASTER_ADDR, MASTER_PORT yourself).",
    )
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"),
                   help="smallest message in bytes, K/M/G suffixes (default 8)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"),
                   help="largest message (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2,
                   help="multiply the size by this each step (default 2)")
    p.add_argument("-n", "--iters", type=int, default=50, help="timed iterations per size (default 50)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations per size (default 5)")
    p.add_argument("-d", "--datatype", choices=DTYPES, default="f32", help="element type (default f32)")
    p.add_argument("-o", "--op", choices=OPS, default="sum", help="reduction op (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank of rooted collectives (default 0)")
    p.add_argument("-c", "--check", type=int, choices=[0, 1], default=1,
                   help="1: check one extra call per size (default); 0: wrong = -1")
    p.add_argument("--collective", type=parse_collectives, default=["all_reduce"],
                   help="comma list of " + " ".join(COLLECTIVES) + ", or all (default all_reduce)")
    p.add_argument("--combine", choices=["max", "avg", "min"], default="max",
                   help="how ranks' per-iteration times combine (default max: the slowest rank)")
    p.add_argument("--inplace", choices=["0", "1", "both"], default="both",
                   help="0: out-of-place, 1: in-place, both (default)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                   help="torch backend: gloo (CPU tensors, default) or nccl (CUDA tensors)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="process-group timeout in seconds: bounds every wait (default 120)")
    a = p.parse_args(argv)
    if a.stepfactor < 2 and a.minbytes < a.maxbytes:
        p.error(f"-f must be >= 2 (got {a.stepfactor}) unless -b equals -e")
    if a.iters < 1:
        p.error(f"-n must be >= 1 (got {a.iters})")
    if a.warmup_iters < 0:
        p.error(f"-w must be >= 0 (got {a.warmup_iters})")
    if a.minbytes > a.maxbytes:
        p.error(f"-b ({a.minbytes}) is larger than -e ({a.maxbytes})")
    if a.root < 0:
        p.error(f"-r must be >= 0 (got {a.root})")
    if a.timeout <= 0:
        p.error("--timeout must be positive")
    return a


def sizes(lo, hi, factor):
    out = []
    s = max(lo, 1)
    while s <= hi:
        out.append(s)
        if factor < 2:
            break
        s *= factor
    return out


def env_int(name, default=None):
    v = os.environ.get(name)
    if v is None or v == "":
        if default is None:
            die(f"{name} is not set. Start one process per rank under torchrun "
                "(torchrun --nproc-per-node N cli/src/torch_peer.py ...), or set RANK, "
                "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself.")
        return default
    try:
        return int(v)
    except ValueError:
        die(f"{name}={v!r} is not an integer")


def die(msg):
    """Bad flags or environment: a clear message and exit status 2 (as argparse uses)."""
    print(f"torch_peer: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def note(rank, msg):
    if rank == 0:
        print(f"torch_peer: {msg}", file=sys.stderr, flush=True)


class Peer:
    def __init__(self, args, torch, dist):
        self.a = args
        self.torch = torch
        self.dist = dist
        self.rank = dist.get_rank()
        self.n = dist.get_world_size()
        if args.backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        self.dtype = {
            "f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
            "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
        }[args.datatype]
        self.dsize = torch.empty(0, dtype=self.dtype).element_size()
        self.is_float = self.dtype.is_floating_point
        self.rop = {
            "sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG,
        }[args.op]
        self.label = f"torch-{args.backend}"
        # This process's CPU time and wall time over the timed sweeps (the
        # sizes' warm-up, timed and checked calls), as ringside's ranks meter
        # theirs (cli/src/cpu_share.rs): imports and set-up stay outside.
        self.cpu_s = 0.0
        self.wall_s = 0.0

    # ---- values -----------------------------------------------------------------
    # Element i of rank q's input: (q + i) % 7, or (q + i) % 3 + 1 for products
    # (small integers: sums and products are exact in every dtype at small worlds).
    def period(self):
        return 3 if self.a.op == "prod" else 7

    def value(self, q, i):
        return (q + i) % 3 + 1 if self.a.op == "prod" else (q + i) % 7

    def reduced(self, i):
        """The reduction over all ranks of element i, as an exact Python number."""
        vals = [self.value(q, i) for q in range(self.n)]
        op = self.a.op
        if op == "sum":
            return sum(vals)
        if op == "prod":
            return math.prod(vals)
        if op == "min":
            return min(vals)
        if op == "max":
            return max(vals)
        s = sum(vals)  # avg
        return s / self.n if self.is_float else s // self.n

    def tile(self, fn, start, count):
        """Tensor of `count` elements, element k = fn(start + k); fn has period self.period()."""
        torch = self.torch
        p = self.period()
        base = [fn(j) for j in range(p)]
        if self.is_float:
            t = torch.tensor(base, dtype=torch.float64)
        else:
            # u8 arithmetic wraps (sums and products mod 256); so must the expectation.
            if self.dtype == torch.uint8:
                base = [v % 256 for v in base]
            t = torch.tensor(base, dtype=torch.int64)
        t = t.to(self.dtype).to(self.device)
        off = start % p
        reps = (off + count + p - 1) // p
        return t.repeat(max(reps, 1))[off:off + count]

    def input_of(self, q, start, count):
        return self.tile(lambda i: self.value(q, i), start, count)

    def count_wrong(self, got, want):
        torch = self.torch
        if self.a.op == "avg" and self.is_float:
            # NCCL averages floats by pre-scaling each input by 1/n: not exact,
            # so allow a couple of units in the last place.
            tol = {torch.float32: 1e-6, torch.float64: 1e-12, torch.float16: 2e-3,
                   torch.bfloat16: 2e-2}[self.dtype]
            g = got.to(torch.float64)
            w = want.to(torch.float64)
            bad = (g - w).abs() > tol * w.abs().clamp(min=1.0)
            return int(bad.sum().item())
        return int((got != want).sum().item())

    # ---- one collective: buffers, the call, the check ----------------------------
    def setup(self, coll, count, in_place):
        """Buffers for `coll` with `count` elements per block. Returns (call, fill, check)."""
        torch, dist, n, r = self.torch, self.dist, self.n, self.rank
        root = self.a.root
        dev, dt, op = self.device, self.dtype, self.rop
        c = count

        def empty(k):
            return torch.full((k,), SENTINEL, dtype=dt, device=dev)

        if coll == "all_reduce":
            buf = empty(c)

            def call():
                dist.all_reduce(buf, op=op)

            def fill():
                buf.copy_(self.input_of(r, 0, c))

            def check():
                return self.count_wrong(buf, self.tile(self.reduced, 0, c))

        elif coll == "broadcast":
            buf = empty(c)

            def call():
                dist.broadcast(buf, src=root)

            def fill():
                buf.copy_(self.input_of(r, 0, c))

            def check():
                return self.count_wrong(buf, self.input_of(root, 0, c))

        elif coll == "reduce":
            buf = empty(c)

            def call():
                dist.reduce(buf, dst=root, op=op)

            def fill():
                buf.copy_(self.input_of(r, 0, c))

            def check():
                # Only the root's output is defined.
                if r != root:
                    return 0
                return self.count_wrong(buf, self.tile(self.reduced, 0, c))

        elif coll == "all_gather":
            out = empty(n * c)
            inp = out.narrow(0, r * c, c) if in_place else empty(c)

            def call():
                dist.all_gather_into_tensor(out, inp)

            def fill():
                out.fill_(SENTINEL)
                inp.copy_(self.input_of(r, 0, c))

            def check():
                return sum(self.count_wrong(out.narrow(0, j * c, c), self.input_of(j, 0, c))
                           for j in range(n))

        elif coll == "reduce_scatter":
            inp = empty(n * c)
            out = inp.narrow(0, r * c, c) if in_place else empty(c)

            def call():
                dist.reduce_scatter_tensor(out, inp, op=op)

            def fill():
                if not in_place:
                    out.fill_(SENTINEL)
                inp.copy_(self.input_of(r, 0, n * c))

            def check():
                return self.count_wrong(out, self.tile(self.reduced, r * c, c))

        elif coll == "all_to_all":
            inp, out = empty(n * c), empty(n * c)

            def call():
                dist.all_to_all_single(out, inp)

            def fill():
                out.fill_(SENTINEL)
                inp.copy_(self.input_of(r, 0, n * c))

            def check():
                return sum(self.count_wrong(out.narrow(0, j * c, c), self.input_of(j, r * c, c))
                           for j in range(n))

        elif coll == "gather":
            # nccl-tests: every rank has an n·count output; in place, the input is block `rank`.
            out = empty(n * c)
            inp = out.narrow(0, r * c, c) if in_place else empty(c)
            glist = [out.narrow(0, j * c, c) for j in range(n)] if r == root else None

            def call():
                dist.gather(inp, gather_list=glist, dst=root)

            def fill():
                out.fill_(SENTINEL)
                inp.copy_(self.input_of(r, 0, c))

            def check():
                if r != root:
                    return 0
                return sum(self.count_wrong(out.narrow(0, j * c, c), self.input_of(j, 0, c))
                           for j in range(n))

        elif coll == "scatter":
            inp = empty(n * c)
            out = inp.narrow(0, r * c, c) if in_place else empty(c)
            slist = [inp.narrow(0, j * c, c) for j in range(n)] if r == root else None

            def call():
                dist.scatter(out, scatter_list=slist, src=root)

            def fill():
                inp.fill_(SENTINEL)
                if not in_place:
                    out.fill_(SENTINEL)
                if r == root:
                    inp.copy_(self.input_of(root, 0, n * c))

            def check():
                return self.count_wrong(out, self.input_of(root, r * c, c))

        elif coll == "send_recv":
            # nccl-tests' sendrecv: send to rank+1, receive from rank-1 (a ring).
            inp, out = empty(c), empty(c)
            nxt, prv = (r + 1) % n, (r - 1) % n
            ops = [dist.P2POp(dist.isend, inp, nxt), dist.P2POp(dist.irecv, out, prv)]

            def call():
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            def fill():
                out.fill_(SENTINEL)
                inp.copy_(self.input_of(r, 0, c))

            def check():
                return self.count_wrong(out, self.input_of(prv, 0, c))

        else:  # parse_collectives only lets known names through
            raise ValueError(coll)
        return call, fill, check

    # ---- helpers that every rank runs identically --------------------------------
    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def all_agree(self, ok):
        """True only if `ok` on every rank (so every rank skips together)."""
        t = self.torch.tensor([1 if ok else 0], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN)
        return bool(t.item())

    def probe(self, coll, in_place):
        """Runs `coll` once on a tiny buffer; returns None if torch serves it, else why not."""
        why = None
        try:
            call, fill, _ = self.setup(coll, 1, in_place)
            fill()
            call()
            self.sync()
        except (RuntimeError, ValueError, NotImplementedError, TypeError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if not self.all_agree(why is None):
            return why or "another rank could not run it"
        return None

    def combine(self, times):
        torch, dist = self.torch, self.dist
        t = torch.tensor(times, dtype=torch.float64, device=self.device)
        how = self.a.combine
        if how == "max":
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        elif how == "min":
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
        else:
            # gloo has no ReduceOp.AVG: sum, then divide.
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            t /= self.n
        return t.cpu().tolist()

    def measure(self, coll, count, in_place):
        a, dist = self.a, self.dist
        call, fill, check = self.setup(coll, count, in_place)
        fill()
        for _ in range(a.warmup_iters):
            call()
        self.sync()
        times = []
        for _ in range(a.iters):
            dist.barrier()
            self.sync()
            t0 = time.perf_counter()
            call()
            self.sync()
            times.append((time.perf_counter() - t0) * 1e6)
        times = sorted(self.combine(times))
        wrong = -1
        if a.check:
            fill()
            self.sync()
            call()
            self.sync()
            w = self.torch.tensor([check()], dtype=self.torch.int64, device=self.device)
            dist.all_reduce(w, op=dist.ReduceOp.SUM)
            wrong = int(w.item())
        m = len(times)
        median = times[m // 2] if m % 2 else (times[m // 2 - 1] + times[m // 2]) / 2
        p99 = times[max(math.ceil(0.99 * m) - 1, 0)]
        return times[0], median, sum(times) / m, p99, times[-1], wrong

    def record(self, coll, nbytes, count, in_place, stats):
        mn, med, mean, p99, mx, wrong = stats
        algbw = nbytes / (med * 1e-6) / 1e9 if med > 0 else 0.0
        return {
            "label": self.label,
            "backend": "torch",
            "algo": self.a.backend,
            "peer": True,
            "collective": coll,
            "world": self.n,
            "bytes": nbytes,
            "count": count,
            "dtype": self.a.datatype,
            "op": self.a.op if coll in REDUCING else "none",
            "root": self.a.root if coll in ROOTED else -1,
            "in_place": in_place,
            "iters": self.a.iters,
            "min_us": mn,
            "median_us": med,
            "mean_us": mean,
            "p99_us": p99,
            "max_us": mx,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * busbw_factor(coll, self.n),
            "wrong": wrong,
        }

    def run(self):
        a, r, n = self.a, self.rank, self.n
        wanted = {"0": [False], "1": [True], "both": [False, True]}[a.inplace]
        total_wrong = 0
        for coll in a.collective:
            if coll == "send_recv" and n < 2:
                note(r, "send_recv needs at least 2 ranks: skipped")
                continue
            forms = []
            for ip in wanted:
                if coll in IN_PLACE_ONLY and not ip:
                    note(r, f"{coll}: torch.distributed has only the in-place form; out-of-place skipped")
                    continue
                if coll in OUT_OF_PLACE_ONLY and ip:
                    note(r, f"{coll}: torch.distributed has no in-place form; in-place skipped")
                    continue
                why = self.probe(coll, ip)
                if why is not None:
                    form = "in-place" if ip else "out-of-place"
                    note(r, f"{coll} ({form}, {a.datatype}, op {a.op}) not supported by "
                            f"torch {a.backend}, skipped: {why}")
                    continue
                forms.append(ip)
            if not forms:
                continue
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for s in sizes(a.minbytes, a.maxbytes, a.stepfactor):
                count = s // self.dsize
                if coll in BLOCKED:
                    count -= count % n
                if count == 0:
                    continue  # zero-byte sizes are not recorded
                per_block = count // n if coll in BLOCKED else count
                for ip in forms:
                    stats = self.measure(coll, per_block, ip)
                    if stats[5] > 0:
                        total_wrong += stats[5]
                    if r == 0:
                        rec = self.record(coll, count * self.dsize, count, ip, stats)
                        print(json.dumps(rec), flush=True)
            self.cpu_s += time.process_time() - cpu0
            self.wall_s += time.perf_counter() - wall0
        return total_wrong

    def job_cores(self):
        """Cores the job used while timed: each rank's CPU time over its wall
        time (every thread of the process: Gloo's too), summed over the ranks.
        A collective: every rank calls it."""
        mine = self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        t = self.torch.tensor([mine], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return t.item()


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    rank = env_int("RANK")
    world = env_int("WORLD_SIZE")
    for v in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(v):
            die(f"{v} is not set (torchrun sets it; by hand: "
                             "MASTER_ADDR=127.0.0.1 MASTER_PORT=<free port>)")
    if world < 1 or not 0 <= rank < world:
        die(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    if a.root >= world:
        die(f"-r {a.root} is not a rank of a world of {world}")

    import torch
    import torch.distributed as dist

    if a.backend == "nccl":
        if not torch.cuda.is_available():
            die("--backend nccl needs a CUDA device; none is visible")
        if not dist.is_nccl_available():
            die("this torch build has no NCCL")
        local = env_int("LOCAL_RANK", rank % torch.cuda.device_count())
        torch.cuda.set_device(local)
    elif not dist.is_gloo_available():
        die("this torch build has no Gloo")
    if a.op == "avg" and a.backend == "gloo":
        die("torch's gloo backend has no ReduceOp.AVG (only nccl has it); "
                         "use -o sum, min, max or prod")

    kw = {}
    if a.backend == "nccl":
        kw["device_id"] = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(a.backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout), **kw)
    try:
        peer = Peer(a, torch, dist)
        note(rank, f"torch {torch.__version__}, backend {a.backend}, world {world}, "
                   f"times combined across ranks by {a.combine}")
        wrong = peer.run()
        cores = peer.job_cores()
        if rank == 0:
            print(json.dumps({"cpu_cores": cores, "ranks": world}), flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if wrong > 0:
        print(f"torch_peer: rank {rank}: {wrong} wrong elements in total", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
