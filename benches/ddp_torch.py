#!/usr/bin/env python3
"""ddp_torch.py: PyTorch DistributedDataParallel (gloo on the CPU, nccl on a GPU), or plain eager PyTorch, on the same job as
`ringside-train`, for a like-for-like throughput and accuracy comparison.

Same model (the CNN of trainers/src/models.rs: Conv(1->32,3) ReLU MaxPool2
Conv(32->64,3) ReLU MaxPool2 Flatten Linear(1600->128) ReLU Linear(128->10)),
same initialisation (tch's defaults, see Cnn; --init torch for PyTorch's), same data (Debian's Fashion-MNIST IDX files, normalised with the same mean and
std, held in memory as one tensor), same sampler (DistributedSampler, shuffled,
seed, set_epoch), same batches (`batch` consecutive indices of the sampler,
gathered with index_select), SGD lr 0.01*world momentum 0.9, one intra-op thread
per rank, and the same timing rule as ringside-train (trainers::train::window):
wall-clock time over the steps after the first `--warmup` (and the profiled
ones), with the device synchronised where that window opens and where it
closes, samples of all ranks. Test accuracy is over the whole test set,
evaluated on rank 0.

On a GPU (`--device cuda`, as `ringside-train --backend nccl`) each rank uses
GPU LOCAL_RANK (mod the GPU count), the data set is held on the GPU and DDP uses
nccl. The steps are not synchronised one by one (until 2026-11 each timed step
ended with torch.cuda.synchronize(), which drained the device's queue every step
and so timed something ringside-train does not). `--mode eager` trains the plain model with no
DDP wrapper and no process group (one rank only): what PyTorch itself costs.
`--channels-last` lays the convolution weights out channels-last, as
ringside-train does on the CPU (oneDNN's NHWC kernels, much faster there).

Run plainly it spawns `--nproc` ranks (torch.multiprocessing); under torchrun it
joins (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0 prints one JSON line:

    .ringside/venv/bin/python benches/ddp_torch.py --nproc 2 --steps 200
    python benches/ddp_torch.py --device cuda --batch 512 --steps 300
    python benches/ddp_torch.py --device cuda --mode eager --steps 300
"""

import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.2860, 0.3530  # trainers::data::{MEAN, STD}
DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    opener = gzip.open if os.path.exists(path + ".gz") else open
    name = path + ".gz" if os.path.exists(path + ".gz") else path
    with opener(name, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(dims)


def load(dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(dir, f"{prefix}-labels-idx1-ubyte"))
    # The same scale-then-shift as trainers::data (bit-identical inputs).
    x = images.reshape(-1, 1, 28, 28).float()
    x.mul_(1.0 / (255.0 * STD)).sub_(MEAN / STD)
    return x, labels.long()


class Cnn(nn.Module):
    def __init__(self, init="tch"):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)
        if init == "tch":
            # tch's defaults, which the Rust model gets: weights Kaiming-uniform
            # for ReLU (bound sqrt(6/fan_in), 2.45x PyTorch's 1/sqrt(fan_in)),
            # conv biases 0, linear biases U(+-1/sqrt(fan_in)) as in PyTorch.
            with torch.no_grad():
                for m in (self.conv1, self.conv2, self.fc1, self.fc2):
                    nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
                    if isinstance(m, nn.Conv2d):
                        m.bias.zero_()

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def device_of(args, rank):
    """The rank's device: the CPU, or GPU LOCAL_RANK (else the rank) mod the GPU count."""
    if args.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("ddp_torch.py: --device cuda needs a CUDA GPU; torch.cuda.is_available() is False")
    local = int(os.environ.get("LOCAL_RANK", rank))
    return torch.device("cuda", local % torch.cuda.device_count())


def worker(rank, world, args):
    torch.set_num_threads(args.threads)
    device = device_of(args, rank)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    backend = args.backend or ("nccl" if cuda else "gloo")
    ddp = args.mode == "ddp"
    if ddp:
        dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    train_x, train_y = (t.to(device) for t in load(args.data, "train"))
    test_x, test_y = (t.to(device) for t in load(args.data, "test"))
    net = Cnn(args.init).to(device)
    if args.channels_last:
        # As ringside-train's optimizer lays out conv weights on the CPU.
        net = net.to(memory_format=torch.channels_last)
    model = DDP(net, bucket_cap_mb=args.bucket_cap_mb) if ddp else net
    lr = args.lr if args.lr is not None else 0.01 * world
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    sampler = DistributedSampler(range(len(train_y)), num_replicas=world, rank=rank, seed=args.seed)
    step, timed_s, timed_steps, window = 0, 0.0, 0, None
    global_batch = args.batch * world
    profiled = args.profile_steps if args.profile else 0
    timed_from = args.warmup + profiled
    prof = None

    def sync():
        # CUDA kernels run asynchronously: the window ends when the GPU is done.
        if cuda:
            torch.cuda.synchronize(device)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        indices = torch.tensor(list(iter(sampler)), dtype=torch.long, device=device)
        for b in range(0, len(indices), args.batch):
            if step >= args.steps:
                break
            if step >= timed_from and window is None:
                sync()
                window = time.perf_counter()
            if args.profile and rank == 0 and step == args.warmup:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if cuda:
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                prof = torch.profiler.profile(activities=activities)
                prof.start()
            idx = indices[b : b + args.batch]
            x, y = train_x.index_select(0, idx), train_y.index_select(0, idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if window is not None:
                timed_steps += 1
            if prof is not None and step == args.warmup + profiled:
                sync()
                prof.stop()
                prof.export_chrome_trace(args.profile)
                print(f"profile of steps {args.warmup + 1}-{step} written to {args.profile}", file=sys.stderr)
                prof = None
        if step >= args.steps:
            break
    if window is not None:
        sync()
        timed_s = time.perf_counter() - window
    acc = None
    if rank == 0:
        model.eval()
        with torch.no_grad():
            correct = 0
            for b in range(0, len(test_y), 1000):
                logits = net(test_x[b : b + 1000])
                correct += (logits.argmax(-1) == test_y[b : b + 1000]).sum().item()
        acc = correct / len(test_y)
    if ddp:
        dist.barrier()
    if rank == 0:
        print(
            json.dumps(
                {
                    "impl": "torch",
                    "mode": args.mode,
                    "device": str(device),
                    "gpu": torch.cuda.get_device_name(device) if cuda else None,
                    "backend": backend if ddp else None,
                    "model": "cnn",
                    "world_size": world,
                    "batch_per_rank": args.batch,
                    "steps": step,
                    "timed_steps": timed_steps,
                    "samples_per_s": timed_steps * global_batch / timed_s if timed_s > 0 else 0.0,
                    "test_accuracy": acc,
                    "threads": args.threads,
                    "torch": torch.__version__,
                    "init": args.init,
                }
            ),
            flush=True,
        )
    if ddp:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=1, help="ranks to spawn (ignored under torchrun)")
    p.add_argument("--data", default=DEFAULT_DIR, help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank")
    p.add_argument("--lr", type=float, default=None, help="learning rate [0.01 x world]")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=10**9, help="stop after this many steps")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--init",
        choices=["tch", "torch"],
        default="tch",
        help="initialise like tch (as ringside-train does) or with PyTorch's defaults",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train")
    p.add_argument(
        "--backend",
        choices=["gloo", "nccl"],
        default=None,
        help="DDP's process group [gloo on the CPU, nccl on a GPU]",
    )
    p.add_argument(
        "--profile",
        metavar="FILE.json",
        help="record --profile-steps steps after the warm-up with torch.profiler (CPU ops and, on a GPU, "
        "kernels) and write them here as a Chrome trace (rank 0); those steps are left out of the timing",
    )
    p.add_argument("--profile-steps", type=int, default=10, help="steps --profile records")
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="convolution weights channels-last (model.to(memory_format=torch.channels_last)), "
        "as ringside-train lays them out on the CPU",
    )
    p.add_argument(
        "--mode",
        choices=["ddp", "eager"],
        default="ddp",
        help="DDP, or the plain model with no DDP and no process group (one rank)",
    )
    args = p.parse_args()
    if args.mode == "eager" and (args.nproc != 1 or int(os.environ.get("WORLD_SIZE", "1")) != 1):
        p.error("--mode eager trains one process: leave --nproc at 1 (and run it without torchrun)")
    if "RANK" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    if args.nproc == 1:
        worker(0, 1, args)
    else:
        torch.multiprocessing.spawn(worker, args=(args.nproc, args), nprocs=args.nproc)


if __name__ == "__main__":
    sys.exit(main())
