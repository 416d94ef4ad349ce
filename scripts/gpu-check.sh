#!/usr/bin/env bash
# The GPU check for ringside, with binaries built elsewhere.
#
# GPU machines here have no Rust toolchain, no network, no system fonts, Gloo or
# OpenMPI, so this runs in two steps:
#
# 1. On the build machine (a clone with `cargo xtask setup` done), build and collect:
#
#        scripts/gpu-check.sh build
#
#    which runs, in release mode (line tables only, then `strip --strip-debug`):
#
#        cargo test  --release --no-run -p collectives --features nccl --test nccl
#        cargo test  --release --no-run -p trainers --lib
#        cargo build --release --bins -p ringside -p trainers -p lab02-baseline \
#                    -p lab04-data-parallel -p lab05-model-parallel --features collectives/nccl
#
#    takes the executables' paths from cargo's JSON messages and packs them into
#    target/gpu-check: bin.tar.gz (the executables, gzipped: the pack's largest part),
#    lib/ (the shared libraries they need that a GPU machine's image lacks: Gloo,
#    OpenMPI and theirs, everything `ldd` names except torch's and the C/C++
#    runtime), data/ (Fashion-MNIST's four .gz files, from --data DIR or Debian's
#    /usr/share/datasets/fashion-mnist) and BUILD_INFO. It prints the pack's size and
#    fails when it is 64 MiB or more (the carry limit).
#
# 2. Carry target/gpu-check into a checkout of the repo on the GPU machine (for the
#    device `run` tool: carry ["target/gpu-check"]) and run there:
#
#        scripts/gpu-check.sh run [TORCH_DIR]
#
#    TORCH_DIR is the `torch` folder of a pip-installed PyTorch 2.11 (CUDA build);
#    default $RINGSIDE_GPU_TORCH, else /opt/torch/.venv/lib/python3.12/site-packages/torch;
#    its venv's python runs benches/ddp_torch.py. Without an NVIDIA GPU (no GPU in
#    `nvidia-smi -L`, no /dev/nvidia0) it says so and exits 3 before anything else.
#    It runs, with RINGSIDE_REQUIRE_CUDA=1 (a missing GPU fails instead of skipping):
#      a. collectives' NCCL tests: the "no CUDA device" check becomes "not applicable",
#         NCCL is loaded from TORCH_DIR/../nvidia/nccl/lib via LIBTORCH (not
#         through LD_LIBRARY_PATH, which holds only the carried libraries), the full
#         conformance suite runs on one GPU and on all GPUs (ranks as threads), and a
#         device-memory all_reduce;
#      b. trainers' CUDA tensor test (cuda_tensor_op_or_visible_skip), with
#         LD_LIBRARY_PATH=TORCH_DIR/lib because the binary's rpath names the build
#         machine's torch;
#      c. `ringside conformance --backend nccl --nproc N`, N = number of GPUs
#         (override with NGPU=...): the full matrix, one process per GPU;
#      d. training on GPU 0 at batch 64 and 512 (TRAIN_BATCHES="64 512"), ROUNDS
#         rounds (2) of TRAIN_STEPS steps (300, over as many epochs as they take):
#         `ringside-train --backend nccl --nproc 1`, then benches/ddp_torch.py
#         --device cuda as PyTorch DDP (nccl, world 1) and as plain eager PyTorch;
#         samples/s and the ratios, one table. Both time the same way: wall-clock
#         time over the steps after the warm-up, the device synchronised where
#         that window opens and closes (trainers::train::window);
#      d2. one profiled run of each at batch 64 (PROFILE_STEPS steps, 10, with
#         libtorch's Kineto profiler on both sides) and benches/profile_summary.py:
#         ops, kernel launches and device time per step, side by side;
#      e. labs 2, 4 and 5 (reference solutions, LABS_ARGS added, e.g. --quick), each
#         within LAB_TIMEOUT s (300): their GPU paths, figures and results;
#      f. Gloo against torch's gloo on the node's CPUs: `ringside bench --backend gloo
#         --peer torch --repeat 3 -b 4 -e 64M -f 4 --load L` for each entry L[@CPUS] of
#         GLOO_RUNS (default "0 16 2@0,1": idle; 16 busy loops; 2 busy loops with the
#         whole run held to CPUs 0 and 1 by taskset, a 2-core laptop on the node;
#         empty skips it), each within GLOO_TIMEOUT s (240); the tables go to gloo.log
#         and the summary.
#    What comes back, in target/gpu-check-out/<UTC time>: gpu-check.log (everything
#    printed), summary.md (each step's verdict, the training table, lab 2 against
#    eager, lab 5's bubble against its model, the figures' paths), train/*.json
#    (every training run's JSON line), gloo.log, labNN.log and results/labNN/<time>/ (each
#    lab's results.json, SVG and PNG figures). When $OUT is set (the device `run`
#    tool fetches it, at most 8 files 2 folders deep): gpu-check.log and summary.md
#    there, the rest in $OUT/details.tar.gz.
#    Exit status: 0 when every step passed, 1 when one failed, 2 on a usage or set-up
#    error, 3 without a GPU.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
pack="$here/target/gpu-check"

die() {
    echo "gpu-check: $*" >&2
    exit 2
}

executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])
'
}

# The executables the pack carries: cargo's name (basename) -> the pack's name.
packed_bins="ringside ringside-train lab02-baseline lab04-data-parallel lab05-model-parallel"

build() {
    local data="${1:-/usr/share/datasets/fashion-mnist}"
    cd "$here" || die "cannot enter $here"
    command -v python3 >/dev/null || die "python3 is needed to read cargo's JSON messages"
    local f
    for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
        t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
        [ -f "$data/$f" ] || die "no $data/$f: install dataset-fashion-mnist or pass its folder: build DIR"
    done
    rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib" "$pack/data" || die "cannot create $pack"
    local nccl trainers all
    nccl=$(cargo test --release --no-run -p collectives --features nccl --test nccl \
        --message-format=json | executables | tail -n1)
    trainers=$(cargo test --release --no-run -p trainers --lib \
        --message-format=json | executables | tail -n1)
    all=$(cargo build --release --bins -p ringside -p trainers -p lab02-baseline \
        -p lab04-data-parallel -p lab05-model-parallel --features collectives/nccl \
        --message-format=json | executables)
    [ -n "$nccl" ] && [ -n "$trainers" ] || die "a test build failed (nccl=$nccl trainers=$trainers)"
    cp "$nccl" "$pack/bin/collectives-nccl-tests" || die "cannot copy $nccl"
    cp "$trainers" "$pack/bin/trainers-tests" || die "cannot copy $trainers"
    local name exe
    for name in $packed_bins; do
        exe=$(printf '%s\n' "$all" | grep "/$name\$" | tail -n1)
        [ -n "$exe" ] || die "the build made no $name"
        cp "$exe" "$pack/bin/$name" || die "cannot copy $exe"
    done
    strip --strip-debug "$pack"/bin/* || die "strip failed"
    ldd "$pack"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libgcc_s|libstdc\+\+|libz)\.so|/torch/' |
        while read -r lib; do cp -L "$lib" "$pack/lib/" || die "cannot copy $lib"; done
    cp "$data"/*-ubyte.gz "$pack/data/" || die "cannot copy the Fashion-MNIST files"
    # The executables are most of the pack and gzip to about a third: gzip, because
    # every GPU image has it (xz or zstd may be missing).
    tar -C "$pack" -czf "$pack/bin.tar.gz" bin && rm -rf "$pack/bin" || die "cannot pack the executables"
    {
        echo "built: $(date -u +%FT%TZ) on $(uname -n)"
        echo "commit: $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
        echo "glibc: $(ldd --version 2>/dev/null | head -n1)"
        echo "torch at build: $(readlink -f .ringside/libtorch)"
    } >"$pack/BUILD_INFO"
    report_size
}

# The pack's size, part by part; fails at 64 MiB or more.
report_size() {
    local kib
    du -sh "$pack"/* | sed 's/^/    /'
    kib=$(du -sk "$pack" | cut -f1)
    echo "gpu-check: $pack is $((kib / 1024)) MiB ($kib KiB) of the 64 MiB carry limit"
    [ "$kib" -lt $((64 * 1024)) ] || die "$pack is over 64 MiB"
}

# How many NVIDIA GPUs this machine shows (0 without any).
gpu_count() {
    local n=0
    if command -v nvidia-smi >/dev/null; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    fi
    if [ "$n" -eq 0 ] 2>/dev/null; then
        n=$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)
    fi
    echo "${n:-0}"
}

# Lab 2's cuda:0 samples/s (its log's "cuda:0: ... N samples/s" line) against
# every eager round at lab 2's default batch of 64.
lab2_vs_eager() {
    local out=$1 lab2
    lab2=$(sed -n 's/^cuda:0: .*, \([0-9.]*\) samples\/s$/\1/p' "$out/lab02-baseline.log" 2>/dev/null | tail -n1)
    if [ -z "$lab2" ]; then
        echo "no cuda:0 line in lab02-baseline.log"
        return
    fi
    "$python" - "$lab2" "$out"/train/eager-b64-r*.json <<'PY'
import json, sys
lab2 = float(sys.argv[1])
eager = []
for path in sys.argv[2:]:
    try:
        with open(path) as f:
            eager.append(json.loads(f.read())["samples_per_s"])
    except (OSError, ValueError, KeyError):
        pass
if not eager:
    print(f"lab 2 on cuda:0: {lab2:,.0f} samples/s; no eager run at batch 64 to compare with")
else:
    ratios = " / ".join(f"{lab2 / e:.2f}" for e in eager)
    runs = " / ".join(f"{e:,.0f}" for e in eager)
    print(f"lab 2 on cuda:0: {lab2:,.0f} samples/s; PyTorch eager {runs}; ratio {ratios}")
PY
}

# Profiles N steps of ringside-train and of PyTorch eager at batch 64 on GPU 0
# and writes benches/profile_summary.py's table of the two to FILE.
profile_both() {
    local n=$1 file=$2 dir
    dir=$(dirname "$file")
    CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" env LD_LIBRARY_PATH="$with_torch" \
        "$bin/ringside-train" --backend nccl --nproc 1 --batch 64 --steps $((n + 10)) \
        --warmup 5 --data "$data" --no-eval --profile "$dir/profile-ringside.json" \
        --profile-steps "$n" >/dev/null || return 1
    CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "$python" "$here/benches/ddp_torch.py" \
        --device cuda --mode eager --batch 64 --steps $((n + 10)) --warmup 5 --data "$data" \
        --profile "$dir/profile-eager.json" --profile-steps "$n" >/dev/null || return 1
    "$python" "$here/benches/profile_summary.py" --steps "$n" \
        ringside-train="$dir/profile-ringside.json" eager="$dir/profile-eager.json" >"$file" || return 1
    cat "$file"
    gzip -f "$dir/profile-ringside.json" "$dir/profile-eager.json"
}

# ringside bench --backend gloo --peer torch beside LOAD busy loops, held to
# CPUS (a taskset list) when given; its output is appended to LOG.
gloo_vs_torch() {
    local load=$1 cpus=$2 log=$3
    local cmd=("$bin/ringside" bench --backend gloo --peer torch --python "$python"
        --repeat "${GLOO_REPEAT:-3}" -b 4 -e "${GLOO_MAX:-64M}" -f 4 --load "$load")
    [ -n "$cpus" ] && cmd=(taskset -c "$cpus" "${cmd[@]}")
    echo "== gloo: ${cmd[*]}" | tee -a "$log"
    LD_LIBRARY_PATH="$with_torch" timeout "${GLOO_TIMEOUT:-240}" "${cmd[@]}" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}

run_checks() {
    local out=$1
    shift
    local torch="${1:-${RINGSIDE_GPU_TORCH:-/opt/torch/.venv/lib/python3.12/site-packages/torch}}"
    echo "== gpu-check on $(uname -n), $(date -u +%FT%TZ); results in $out"
    # First, before anything that could fail for another reason: is there a GPU?
    local ngpu
    ngpu=$(gpu_count)
    if ! [ "$ngpu" -gt 0 ] 2>/dev/null; then
        echo "gpu-check: this check needs an NVIDIA GPU and this machine has none" \
            "(no GPU in 'nvidia-smi -L', no /dev/nvidia0). Run it on a GPU node:" \
            "carry target/gpu-check there and run 'scripts/gpu-check.sh run'." >&2
        return 3
    fi
    [ -f "$pack/bin.tar.gz" ] || die "no $pack/bin.tar.gz: run 'scripts/gpu-check.sh build' on the build machine and carry target/gpu-check"
    [ -f "$torch/lib/libtorch.so" ] || die "$torch is not a torch folder (no lib/libtorch.so); pass the torch folder as the argument"
    torch=$(cd "$torch" && pwd -P)
    local python="${RINGSIDE_GPU_PYTHON:-$torch/../../../../bin/python}"
    [ -x "$python" ] || python=$(command -v python3)
    local bin
    bin=$(mktemp -d "${TMPDIR:-/tmp}/ringside-gpu-check.XXXXXX") || die "no temporary folder"
    tar -C "$bin" -xzf "$pack/bin.tar.gz" || die "cannot unpack $pack/bin.tar.gz"
    bin="$bin/bin"
    cat "$pack/BUILD_INFO" 2>/dev/null
    echo "torch: $torch ($(grep -m1 '^__version__' "$torch/version.py" 2>/dev/null)); python: $python"
    grep -q "__version__ = '2.11.0" "$torch/version.py" 2>/dev/null ||
        echo "WARNING: the binaries were linked against torch 2.11.0"
    local nccl_lib="$torch/../nvidia/nccl/lib/libnccl.so.2"
    [ -f "$nccl_lib" ] && echo "libnccl: $(readlink -f "$nccl_lib")" || echo "WARNING: no $nccl_lib"
    command -v nvidia-smi >/dev/null && nvidia-smi -L
    ngpu="${NGPU:-$ngpu}"
    echo "GPUs: $ngpu"

    export LIBTORCH="$torch" RINGSIDE_REQUIRE_CUDA=1
    export RINGSIDE_TIMEOUT="${RINGSIDE_TIMEOUT:-120}" RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
    unset LOCAL_RANK
    # Only the libraries carried beside the binaries (Gloo, OpenMPI): NCCL is
    # found through LIBTORCH; the binaries linked to torch add torch's own.
    export LD_LIBRARY_PATH="$pack/lib"
    local with_torch="$torch/lib:$pack/lib"
    local data="$pack/data"

    local failed=() verdicts=()
    step() {
        local name=$1
        shift
        echo
        echo "== $name"
        local t0=$SECONDS
        if "$@"; then
            echo "== $name: PASSED ($((SECONDS - t0)) s)"
            verdicts+=("| $name | passed | $((SECONDS - t0)) s |")
        else
            local rc=$?
            echo "== $name: FAILED (exit $rc, $((SECONDS - t0)) s)"
            verdicts+=("| $name | **FAILED** (exit $rc) | $((SECONDS - t0)) s |")
            failed+=("$name")
        fi
    }
    # Each test uses every GPU: one at a time.
    step "collectives nccl tests" "$bin/collectives-nccl-tests" --test-threads=1
    step "trainers CUDA test" env LD_LIBRARY_PATH="$with_torch" \
        "$bin/trainers-tests" cuda_tensor_op_or_visible_skip --test-threads=1
    step "ringside conformance --backend nccl --nproc $ngpu" \
        "$bin/ringside" conformance --backend nccl --nproc "$ngpu"

    # d. ringside-train against PyTorch on GPU 0, same job, rounds interleaved so
    # that a slow moment falls on all three alike.
    mkdir -p "$out/train"
    local steps="${TRAIN_STEPS:-300}" rounds="${ROUNDS:-2}" batch round
    train_one() { # NAME BATCH ROUND COMMAND...: one JSON line into train/NAME-bBATCH-rROUND.json
        local file="$out/train/$1-b$2-r$3.json"
        shift 3
        CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "$@" | grep '^{' | tail -n1 >"$file"
        local rc=${PIPESTATUS[0]}
        [ "$rc" -eq 0 ] && [ -s "$file" ] && cat "$file"
    }
    for batch in ${TRAIN_BATCHES:-64 512}; do
        # TRAIN_STEPS steps over as many epochs (60,000 examples each) as they
        # take: at batch 512 one epoch is only 117 steps, a quarter of a second.
        local n=$steps per_epoch=$((60000 / batch))
        local epochs=$(((n + per_epoch - 1) / per_epoch))
        for round in $(seq 1 "$rounds"); do
            step "ringside-train --backend nccl --nproc 1 --batch $batch (round $round)" \
                train_one ringside "$batch" "$round" env LD_LIBRARY_PATH="$with_torch" \
                "$bin/ringside-train" --backend nccl --nproc 1 --batch "$batch" --steps "$n" \
                --epochs "$epochs" --warmup 5 --data "$data" --no-eval --json
            step "PyTorch DDP nccl, batch $batch (round $round)" \
                train_one ddp "$batch" "$round" "$python" "$here/benches/ddp_torch.py" \
                --device cuda --batch "$batch" --steps "$n" --epochs "$epochs" --warmup 5 --data "$data"
            step "PyTorch eager, batch $batch (round $round)" \
                train_one eager "$batch" "$round" "$python" "$here/benches/ddp_torch.py" \
                --device cuda --mode eager --batch "$batch" --steps "$n" --epochs "$epochs" --warmup 5 \
                --data "$data"
        done
    done
    local table
    table=$("$python" - "$out/train" <<'PY'
import glob, json, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name, b, r = os.path.basename(path)[:-5].split("-")
    try:
        with open(path) as f:
            sps = json.loads(f.read())["samples_per_s"]
    except (ValueError, KeyError):
        continue
    rows.setdefault(int(b[1:]), {}).setdefault(name, {})[int(r[1:])] = sps
print("| batch | ringside-train (nccl, world 1) | PyTorch DDP (nccl, world 1) | PyTorch eager | ratio vs DDP | ratio vs eager |")
print("|---|---|---|---|---|---|")
for b in sorted(rows):
    c = rows[b]
    runs = sorted(set().union(*[set(v) for v in c.values()]))
    def col(k):
        return " / ".join(f"{c[k][r]:,.0f}" if r in c.get(k, {}) else "-" for r in runs)
    def ratio(k):
        return " / ".join(
            f"{c['ringside'][r] / c[k][r]:.2f}" if r in c.get("ringside", {}) and r in c.get(k, {}) else "-"
            for r in runs
        )
    print(f"| {b} | {col('ringside')} | {col('ddp')} | {col('eager')} | {ratio('ddp')} | {ratio('eager')} |")
PY
)
    echo
    echo "samples/s, one value per round:"
    echo "$table"

    # d2. What a step costs, ours against eager, from one profiled run of each.
    local prof_n="${PROFILE_STEPS:-10}" profile="$out/profile.md"
    step "profile: ringside-train and PyTorch eager at batch 64, $prof_n steps" \
        profile_both "$prof_n" "$profile"

    # e. The labs' GPU paths, the reference solutions, results under $out/results.
    local lab
    for lab in lab02-baseline lab04-data-parallel lab05-model-parallel; do
        # shellcheck disable=SC2086 # LABS_ARGS is a list of flags
        step "$lab" env LD_LIBRARY_PATH="$with_torch" RINGSIDE_LAB_SOLUTION=1 \
            RINGSIDE_RESULTS_DIR="$out/results" timeout "${LAB_TIMEOUT:-300}" \
            "$bin/$lab" --data "$data" ${LABS_ARGS:-} >"$out/$lab.log" 2>&1
        sed 's/^/    /' "$out/$lab.log"
    done

    # f. Gloo against torch's gloo on this node's CPUs (the GPU plays no part):
    # idle and beside busy loops, GLOO_RUNS entries of LOAD[@CPUS], e.g.
    # "0 16 2@0,1": no load; 16 busy loops; 2 busy loops with the whole run
    # (ranks, peer and loops) held to CPUs 0 and 1 by taskset, a 2-core laptop
    # on this node. Empty skips the step.
    local run load cpus gloo_log="$out/gloo.log"
    : >"$gloo_log"
    for run in ${GLOO_RUNS-0 16 2@0,1}; do
        load=${run%%@*}
        cpus=
        [ "$run" != "$load" ] && cpus=${run#*@}
        step "Gloo against torch's gloo, --load $load${cpus:+, CPUs $cpus}" \
            gloo_vs_torch "$load" "$cpus" "$gloo_log"
    done

    {
        echo "# ringside GPU check, $(date -u +%F)"
        echo
        echo "$(uname -n); $(nvidia-smi -L 2>/dev/null | head -n1); torch $(grep -m1 '^__version__' "$torch/version.py" 2>/dev/null | cut -d"'" -f2)."
        sed 's/^/    /' "$pack/BUILD_INFO" 2>/dev/null
        echo
        echo "| step | verdict | time |"
        echo "|---|---|---|"
        printf '%s\n' "${verdicts[@]}"
        echo
        echo "## ringside-train against PyTorch on one GPU (samples/s, one value per round)"
        echo
        echo "$table"
        echo
        echo "## One step, ringside-train against PyTorch eager (batch 64, profiled)"
        echo
        cat "$out/profile.md" 2>/dev/null || echo "no profile (see the log)"
        echo
        echo "## Lab 2's GPU step against PyTorch eager (batch 64, samples/s)"
        echo
        lab2_vs_eager "$out"
        echo
        echo "## Lab 5: GPipe's bubble against the model"
        echo
        echo '```'
        sed -n "/GPipe's bubble against the model/,/^With the costs/p" "$out/lab05-model-parallel.log"
        echo '```'
        echo
        echo "## Gloo against torch's gloo on this node's CPUs"
        echo
        echo '```'
        # Each run's command and its side-by-side table.
        awk '/^== gloo:/ { print; n++ } /^# gloo vs torch-gloo/ { on = 1 } on { print } /^# worst ratio/ { on = 0 }
            END { if (!n) print "no Gloo runs (GLOO_RUNS empty)" }' "$gloo_log"
        echo '```'
        echo
        echo "## Figures"
        echo
        find "$out/results" -name '*.svg' 2>/dev/null | sort | sed "s|^$out/|- |"
    } >"$out/summary.md"
    echo
    echo "gpu-check: summary in $out/summary.md"
    rm -rf "$(dirname "$bin")"
    if [ ${#failed[@]} -eq 0 ]; then
        echo "gpu-check: all passed"
        return 0
    fi
    echo "gpu-check: FAILED: ${failed[*]}"
    return 1
}

case "${1:-}" in
build)
    shift
    build "$@"
    ;;
size) report_size ;;
run)
    shift
    if [ -n "${OUT:-}" ]; then
        # The device `run` tool hands back at most 8 files, 2 folders deep: the
        # log and the summary as they are, everything else in one archive.
        mkdir -p "$OUT" || die "cannot create $OUT"
        out=$(mktemp -d "${TMPDIR:-/tmp}/ringside-gpu-check-out.XXXXXX") || die "no temporary folder"
        run_checks "$out" "$@" 2>&1 | tee -a "$out/gpu-check.log"
        rc=${PIPESTATUS[0]}
        cp "$out/gpu-check.log" "$out/summary.md" "$OUT/" 2>/dev/null
        tar -C "$out" -czf "$OUT/details.tar.gz" --exclude=gpu-check.log . &&
            echo "gpu-check: the training runs' JSON, the labs' logs and results are in \$OUT/details.tar.gz"
        exit "$rc"
    fi
    out="$here/target/gpu-check-out/$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$out" || die "cannot create $out"
    run_checks "$out" "$@" 2>&1 | tee -a "$out/gpu-check.log"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
    ;;
esac
