"""Side by side, in one run: train.py's DDP example vs a minimal hand-written DDP loop.

Both train the same model (``jobs/models.py``) on data of the same shape and sample count, with
the same global batch, ranks (torchrun, one process per GPU or gloo CPU ranks), precision (bf16
autocast on GPUs, fp32 on CPU), optimizer, channels_last and ``torch.compile`` settings:

* example: ``torchrun --standalone --nproc-per-node N jobs/train.py --example ddp ...`` with its
  fast-path flags (``--data-on-device on``, ``--channels-last``, ``--compile``) wherever
  ``train.py --help`` lists them; its ``train.json``;
* plain:   this file's ``--worker`` loop under the same torchrun: each rank's shard resident on
  its device, a fresh on-device permutation per epoch, then forward, loss, backward and step, with
  no host sync inside an epoch: what a careful user writes by hand.

Each side's throughput is its steady state: the mean samples/s (global) of the epochs after the
first, which pays for compilation, autotuning and cold caches.  The ratio example/plain is what
the example's generality costs (data loader, metrics, the record it keeps).  Goal: at least 0.95
on CPU and 0.9 on GPU; the benchmark reports the ratio, it does not judge it.

``--model`` and ``--model-size`` take comma lists (one size for every model, or one per model):
each pair is a configuration, a row of the table.  ``--repeat`` interleaves repetitions and keeps
each side's best.  Table on stdout, JSON at ``--out``, a PNG beside it.  Usage::

    python benchmarks/train_vs_plain.py                       # CPU, cnn tiny, 2 ranks, fp32
    python benchmarks/train_vs_plain.py --device cuda --ranks 1 --model wideresnet \\
        --model-size olivia --samples 50000 --compile         # Olivia's network, bf16
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from common import ROOT, report, run_checked

from containers.files import atomic_write_text
from containers.host.process import run
from containers.report import new_figure, save_figure

JOBS = ROOT / "jobs"
TRAIN = JOBS / "train.py"
GOALS = {"cpu": 0.95, "cuda": 0.9}
WEIGHT_DECAY = 5e-4  # passed to both sides: train.py's default
DEFAULT_BATCH_PER_RANK = 64


# ----------------------------------------------------------------------------------------------
# What the two sides share
# ----------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """One configuration as both sides run it (the worker reads it back from JSON)."""

    model: str
    model_size: str
    batch_size: int
    samples: int
    epochs: int
    ranks: int
    device: str
    precision: str  # as given to train.py (auto too); the plain loop gets what train.py chose
    channels_last: bool
    compile: bool
    seed: int = 0
    # Known only after the example ran: the plain loop copies what train.py chose.
    dataset: str = ""
    optimizer: str = ""
    lr: float = 0.0
    out: str = ""


@dataclass
class Side:
    """One side's measurements over all repetitions: per-epoch throughput, the best steady state."""

    runs: list[list[float]] = field(default_factory=list)
    best: float = 0.0

    def add(self, epochs: list[dict[str, Any]]) -> None:
        throughputs = [float(epoch["throughput"]) for epoch in epochs]
        self.runs.append(throughputs)
        self.best = max(self.best, steady_state(throughputs))


def steady_state(throughputs: list[float]) -> float:
    """The mean throughput of the epochs after the first (which compiles and warms up)."""
    if len(throughputs) < 2:
        raise ValueError("steady state needs at least 2 epochs: the first one only warms up")
    later = throughputs[1:]
    return sum(later) / len(later)


def jobs_module(name: str) -> ModuleType:
    """A module of ``jobs/`` imported as its scripts import it (siblings on the path meanwhile),
    so the plain loop builds the very model the example builds."""
    sys.path.insert(0, str(JOBS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(JOBS))


def torchrun(ranks: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}"]


# ----------------------------------------------------------------------------------------------
# The example
# ----------------------------------------------------------------------------------------------


def offered_flags() -> set[str]:
    """The options ``train.py --help`` lists (the fast-path flags may not exist yet)."""
    lines: list[str] = []
    result = run([sys.executable, str(TRAIN), "--help"], timeout=300, on_line=lines.append)
    if not result.ok:
        raise SystemExit("train.py --help failed:\n" + "\n".join(lines[-20:]))
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", "\n".join(lines)))


def fast_path(setup: Setup, offered: set[str]) -> tuple[list[str], list[str]]:
    """(the fast-path flags train.py takes, those it lacks that would change what it runs)."""
    wanted = [(["--data-on-device", "on"], True),
              (["--channels-last", "on" if setup.channels_last else "off"], setup.channels_last)]
    if setup.compile:
        wanted.append((["--compile"], True))
    passed: list[str] = []
    missing: list[str] = []
    for flag, matters in wanted:
        if flag[0] in offered:
            passed += flag
        elif matters:
            missing.append(" ".join(flag))
    return passed, missing


def example_argv(setup: Setup, flags: list[str], out: Path) -> list[str]:
    argv = [*torchrun(setup.ranks), str(TRAIN), "--example", "ddp", "--model", setup.model,
            "--model-size", setup.model_size, "--batch-size", str(setup.batch_size),
            "--samples", str(setup.samples), "--val-samples", str(setup.batch_size),
            "--epochs", str(setup.epochs), "--precision", setup.precision,
            "--weight-decay", str(WEIGHT_DECAY), "--seed", str(setup.seed), "--out", str(out),
            *flags]
    if setup.optimizer:
        argv += ["--optimizer", setup.optimizer]
    if setup.lr:
        argv += ["--lr", str(setup.lr)]
    if setup.device == "cuda":
        argv += ["--backend", "nccl", "--expect-gpu", gpu_kind()]
    else:
        argv += ["--backend", "gloo"]
    return argv


def gpu_kind() -> str:
    import torch

    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


# ----------------------------------------------------------------------------------------------
# The plain loop (``--worker``: one rank under torchrun)
# ----------------------------------------------------------------------------------------------


def _optimizer(setup: Setup, ddp):
    """train.py's optimizers: sgd with momentum 0.9 (as Olivia's train_ddp.py), else AdamW."""
    import torch

    if setup.optimizer == "sgd":
        return torch.optim.SGD(ddp.parameters(), lr=setup.lr, momentum=0.9,
                               weight_decay=WEIGHT_DECAY)
    return torch.optim.AdamW(ddp.parameters(), lr=setup.lr, weight_decay=WEIGHT_DECAY)


def _precision(setup: Setup, device):
    """The autocast context and (fp16 only) the gradient scaler of ``setup.precision``."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    autocast = (torch.autocast(device.type, dtype=dtypes[setup.precision])
                if setup.precision in dtypes else contextlib.nullcontext())
    scaler = torch.amp.GradScaler(device.type) if setup.precision == "fp16" else None
    return autocast, scaler


def _step(forward, inputs, labels, optimizer, autocast, scaler) -> None:
    """One optimizer step on one micro-batch, as a careful hand-written loop takes it."""
    import torch

    with autocast:
        loss = torch.nn.functional.cross_entropy(forward(inputs), labels)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _synthetic(setup: Setup, spec, shard: int, rank: int, device, memory):
    """This rank's shard of synthetic images and labels, on the device (seeded per rank)."""
    import torch

    generator = torch.Generator().manual_seed(setup.seed + rank)
    images = torch.randn(shard, spec.channels, spec.height, spec.width, generator=generator)
    images = images.to(device=device, memory_format=memory)
    labels = torch.randint(0, spec.classes, (shard,), generator=generator).to(device)
    return images, labels


def _epoch_record(setup: Setup, epoch: int, seconds: float, samples: int, rank: int) -> dict:
    """One epoch's entry of the output, printed by rank 0 as train.py prints it."""
    if rank == 0:
        print(f"Epoch {epoch + 1}/{setup.epochs}: Time={seconds:.2f}s, "
              f"Throughput={samples / seconds:.1f} samples/s", flush=True)
    return {"epoch": epoch + 1, "time_s": seconds, "samples": samples,
            "throughput": samples / seconds}


def plain_worker(config: Path) -> None:
    """Train as a careful hand-written loop does; rank 0 writes per-epoch throughput to out."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    data_mod, models = jobs_module("data"), jobs_module("models")
    setup = Setup(**json.loads(config.read_text()))
    rank, world, local = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    cuda = setup.device == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    spec = data_mod.SPECS[setup.dataset]
    torch.manual_seed(setup.seed)
    model = models.build_model(setup.model, models.InputSpec(
        spec.channels, spec.height, spec.width, spec.classes), setup.model_size)
    parameters = models.count_parameters(model)
    memory = torch.channels_last if setup.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory)
    ddp = DistributedDataParallel(model, device_ids=[local] if cuda else None)
    forward = torch.compile(ddp) if setup.compile else ddp
    optimizer = _optimizer(setup, ddp)
    autocast, scaler = _precision(setup, device)

    micro = setup.batch_size // world
    shard = setup.samples // world  # what DistributedSampler(drop_last=True) gives each rank
    steps = shard // micro
    images, labels = _synthetic(setup, spec, shard, rank, device, memory)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    epochs = []
    for epoch in range(setup.epochs):
        order = torch.randperm(shard, device=device)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * micro:(step + 1) * micro]
            inputs = images[index].contiguous(memory_format=memory)
            _step(forward, inputs, labels[index], optimizer, autocast, scaler)
        sync()
        elapsed = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the epoch ends with the slowest rank
        seconds = float(elapsed)
        epochs.append(_epoch_record(setup, epoch, seconds, steps * micro * world, rank))
    if rank == 0:
        atomic_write_text(Path(setup.out), json.dumps(
            {"parameters": parameters, "precision": setup.precision, "epochs": epochs}, indent=2))
    # As train.py does: free DDP's objects (reference cycles) and gloo's pending work while the
    # process group is alive; released at interpreter exit they can abort a finished rank
    # ("terminate called without an active exception").
    del forward, ddp, optimizer, model
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn",
                        help="comma list of vit, wideresnet, cnn, resnet (default: %(default)s)")
    parser.add_argument("--model-size", default="tiny",
                        help="comma list: one size for all models or one per model, e.g. tiny, "
                        "small, olivia, 16-4 (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="GLOBAL batch (default: the seed preset's, e.g. 256 for olivia, "
                        f"else {DEFAULT_BATCH_PER_RANK} per rank)")
    parser.add_argument("--samples", type=int, default=8192,
                        help="synthetic training samples (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs; at least 2, the first is warm-up (default: %(default)s)")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks: GPUs, or gloo CPU processes (default: %(default)s)")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                        help="auto: bf16 on GPUs that have it, else fp16; fp32 on CPU "
                        "(default: %(default)s)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: cuda when torch sees a GPU (default: %(default)s)")
    parser.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto",
                        help="auto: on for the conv nets on GPU, off on CPU and for the ViT "
                        "(default: %(default)s)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model on both sides")
    parser.add_argument("--repeat", type=int, default=1,
                        help="interleaved repetitions; each side keeps its best "
                        "(default: %(default)s)")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "results" / "bench" / "train_vs_plain.json",
                        help="JSON result file; the PNG goes beside it (default: %(default)s)")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch only warms up")
    return args


def setups(args: argparse.Namespace) -> list[Setup]:
    """The configurations: (model, size) pairs with everything resolved for this machine."""
    import torch

    models = jobs_module("models")
    names = args.model.split(",")
    sizes = args.model_size.split(",")
    if len(sizes) == 1:
        sizes *= len(names)
    if len(sizes) != len(names):
        raise SystemExit(f"--model-size names {len(sizes)} sizes for {len(names)} models")
    device = args.device
    if device == "auto":  # is_available() makes no CUDA context here: only the ranks use GPUs
        device = "cuda" if torch.cuda.is_available() else "cpu"
    result = []
    for name, size in zip(names, sizes, strict=True):
        preset = models.PRESET_DEFAULTS.get((name, size), {})
        batch = args.batch_size or preset.get("batch_size", DEFAULT_BATCH_PER_RANK * args.ranks)
        channels_last = args.channels_last == "on" or (
            args.channels_last == "auto" and device == "cuda" and name != "vit")
        result.append(Setup(
            model=name, model_size=size, batch_size=batch, samples=args.samples,
            epochs=args.epochs, ranks=args.ranks, device=device, precision=args.precision,
            channels_last=channels_last, compile=args.compile,
            optimizer=preset.get("optimizer", ""), lr=preset.get("lr", 0.0)))
    return result


def measure(setup: Setup, offered: set[str], repeat: int, tmp: Path) -> dict[str, Any]:
    """Run both sides ``repeat`` times, interleaved; the configuration's row of the JSON."""
    flags, missing = fast_path(setup, offered)
    for flag in missing:
        print(f"# note: train.py does not offer {flag}: the example runs without it", flush=True)
    label = f"{setup.model} {setup.model_size}"
    example, plain = Side(), Side()
    record: dict[str, Any] = {}
    for index in range(repeat):
        print(f"== {label}: repetition {index + 1}/{repeat}", flush=True)
        folder = tmp / f"{setup.model}-{setup.model_size}-{index}"
        run_checked(example_argv(setup, flags, folder / "example"), label=f"example {label}")
        record = json.loads((folder / "example" / "train.json").read_text())
        example.add(record["epochs"])
        plain_setup = Setup(**{**asdict(setup), "dataset": record["dataset"],
                               "precision": record["precision"],
                               "optimizer": record["optimizer"], "lr": record["lr"],
                               "out": str(folder / "plain.json")})
        config = folder / "plain-setup.json"
        atomic_write_text(config, json.dumps(asdict(plain_setup)))
        run_checked([*torchrun(setup.ranks), str(Path(__file__).resolve()), "--worker",
                     str(config)],
                    label=f"plain {label}")
        plain_record = json.loads((folder / "plain.json").read_text())
        if plain_record["parameters"] != record["parameters"]:
            raise SystemExit(f"{label}: the example trains {record['parameters']:,} parameters, "
                             f"the plain loop {plain_record['parameters']:,}: not the same model")
        plain.add(plain_record["epochs"])
    return {
        "model": setup.model, "model_size": setup.model_size,
        "model_name": record["model_name"], "parameters": record["parameters"],
        "dataset": record["dataset"], "batch_size": setup.batch_size, "samples": setup.samples,
        "epochs": setup.epochs, "ranks": setup.ranks, "device": setup.device,
        "device_name": record.get("device_name"), "precision": record["precision"],
        "channels_last": setup.channels_last,
        "compile": setup.compile, "optimizer": record["optimizer"], "lr": record["lr"],
        "example_flags": flags, "example_flags_missing": missing,
        "example": {"steady_throughput": example.best, "epoch_throughputs": example.runs},
        "plain": {"steady_throughput": plain.best, "epoch_throughputs": plain.runs},
        "ratio": example.best / plain.best,
        "goal": GOALS[setup.device],
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Example and plain steady-state throughput per configuration, the ratio over each pair."""
    labels = [f"{row['model']} {row['model_size']}\nbatch {row['batch_size']}" for row in rows]
    positions = range(len(rows))
    width = 0.38
    fig, ax = new_figure((max(6.0, 2.2 * len(rows)), 4.5))
    for offset, side, colour in ((-width / 2, "example", "tab:blue"),
                                 (width / 2, "plain", "tab:grey")):
        ax.bar([p + offset for p in positions], [row[side]["steady_throughput"] for row in rows],
               width, label="train.py example" if side == "example" else "plain loop",
               color=colour)
    for position, row in zip(positions, rows, strict=True):
        top = max(row["example"]["steady_throughput"], row["plain"]["steady_throughput"])
        ax.annotate(f"example/plain {row['ratio']:.2f} (goal >= {row['goal']})", (position, top),
                    ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(list(positions), labels)
    ax.set_xlim(-0.8, len(rows) - 0.2)
    ax.set_ylabel("steady-state samples/s (global)")
    ax.set_title(title)
    ax.margins(y=0.15)
    ax.legend(loc="lower right")
    ax.grid(True, axis="y", alpha=0.3)
    return save_figure(fig, path)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    if args.worker is not None:
        plain_worker(args.worker)
        return
    configurations = setups(args)
    offered = offered_flags()
    with tempfile.TemporaryDirectory(prefix="bench-train-plain-") as tmp:
        rows = [measure(setup, offered, args.repeat, Path(tmp)) for setup in configurations]
    first = rows[0]
    title = (f"DDP example vs plain loop, {first['ranks']} ranks on {first['device']} "
             f"({first['device_name']}), {first['precision']}"
             + (", compiled" if args.compile else "") + f", best of {args.repeat}")
    table_rows = [[row["model_name"], row["batch_size"], f"{row['parameters']:,}",
                   f"{row['example']['steady_throughput']:.1f}",
                   f"{row['plain']['steady_throughput']:.1f}", f"{row['ratio']:.3f}",
                   f">= {row['goal']}", ", ".join(row["example_flags_missing"]) or "-"]
                  for row in rows]
    report(title, ["model", "batch", "parameters", "example samples/s", "plain samples/s",
                   "example/plain", "goal", "train.py lacks"], table_rows, args.out,
           {"title": title, "repeat": args.repeat, "configurations": rows})
    print(f"plot: {plot(rows, args.out.with_suffix('.png'), title)}")


if __name__ == "__main__":
    main()
