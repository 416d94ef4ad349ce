#!/usr/bin/env bash
# GPU checks for ringside, with binaries built elsewhere.
#
# GPU machines here have no Rust toolchain and no network, so this runs in two steps:
#
# 1. On the build machine (a clone with `cargo xtask setup` done), build and collect:
#
#        scripts/gpu-check.sh build
#
#    which runs, in release mode (line tables only, then `strip --strip-debug`):
#
#        cargo test  --release --no-run -p collectives --features nccl --test nccl
#        cargo test  --release --no-run -p trainers --lib
#        cargo build --release -p ringside --features collectives/nccl
#
#    takes the executables' paths from cargo's JSON messages, and copies them to
#    target/gpu-check/bin, with the shared libraries they need that a GPU
#    machine's image lacks (Gloo, OpenMPI and theirs: everything `ldd` names
#    except torch's and the C/C++ runtime) in target/gpu-check/lib (checked to
#    stay under 64 MiB, the carry limit).
#
# 2. Carry target/gpu-check into a checkout of the repo on the GPU machine (for the
#    device `run` tool: carry ["target/gpu-check"]) and run there:
#
#        scripts/gpu-check.sh run [TORCH_DIR]
#
#    TORCH_DIR is the `torch` folder of a pip-installed PyTorch 2.11 (CUDA build);
#    default $RINGSIDE_GPU_TORCH, else /opt/torch/.venv/lib/python3.12/site-packages/torch.
#    It runs, with RINGSIDE_REQUIRE_CUDA=1 (a missing GPU fails instead of skipping):
#      a. collectives' NCCL tests: the "no CUDA device" check becomes "not applicable",
#         NCCL is loaded from TORCH_DIR/../nvidia/nccl/lib via LIBTORCH (not
#         through LD_LIBRARY_PATH, which holds only the carried libraries), the full conformance suite runs on one GPU and on all GPUs
#         (ranks as threads), and a device-memory all_reduce;
#      b. trainers' CUDA tensor test (cuda_tensor_op_or_visible_skip), with
#         LD_LIBRARY_PATH=TORCH_DIR/lib because the binary's rpath names the build
#         machine's torch;
#      c. `ringside conformance --backend nccl --nproc N`, N = number of GPUs
#         (override with NGPU=...): the full matrix, one process per GPU.
#    Output goes to the terminal and to $OUT/gpu-check.log when $OUT is set.
#    Exit status: 0 when every step passed.
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

build() {
    cd "$here" || die "cannot enter $here"
    command -v python3 >/dev/null || die "python3 is needed to read cargo's JSON messages"
    rm -rf "$pack" && mkdir -p "$pack/bin" || die "cannot create $pack"
    local nccl trainers ringside
    nccl=$(cargo test --release --no-run -p collectives --features nccl --test nccl \
        --message-format=json | executables | tail -n1)
    trainers=$(cargo test --release --no-run -p trainers --lib \
        --message-format=json | executables | tail -n1)
    ringside=$(cargo build --release -p ringside --features collectives/nccl \
        --message-format=json | executables | grep '/ringside$' | tail -n1)
    [ -n "$nccl" ] && [ -n "$trainers" ] && [ -n "$ringside" ] ||
        die "a build failed (nccl=$nccl trainers=$trainers ringside=$ringside)"
    cp "$nccl" "$pack/bin/collectives-nccl-tests"
    cp "$trainers" "$pack/bin/trainers-tests"
    cp "$ringside" "$pack/bin/ringside"
    strip --strip-debug "$pack"/bin/* || die "strip failed"
    mkdir -p "$pack/lib" || die "cannot create $pack/lib"
    ldd "$pack"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libgcc_s|libstdc\+\+|libz)\.so|/torch/' |
        while read -r lib; do cp -L "$lib" "$pack/lib/" || die "cannot copy $lib"; done
    {
        echo "built: $(date -u +%FT%TZ) on $(uname -n)"
        echo "commit: $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
        echo "glibc: $(ldd --version 2>/dev/null | head -n1)"
        echo "torch at build: $(readlink -f .ringside/libtorch)"
    } >"$pack/BUILD_INFO"
    local kib
    kib=$(du -sk "$pack" | cut -f1)
    ls -l "$pack/bin"
    echo "gpu-check: $pack is $((kib / 1024)) MiB"
    [ "$kib" -lt $((64 * 1024)) ] || die "$pack is over 64 MiB"
}

run_checks() {
    local torch="${1:-${RINGSIDE_GPU_TORCH:-/opt/torch/.venv/lib/python3.12/site-packages/torch}}"
    local bin="$pack/bin"
    [ -x "$bin/ringside" ] || die "no binaries in $bin: run 'scripts/gpu-check.sh build' on the build machine and carry target/gpu-check"
    [ -f "$torch/lib/libtorch.so" ] || die "$torch is not a torch folder (no lib/libtorch.so); pass the torch folder as the argument"
    torch=$(cd "$torch" && pwd -P)
    echo "== gpu-check on $(uname -n), $(date -u +%FT%TZ)"
    cat "$pack/BUILD_INFO" 2>/dev/null
    echo "torch: $torch ($(grep -m1 '^__version__' "$torch/version.py" 2>/dev/null))"
    grep -q "__version__ = '2.11.0" "$torch/version.py" 2>/dev/null ||
        echo "WARNING: the trainers binary was linked against torch 2.11.0"
    local nccl_lib="$torch/../nvidia/nccl/lib/libnccl.so.2"
    [ -f "$nccl_lib" ] && echo "libnccl: $(readlink -f "$nccl_lib")" || echo "WARNING: no $nccl_lib"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L
    fi
    local ngpu="${NGPU:-}"
    if [ -z "$ngpu" ]; then
        ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
        [ "$ngpu" -gt 0 ] 2>/dev/null || ngpu=$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)
    fi
    [ "$ngpu" -gt 0 ] 2>/dev/null || ngpu=1
    echo "GPUs: $ngpu"

    export LIBTORCH="$torch" RINGSIDE_REQUIRE_CUDA=1
    export RINGSIDE_TIMEOUT="${RINGSIDE_TIMEOUT:-120}" RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
    unset LOCAL_RANK
    # Only the libraries carried beside the binaries (Gloo, OpenMPI): NCCL is
    # found through LIBTORCH, and the trainers step adds torch's own.
    export LD_LIBRARY_PATH="$pack/lib"

    local failed=()
    step() {
        local name=$1
        shift
        echo
        echo "== $name"
        local t0=$SECONDS
        if "$@"; then
            echo "== $name: PASSED ($((SECONDS - t0)) s)"
        else
            echo "== $name: FAILED (exit $?, $((SECONDS - t0)) s)"
            failed+=("$name")
        fi
    }
    # Each test uses every GPU: one at a time.
    step "collectives nccl tests" "$bin/collectives-nccl-tests" --test-threads=1
    step "trainers CUDA test" env LD_LIBRARY_PATH="$torch/lib:$pack/lib" \
        "$bin/trainers-tests" cuda_tensor_op_or_visible_skip --test-threads=1
    step "ringside conformance --backend nccl --nproc $ngpu" \
        "$bin/ringside" conformance --backend nccl --nproc "$ngpu"

    echo
    if [ ${#failed[@]} -eq 0 ]; then
        echo "gpu-check: all passed"
        return 0
    fi
    echo "gpu-check: FAILED: ${failed[*]}"
    return 1
}

case "${1:-}" in
build) build ;;
run)
    shift
    log=/dev/null
    [ -n "${OUT:-}" ] && log="$OUT/gpu-check.log"
    run_checks "$@" 2>&1 | tee -a "$log"
    ;;
*)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
    ;;
esac
