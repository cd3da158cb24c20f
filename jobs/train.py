#!/usr/bin/env python3
"""Training examples for the images: DDP, FSDP or DeepSpeed on the sites' seed models.

Runs inside the container images, so it needs torch (and deepspeed for ``--example deepspeed``)
and the standard library only.  It reproduces the sites' published examples in one script:

* LUMI: a vision transformer trained with DeepSpeed (``--model vit --example deepspeed``);
* Olivia: WideResNet on CIFAR-100 with DDP and mixed precision (``--model wideresnet``);
* CSC: a ConvNet on MNIST with DDP or DeepSpeed (``--model cnn``);
* NCAR: a ResNet with DDP or FSDP (``--model resnet --example fsdp``).

Launch one process per GPU (or per CPU rank with gloo)::

    torchrun --standalone --nproc-per-node 4 train.py --example ddp --model wideresnet --out res/
    srun python train.py --example fsdp ...     # with MASTER_ADDR / MASTER_PORT exported
    deepspeed train.py --example deepspeed ...  # the deepspeed launcher works too

``--batch-size`` is the GLOBAL batch: each rank gets batch / world_size per step (error if it does
not divide), so results at different scales are comparable.  Data are synthetic and learnable
unless ``--data DIR`` points at the unpacked CIFAR-100 / MNIST files; nothing is downloaded.

Rank 0 prints one line per epoch (time, loss, accuracy, validation loss and accuracy,
throughput in samples/s over all ranks and per GPU, peak memory), then a summary, and writes
``OUT/train.json`` (atomic; rewritten after every epoch, final once ``finished`` is set).

The fast path is on by default where it is safe (``--channels-last``, ``--data-on-device``: on
for a GPU, off on the CPU, every piece testable on the CPU with ``on``); ``--compile`` is asked
for.  Each choice, and why, is printed in the header and recorded under ``fast_path``; how
mixed precision is done (``mixed_precision``: ``autocast-bf16``, ``fsdp-policy-bf16``,
``deepspeed-bf16``, ``none``...) likewise, with ``logits_dtype`` as the proof of what the forward
computed in.  See ``trainloop`` and ``dsconfig`` for the reasons behind each.

After training, the full parameters are fingerprinted on every rank (gathered first for FSDP
and ZeRO-3) and compared: ``params_consistent`` says whether all ranks hold the same model.

Every rank pins itself to its ``--rank-cores`` and writes ``OUT/device-<RANK>.json`` (what it runs
on) before the process group exists; ``train.json``'s ``ranks`` lists those probes of all ranks.

Exit status: 0 ok; 1 the run finished but did not hold up (ranks disagree on the parameters,
non-finite loss); 2 bad command line, config or data; 3 any other error; 4 no usable GPU of the
kind ``--expect-gpu`` names.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

import choices
import data as data_mod
import devices
import distenv
import dsconfig
import models
import trainloop
import workload
from trainreport import FastPath, TrainReport
from workload import EXIT_FAILED, EXIT_OK, ScriptUsageError

DEFAULT_DATASET = {"cnn": "mnist", "vit": "cifar100", "wideresnet": "cifar100",
                   "resnet": "cifar100"}
#: The models that are convolutional all the way: channels_last pays off for them on a GPU; the
#: ViT has one convolution (its patch embedding) and would pay the layout changes for nothing.
CONV_MODELS = ("wideresnet", "cnn", "resnet")
SWITCH = ("auto", "on", "off")
DS_CONFIG_DIR = Path(__file__).resolve().parent / "ds_config"
#: --optimizer: (class, default lr, its other settings); SGD's momentum is Olivia's example's.
OPTIMIZERS: dict[str, tuple[type[torch.optim.Optimizer], float, dict[str, float]]] = {
    "adamw": (torch.optim.AdamW, 1e-3, {}), "sgd": (torch.optim.SGD, 0.05, {"momentum": 0.9})}
#: DeepSpeed's side of a job: (config as fitted, its path, what was changed, precision plan).
DeepSpeedSetup = tuple[dict[str, Any], str, dict[str, Any], dsconfig.PrecisionPlan]


def build_parser() -> argparse.ArgumentParser:
    """The command line; every flag is documented because batch scripts are read by others."""
    parser = argparse.ArgumentParser(
        description="Distributed training example (DDP, FSDP or DeepSpeed) on synthetic or "
        "local CIFAR-100 / MNIST data, with per-epoch time, loss, accuracy and throughput.",
        epilog=workload.EPILOG.format(
            failed="run did not hold up (ranks disagree, non-finite loss)"))
    add_what_flags(parser)
    add_how_flags(parser)
    add_deepspeed_and_run_flags(parser)
    return parser


def add_what_flags(parser: argparse.ArgumentParser) -> None:
    """What is trained, on what data, for how long."""
    parser.add_argument(
        "--example", choices=choices.EXAMPLES, default="ddp",
        help="distribution strategy: ddp (DistributedDataParallel), fsdp (FSDP2 fully_shard), "
        "deepspeed (ZeRO, see --zero-stage / --ds-config) (default: %(default)s)")
    parser.add_argument(
        "--model", choices=choices.MODELS, default="cnn",
        help="vit (LUMI's vision transformer), wideresnet (Olivia's CIFAR-100 WRN), cnn (CSC's "
        "MNIST ConvNet), resnet (NCAR's ResNet) (default: %(default)s)")
    parser.add_argument(
        "--model-size", default="small",
        help="tiny (seconds per epoch on a CPU; for tests), small (the published shapes: "
        "ConvNet 16/32, WRN-16-4, ResNet-18, ViT dim 192 depth 6), base (ConvNet 32/64, "
        "WRN-28-10, ResNet-34, ViT dim 384 depth 12); wideresnet also takes DEPTH-WIDTH such as "
        "40-2 (default: %(default)s)")
    parser.add_argument(
        "--dataset", choices=data_mod.DATASET_NAMES, default=None,
        help="cifar100 (3x32x32, 100 classes) or mnist (1x28x28, 10 classes) (default: mnist "
        "for cnn, cifar100 for the others)")
    parser.add_argument(
        "--data", metavar="DIR", default=None,
        help="read the real dataset from DIR: CIFAR-100's python version (DIR/cifar-100-python/"
        "train, test) or MNIST's idx files (plain or .gz); nothing is downloaded (default: "
        "synthetic, learnable data)")
    workload.add_counts(parser, [
        ("--samples", workload.positive_int, 8192,
         "synthetic training set size (ignored with --data)"),
        ("--val-samples", workload.positive_int, 1024,
         "synthetic validation set size (ignored with --data)"),
        ("--epochs", workload.positive_int, 3, "number of epochs"),
        ("--num-workers", workload.non_negative_int, 0,
         "DataLoader worker processes per rank; the data are in memory and batches are sliced "
         "in one operation, so 0 is usually fastest"),
    ])
    parser.add_argument(
        "--target-accuracy", type=workload.fraction, default=None,
        help="stop early once the validation accuracy reaches this fraction, e.g. 0.95 "
        "(default: run all epochs)")


def add_how_flags(parser: argparse.ArgumentParser) -> None:
    """How it is trained: batch, optimizer, precision and the fast path."""
    parser.add_argument(
        "--batch-size", type=workload.positive_int, default=None,
        help="GLOBAL batch size per optimizer step, split evenly over the ranks; must be "
        "divisible by the world size (x gradient_accumulation_steps for DeepSpeed) (default: "
        "the seed preset's, e.g. 256 for --model-size olivia, else "
        f"{choices.TRAIN_DEFAULTS['batch_size']})")
    parser.add_argument(
        "--lr", type=workload.positive_float, default=None,
        help="learning rate (default: 1e-3 for adamw, 0.05 for sgd; for DeepSpeed the config "
        "file's optimizer.params.lr, which this overrides when given)")
    parser.add_argument(
        "--optimizer", choices=sorted(OPTIMIZERS), default=None,
        help="optimizer for ddp and fsdp, and for deepspeed when the config has no 'optimizer' "
        "section; sgd uses momentum 0.9 as Olivia's example (default: the seed preset's, e.g. "
        f"sgd with lr 0.01 for --model-size olivia, else {choices.TRAIN_DEFAULTS['optimizer']})")
    parser.add_argument(
        "--weight-decay", type=float, default=5e-4,
        help="weight decay for --optimizer (default: %(default)s)")
    parser.add_argument(
        "--precision", choices=trainloop.PRECISIONS, default="auto",
        help="auto: bf16 on GPUs that support it, else fp16 with a gradient scaler, fp32 on "
        "CPU; for deepspeed, auto keeps a config's own fp16/bf16/torch_autocast section; "
        "BatchNorm models compute under autocast (DeepSpeed's torch_autocast) rather than a "
        "wrapper's half-precision mode; bf16 works on the CPU too (default: %(default)s)")
    parser.add_argument(
        "--channels-last", choices=SWITCH, default="auto",
        help="input batches in channels_last (NHWC) memory format, and the model's weights "
        "under DDP (FSDP2 and DeepSpeed need contiguous parameters); auto: on for the conv "
        "nets (wideresnet, cnn, resnet) on a GPU, off on CPU and for the ViT "
        "(default: %(default)s)")
    parser.add_argument(
        "--data-on-device", choices=SWITCH, default="auto",
        help="keep the data on the training device and cut each batch there (no DataLoader, "
        "no host-to-device copy per step): synthetic data are generated there, --data is "
        "staged once; auto: on for a GPU when the set takes under a quarter of its free "
        "memory, off on CPU (the DataLoader path); on works on CPU too (default: %(default)s)")
    parser.add_argument(
        "--compile", action="store_true",
        help="torch.compile the model, static shapes (DDP: the DDP module; FSDP: each unit "
        "before fully_shard; DeepSpeed: engine.compile()); the first step's time, which "
        "compiles, is reported as compile_s and left out of epoch 1's throughput; validation "
        "runs eager (default: off)")


def add_deepspeed_and_run_flags(parser: argparse.ArgumentParser) -> None:
    """DeepSpeed's own, the seed, and the flags every workload takes."""
    parser.add_argument(
        "--zero-stage", type=int, choices=choices.ZERO_STAGES, default=None,
        help="DeepSpeed ZeRO stage: picks jobs/ds_config/zeroN.json, or overrides "
        "zero_optimization.stage of --ds-config (default: 1, or the config's stage)")
    parser.add_argument(
        "--ds-config", metavar="FILE", default=None,
        help="DeepSpeed config file (JSON; trailing commas as in LUMI's published file are "
        "accepted); its batch settings are replaced to match --batch-size and the world size "
        "(default: jobs/ds_config/zero<STAGE>.json)")
    parser.add_argument(
        "--ds-shm-comm", action=argparse.BooleanOptionalAction, default=False,
        help="let DeepSpeed build and load its CPU shared-memory all_reduce op "
        "(deepspeed_shm_comm): a ~50 s g++/ninja JIT build on first use, and a crash where no "
        "compiler exists; training never uses it (it serves tensor-parallel inference), so "
        "it is off by default")
    workload.add_counts(parser, [
        ("--seed", int, 0, "seed for the synthetic data, the initial weights and the shuffling; "
         "the same on every rank"),
    ])
    workload.add_common_flags(parser, out="train-results", writes="train.json", timeout_s=600)
    parser.add_argument(
        "--local_rank", "--local-rank", dest="launcher_local_rank", type=int, default=None,
        metavar="N",
        help="set by the deepspeed launcher; ignored: the local rank is read from LOCAL_RANK "
        "(or SLURM_LOCALID)")


def make_optimizer_factory(args: argparse.Namespace) -> tuple[trainloop.OptimizerFactory, float]:
    """A function from parameters to the --optimizer, so each strategy calls it after wrapping."""
    kind, default_lr, settings = OPTIMIZERS[args.optimizer]
    lr = args.lr if args.lr is not None else default_lr
    return functools.partial(kind, lr=lr, weight_decay=args.weight_decay, **settings), lr


def load_ds_config(args: argparse.Namespace, env: distenv.DistEnv, device: torch.device,
                   model: torch.nn.Module) -> DeepSpeedSetup:
    """The DeepSpeed config for this job, fitted to it, and its precision plan."""
    path = args.ds_config or str(DS_CONFIG_DIR / f"zero{args.zero_stage or 1}.json")
    on_cpu = device.type != "cuda"
    try:
        config = dsconfig.load_config(path)
        plan = dsconfig.plan_precision(
            config, None if args.precision == "auto" else args.precision, on_cpu=on_cpu,
            gpu_default=trainloop.resolve_precision("auto", device),
            has_batchnorm=trainloop.has_batchnorm(model))
        fitted, changes = dsconfig.fit_to_job(
            config, global_batch=args.batch_size, world_size=env.world_size, on_cpu=on_cpu,
            precision=plan, lr=args.lr, stage=args.zero_stage if args.ds_config else None)
    except dsconfig.DsConfigError as err:
        raise ScriptUsageError(str(err)) from err
    return fitted, path, changes, plan


def switch(flag: str, auto: tuple[bool, str]) -> tuple[bool, str]:
    """An on/off/auto flag: on or off as given; auto the (value, reason) worked out for it."""
    if flag == "auto":
        value, why = auto
        return value, f"auto: {why}"
    return flag == "on", f"{flag} as asked"


def choose_channels_last(args: argparse.Namespace, device: torch.device) -> tuple[bool, str]:
    if device.type != "cuda":
        auto = (False, "off on the CPU")
    elif args.model in CONV_MODELS:
        auto = (True, "a conv net on a GPU")
    else:
        auto = (False, f"{args.model} is not a conv net")
    return switch(args.channels_last, auto)


def load_data(args: argparse.Namespace, dataset: str, device: torch.device, notes: list[str]
              ) -> tuple[data_mod.ImageTensors, data_mod.ImageTensors, str, bool, str]:
    """(train, validation, source, device-resident, why) as ``--data-on-device`` asks.

    Synthetic data to be resident are generated on the device; real data are read on the host
    and staged on the device once.  auto checks first that the set fits (``fits_on_device``).
    """
    spec = data_mod.SPECS[dataset]
    synthetic = args.data is None
    on_gpu = device.type == "cuda"
    resident, why = switch(args.data_on_device, (
        (True, "a GPU") if on_gpu else (False, "off on the CPU, the DataLoader path")))
    too_big = "auto: off, the set would take over a quarter of the GPU's free memory"
    if resident and args.data_on_device == "auto" and synthetic and not data_mod.fits_on_device(
            data_mod.synthetic_nbytes(spec, args.samples, args.val_samples), device):
        resident, why = False, too_big
    try:
        train_set, val_set, source = data_mod.load_dataset(
            dataset, args.data, args.samples, args.val_samples, args.seed,
            device=device if resident and synthetic else torch.device("cpu"))
    except data_mod.DataError as err:
        raise ScriptUsageError(str(err)) from err
    if resident and not synthetic:
        if args.data_on_device == "auto" and not data_mod.fits_on_device(
                train_set.nbytes + val_set.nbytes, device):
            resident, why = False, too_big
        else:
            train_set, val_set = train_set.to(device), val_set.to(device)
    if resident:
        why += f"; {'generated' if synthetic else 'staged'} on {device}"
        if args.num_workers:
            notes.append(f"--num-workers {args.num_workers} unused: the batches are cut on the "
                         "device")
    return train_set, val_set, source, resident, why


@dataclass
class Prepared:
    """Everything a rank sets up before the process group exists (so a user's mistake fails
    every rank at once, instead of one rank waiting on another that already left)."""

    placement: workload.Placement
    dataset: str
    precision: str
    lr: Optional[float]
    make_optimizer: trainloop.OptimizerFactory
    model: torch.nn.Module
    ds_config: Optional[DeepSpeedSetup]  # None for ddp and fsdp
    channels_last: tuple[bool, str]
    train_set: data_mod.ImageTensors
    val_set: data_mod.ImageTensors
    source: str
    resident: tuple[bool, str]
    notes: list[str]


def prepare(args: argparse.Namespace, env: distenv.DistEnv) -> Prepared:
    placement = workload.place_rank(args, env)  # first: pinned before anything touches a GPU
    dataset = args.dataset or DEFAULT_DATASET[args.model]
    if args.batch_size % env.world_size:
        raise ScriptUsageError(f"--batch-size {args.batch_size} (global) is not divisible by the "
                               f"world size {env.world_size}")
    device = placement.device
    precision = trainloop.resolve_precision(args.precision, device)
    make_optimizer, lr = make_optimizer_factory(args)
    notes: list[str] = list(getattr(args, "preset_notes", []))
    model = build_model(args, data_mod.SPECS[dataset])
    ds_config = None
    if args.example == "deepspeed":
        ds_config = load_ds_config(args, env, device, model)
        config, _path, _changes, plan = ds_config
        if plan.compute != plan.asked:
            notes.append(f"--precision {plan.asked}: {plan.reason}")
        precision = plan.compute
        lr = config.get("optimizer", {}).get("params", {}).get("lr", lr)
        require_deepspeed()
    channels_last = choose_channels_last(args, device)
    train_set, val_set, source, resident, resident_why = load_data(args, dataset, device, notes)
    if len(train_set) < args.batch_size:
        raise ScriptUsageError(f"{len(train_set)} training samples are fewer than one global batch "
                               f"(--batch-size {args.batch_size}); raise --samples")
    return Prepared(placement=placement, dataset=dataset, precision=precision, lr=lr,
                    make_optimizer=make_optimizer, model=model, ds_config=ds_config,
                    channels_last=channels_last, train_set=train_set, val_set=val_set,
                    source=source, resident=(resident, resident_why), notes=notes)


def new_report(args: argparse.Namespace, env: distenv.DistEnv, ready: Prepared,
               strategy: trainloop.Strategy, ranks: list[dict[str, Any]],
               parameters: int, started: str) -> TrainReport:
    """The report as it stands before the first epoch (its results are filled in later)."""
    device = ready.placement.device
    hostnames = [info["hostname"] for info in ranks]
    from_config = ready.ds_config and ready.ds_config[0].get("optimizer")
    return TrainReport(
        example=args.example, model=args.model, model_size=args.model_size,
        model_name=models.describe_model(args.model, args.model_size), parameters=parameters,
        dataset=ready.dataset, data=ready.source, train_samples=len(ready.train_set),
        val_samples=len(ready.val_set), world_size=env.world_size,
        nodes=len(set(hostnames)), gpus=env.world_size if device.type == "cuda" else 0,
        hostnames=hostnames, ranks=ranks, launcher=env.launcher,
        backend=ready.placement.backend, device=device.type, expect_gpu=args.expect_gpu,
        device_name=distenv.describe_device(device), precision=ready.precision,
        global_batch_size=args.batch_size,
        optimizer="from ds_config" if from_config else args.optimizer, lr=ready.lr,
        seed=args.seed, epochs_requested=args.epochs, target_accuracy=args.target_accuracy,
        torch_version=torch.__version__, runtime=distenv.runtime_versions(),
        fast_path=FastPath(channels_last=ready.channels_last[0],
                           autocast=strategy.autocast_dtype, data_on_device=ready.resident[0],
                           compile=args.compile and strategy.compile_note is None),
        fast_path_reasons={"channels_last": ready.channels_last[1],
                           "data_on_device": ready.resident[1]},
        published_figures=models.published_figures(args.model, args.model_size), notes=ready.notes,
        started=started, **strategy.describe())


def train_and_check(trainer: trainloop.Trainer, report: TrainReport, say) -> int:
    """The epochs, then (when they all ran) whether every rank holds the same model."""
    try:
        trainer.run()
    except trainloop.RunFailed as err:
        report.error = str(err)
        say(f"FAILED: {err}")
        return EXIT_FAILED
    report.consistency = trainer.check_consistency()
    report.params_consistent = report.consistency["params_consistent"]
    if not report.params_consistent:
        report.error = "parameters differ across ranks after training"
    say(format_summary(report))
    return EXIT_OK if report.params_consistent else EXIT_FAILED


def run(args: argparse.Namespace, env: distenv.DistEnv) -> int:
    started = distenv.now_iso()
    ready = prepare(args, env)
    parameters = models.count_parameters(ready.model)  # before wrapping: FSDP, ZeRO-3 shard
    placement, device = ready.placement, ready.placement.device
    workload.join_group(env, placement.backend, args.timeout_s)
    ranks = devices.gather_ranks(placement.probe, device)
    ctx = trainloop.RunContext(
        env=env, device=device, precision=ready.precision, channels_last=ready.channels_last[0],
        compile=args.compile, epochs=args.epochs, global_batch=args.batch_size,
        target_accuracy=args.target_accuracy, seed=args.seed, num_workers=args.num_workers,
        out=Path(args.out), data_on_device=ready.resident[0])
    strategy = make_strategy(args, ctx, ready.ds_config)
    strategy.setup(ready.model, ready.make_optimizer)
    if strategy.compile_note:
        ready.notes.append(strategy.compile_note)
    report = new_report(args, env, ready, strategy, ranks, parameters, started)

    def say(line: str) -> None:
        if env.rank == 0:
            print(line, flush=True)

    trainer = trainloop.Trainer(ctx=ctx, strategy=strategy, train_set=ready.train_set,
                                val_set=ready.val_set, report=report, say=say)
    report.micro_batch_size = trainer.micro_batch
    say(format_header(report))
    for note in report.notes:
        say(f"# note: {note}")
    trainer.write_report()
    status = train_and_check(trainer, report, say)
    report.update(ok=status == EXIT_OK, finished=distenv.now_iso())
    trainer.write_report()
    # Free the wrapped model, its optimizer and any pending collective work while the process
    # group and the interpreter are still alive: FSDP's and DeepSpeed's objects form reference
    # cycles, and gloo work objects released only during interpreter shutdown can abort the
    # process ("terminate called without an active exception") after a successful run.
    del trainer, strategy, ready
    gc.collect()
    workload.finish(ctx.out, env, teardown=not args.no_teardown, status=status)
    return status


def build_model(args: argparse.Namespace, spec: data_mod.DatasetSpec) -> torch.nn.Module:
    """The model, seeded so that every rank starts from the same weights."""
    distenv.seed_everything(args.seed)
    try:
        return models.build_model(args.model, spec, args.model_size)
    except ValueError as err:
        raise ScriptUsageError(
            f"--model {args.model} --model-size {args.model_size}: {err}") from err


def require_deepspeed() -> None:
    try:
        import deepspeed  # noqa: F401  (here, so that a missing one fails every rank at once)
    except ImportError as err:
        raise ScriptUsageError(f"--example deepspeed needs the deepspeed package, which this "
                               f"Python ({sys.executable}) cannot import: {err}") from err


def make_strategy(args: argparse.Namespace, ctx: trainloop.RunContext,
                  ds_config: Optional[DeepSpeedSetup]) -> trainloop.Strategy:
    if args.example == "deepspeed":
        assert ds_config is not None
        return trainloop.DeepSpeedStrategy(ctx, *ds_config, shm_comm=args.ds_shm_comm)
    return {"ddp": trainloop.DDPStrategy, "fsdp": trainloop.FSDPStrategy}[args.example](ctx)


def on_off(value: bool) -> str:
    return "on" if value else "off"


def format_header(report: TrainReport) -> str:
    fast, why = report.fast_path, report.fast_path_reasons
    lines = [
        (f"# train: example {report.example}  model {report.model_name} "
         f"({report.parameters:,} parameters)  dataset {report.dataset}: {report.data}"),
        (f"# ranks {report.world_size}  nodes {report.nodes}  GPUs {report.gpus}  "
         f"launcher {report.launcher}  backend {report.backend}  device "
         f"{report.device_name}  precision {report.precision}"),
        (f"# global batch {report.global_batch_size} ({report.micro_batch_size} per rank "
         f"per micro-step)  optimizer {report.optimizer}  lr {report.lr}  "
         f"epochs {report.epochs_requested}  torch {report.torch_version}"),
        f"# mixed precision: {report.mixed_precision} ({report.mixed_precision_reason})",
        (f"# fast path: channels_last {on_off(fast.channels_last)} "
         f"({why['channels_last']}), data on device {on_off(fast.data_on_device)} "
         f"({why['data_on_device']}), compile {on_off(fast.compile)}, autocast "
         f"{fast.autocast or 'none'}, host sync {fast.host_sync}"),
    ]
    if report.example == "deepspeed":
        lines.append(f"# deepspeed {report.deepspeed_version}  ZeRO stage "
                     f"{report.zero_stage}  config {report.ds_config}  "
                     f"overrides {report.ds_config_overrides}")
        if report.zero_stage == 3:
            lines.append(f"# ZeRO-3 parameter tensors: {report.zero3_partitioned_params} "
                         f"partitioned, {report.zero3_persistent_params} persistent "
                         "(at or below stage3_param_persistence_threshold elements)")
    if report.example == "fsdp":
        lines.append(f"# {report.fsdp_api}  units {report.fsdp_units}")
    lines += devices.format_rank_lines(report.ranks)
    return "\n".join(lines)


def format_summary(report: TrainReport) -> str:
    consistency, final = report.consistency or {}, report.final
    assert final is not None and report.throughput is not None
    agree = "yes" if consistency["params_consistent"] else "NO"
    buffers = "yes" if consistency["buffers_consistent"] else "NO"
    per_device = trainloop.per_device_label(report.device)
    lines = [
        (f"Training complete. Final Loss: {final.loss:.4f}, Final Accuracy: "
         f"{final.accuracy:.4f}, Validation Accuracy: {final.val_accuracy:.4f}"),
        (f"Total Time: {report.total_time_s:.2f}s, Throughput: {report.throughput:.1f} "
         f"samples/s ({report.throughput_per_device:.1f} {per_device}), Epochs: "
         f"{report.epochs_run}/{report.epochs_requested}"),
        f"Total ranks: {report.world_size}, GPUs: {report.gpus}, nodes: {report.nodes}",
        (f"Parameters consistent across ranks: {agree} (sha256 "
         f"{consistency['param_sha256'][:16]}, checksum {consistency['param_checksum']:.6f}, "
         f"{consistency['method']}); buffers consistent: {buffers}"),
    ]
    lines += [f"Published for comparison (not a pass criterion): {figure}"
              for figure in report.published_figures]
    return "\n".join(lines)


def apply_presets(args: argparse.Namespace) -> list[str]:
    """Fill the flags left out from the seed preset (Olivia's batch, optimizer and lr), else
    the generic defaults; returns a note for each value a preset chose."""
    preset = choices.preset_defaults(args.model, args.model_size)
    notes = []
    for key in ("batch_size", "optimizer", "lr"):
        if getattr(args, key) is None:
            if key in preset:
                setattr(args, key, preset[key])
                notes.append(f"--{key.replace('_', '-')} {preset[key]} from the "
                             f"{args.model_size} preset (its guide's setting)")
            elif key in choices.TRAIN_DEFAULTS:
                setattr(args, key, choices.TRAIN_DEFAULTS[key])
    return notes


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.preset_notes = apply_presets(args)
    return workload.guarded_main("train.py", lambda env: run(args, env),
                                 teardown=not args.no_teardown)


if __name__ == "__main__":
    sys.exit(main())
