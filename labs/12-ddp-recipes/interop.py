"""Lab 12's PyTorch side: checkpoints between PyTorch and ringside.

The lab's MLP as a torch.nn.Module with the same parameter names as
trainers::sync_bn::BnMlp (l0, bn0, l1, bn1, l2), safetensors files read and
written by the format's specification (an 8-byte little-endian header length,
a JSON header naming each tensor's dtype, shape and byte range, then the
bytes: the Python `safetensors` package is not in the lab's venv, and the
format is small enough to follow by hand), and the test-set evaluation in eval
mode.

  python interop.py write --out FILE ...   a model PyTorch trained briefly, saved;
                                           prints its own test accuracy
  python interop.py evaluate --file FILE   loads a ringside checkpoint; prints
                                           its test accuracy

Both print one JSON line: {"correct": N, "count": M, ...}.
"""

import argparse
import gzip
import json
import os
import struct
import sys

import torch
from torch import nn

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = bytearray(data[base + start : base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        b = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the spec pads the header to 8 bytes with spaces
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


class BnMlp(nn.Module):
    """Linear -> BatchNorm -> ReLU per hidden layer, then a linear head."""

    def __init__(self, sizes):
        super().__init__()
        self.n = len(sizes) - 1
        for i in range(self.n):
            setattr(self, f"l{i}", nn.Linear(sizes[i], sizes[i + 1]))
            if i + 1 < self.n:
                setattr(self, f"bn{i}", nn.BatchNorm1d(sizes[i + 1]))

    def forward(self, x):
        x = x.flatten(1)
        for i in range(self.n):
            x = getattr(self, f"l{i}")(x)
            if i + 1 < self.n:
                x = torch.relu(getattr(self, f"bn{i}")(x))
        return x


def load_split(data, prefix, mean, std):
    def read(name):
        path = os.path.join(data, name)
        opener = gzip.open if os.path.exists(path + ".gz") else open
        with opener(path + ".gz" if os.path.exists(path + ".gz") else path, "rb") as f:
            return f.read()

    images = read(f"{prefix}-images-idx3-ubyte")
    labels = read(f"{prefix}-labels-idx1-ubyte")
    n, rows, cols = struct.unpack(">III", images[4:16])
    x = torch.frombuffer(bytearray(images[16:]), dtype=torch.uint8).reshape(n, 1, rows, cols)
    y = torch.frombuffer(bytearray(labels[8:]), dtype=torch.uint8).to(torch.int64)
    return (x.to(torch.float32) / 255.0 - mean) / std, y


def evaluate(model, x, y, rows):
    # Batches of the same size as the lab's evaluation: the same kernels on
    # the same shapes.
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(y), rows):
            logits = model(x[start : start + rows])
            correct += int((logits.argmax(-1) == y[start : start + rows]).sum())
    return correct


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["write", "evaluate"])
    p.add_argument("--file", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--sizes", default="784,256,256,10")
    p.add_argument("--mean", type=float, required=True)
    p.add_argument("--std", type=float, required=True)
    p.add_argument("--rows", type=int, default=500)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--limit", type=int, default=None, help="evaluate the first N test images only")
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    model = BnMlp(sizes)
    x_test, y_test = load_split(args.data, "t10k", args.mean, args.std)
    if args.limit is not None:
        x_test, y_test = x_test[: args.limit], y_test[: args.limit]

    if args.command == "write":
        torch.manual_seed(0)
        model = BnMlp(sizes)
        x, y = load_split(args.data, "train", args.mean, args.std)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        model.train()
        for step in range(args.steps):
            rows = slice(step * 64 % (len(y) - 64), step * 64 % (len(y) - 64) + 64)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
            opt.step()
        # num_batches_tracked is PyTorch's own bookkeeping (used only when
        # BatchNorm's momentum is None); ringside's BnMlp has no such buffer.
        state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        write_safetensors(args.file, state)
        extra = {"dropped": sorted(k for k in model.state_dict() if k.endswith("num_batches_tracked"))}
    else:
        state = read_safetensors(args.file)
        result = model.load_state_dict(state, strict=False)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if not k.endswith("num_batches_tracked")]
        if unexpected or missing:
            sys.exit(f"{args.file} does not match the model: missing {missing}, unexpected {unexpected}")
        extra = {"loaded": len(state)}

    correct = evaluate(model, x_test, y_test, args.rows)
    print(json.dumps({"correct": correct, "count": len(y_test), **extra}))


if __name__ == "__main__":
    main()
