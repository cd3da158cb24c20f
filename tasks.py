"""Command line of the image build system: ``invoke --list`` shows the tasks.

Thin on purpose: each task turns its flags into a call into :mod:`containers.app` and maps the
tool's one error family to a one-line message and a non-zero exit (``invoke.Exit``).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from invoke import Exit, task

from containers import app
from containers.errors import ContainersError, UsageError, describe
from containers.image.plan import parse_build_args
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions

ROOT = Path(__file__).resolve().parent


def _project(c) -> app.Project:
    settings = c.config.get("containers", None) or {}
    return app.Project.load(ROOT, {key: settings[key] for key in settings})


def _user_errors(body):
    """One clear line and a non-zero exit for user errors; tracebacks only for real bugs."""
    @functools.wraps(body)
    def wrapper(c, *args, **kwargs):
        try:
            return body(c, *args, **kwargs)
        except ContainersError as exc:
            message, code = describe(exc)
            raise Exit(message, code=code) from exc
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None
        except BrokenPipeError:
            # The reader went away (`invoke build --dry-run | head`): stop quietly, as cat does.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=141) from None
    return wrapper


@task(help={"target": "only this target (and what it needs); default: everything"})
@_user_errors
def check(c, target=None):
    """Validate manifests, env specs, definitions and site profiles."""
    app.check_inputs(_project(c), target=target)


@task
@_user_errors
def targets(c):
    """List image targets: site, arch, GPU kind, builder, image, built or not, inputs hash."""
    app.targets_report(_project(c))


@task(
    iterable=["build_arg"],
    help={
        "target": "image target to build (recipes/<target>.yaml); bases are built first",
        "force": "rebuild this target even if its inputs are unchanged",
        "dry_run": "print the plan and the exact commands, run nothing",
        "build_arg": "KEY=VALUE build argument for the definition (repeatable)",
    },
)
@_user_errors
def build(c, target=None, force=False, dry_run=False, build_arg=None):
    """Build an image (and its bases) unless its inputs hash says it is up to date."""
    project = _project(c)
    app.build(project, target=target or project.settings.default_target, force=force,
              dry_run=dry_run, build_args=parse_build_args(build_arg or []))


@task(
    help={
        "target": "image to test; default: the detected site's default target, else cpu",
        "gpus": "ranks on this node: one per GPU, or CPU processes (gloo) where there is no GPU",
        "sizes": "message sizes MIN:MAX in bytes (K/M/G suffixes), doubling; or a comma list",
        "iters": "timed iterations per size",
        "warmup": "untimed warm-up iterations per size",
        "timeout": "seconds before every rank is stopped and the run fails",
        "dtype": "element type: float32, float16 or bfloat16",
        "cycles": "repeat the whole sweep this many times (a corruption soak, nccl-tests' -N); "
                  "any wrong value in any cycle fails, naming the cycles and sizes",
        "dry_run": "print the exact exec command, run nothing",
        "history": "show earlier runs (perflog) as a table and a PNG instead of running",
        "nodes": "inside a Slurm allocation: run on this many of its nodes (srun, one torchrun "
                 "per node); --gpus is then per node",
    },
)
@_user_errors
def smoke(c, target=None, gpus=2, sizes="1K:128M", iters=20, warmup=5, timeout=600.0,
          dtype="float32", cycles=1, dry_run=False, history=False, nodes=1):
    """all_reduce benchmark inside the image (nccl-tests style): algbw, busbw, #wrong, verdict."""
    if history:
        app.smoke_history(_project(c), target=target)
        return
    options = SmokeOptions(gpus=int(gpus), sizes=sizes, iters=int(iters), warmup=int(warmup),
                           timeout=float(timeout), dtype=dtype, cycles=int(cycles))
    app.prove(_project(c), target=target, options=options, dry_run=dry_run, nodes=int(nodes))


@task(
    help={
        "target": "image to train in; default: the detected site's default target, else cpu",
        "example": "ddp, deepspeed or fsdp",
        "model": "vit, wideresnet, cnn or resnet (default: cnn)",
        "model_size": "tiny (seconds per epoch on a CPU), small (default) or base; a seed's "
                      "own network: wideresnet olivia, vit lumi; wideresnet also takes "
                      "DEPTH-WIDTH such as 40-2",
        "gpus": "ranks on this node: one per GPU, or CPU processes (gloo) where there is no GPU",
        "epochs": "training epochs",
        "batch_size": "GLOBAL batch size, split evenly over the ranks (default: the seed "
                      "preset's, e.g. 256 for --model-size olivia, else 64)",
        "lr": "learning rate (default: the workload's)",
        "zero_stage": "DeepSpeed ZeRO stage 1, 2 or 3 (deepspeed only)",
        "ds_config": "DeepSpeed config file (JSON; trailing commas accepted)",
        "data": "local folder with CIFAR-100 (cifar-100-python/) or MNIST files; default: "
                "synthetic data shaped like the dataset",
        "samples": "synthetic training samples",
        "target_accuracy": "stop early once validation accuracy reaches this (0-1)",
        "scaling": "comma list of rank counts (e.g. 1,2,4): run each, report speedup + PNG",
        "compile": "torch.compile the model (its compile time is reported apart from the "
                   "epochs)",
        "timeout": "seconds before every rank is stopped and the run fails",
        "dry_run": "print the exact exec command(s), run nothing",
        "nodes": "inside a Slurm allocation: run on this many of its nodes (srun, one torchrun "
                 "per node); --gpus is then per node",
    },
)
@_user_errors
def train(c, example="ddp", target=None, model=None, model_size=None, gpus=2, epochs=3,
          batch_size=None, lr=None,
          zero_stage=1, ds_config=None, data=None, samples=None, target_accuracy=None,
          scaling=None, compile=False, timeout=1800.0, dry_run=False, nodes=1):
    """Train the DDP / DeepSpeed / FSDP example inside the image; loss, throughput, verdict."""
    options = TrainOptions(
        example=example, gpus=int(gpus), model=model, model_size=model_size, epochs=int(epochs),
        batch_size=int(batch_size) if batch_size else None,
        lr=float(lr) if lr is not None else None,
        zero_stage=int(zero_stage), ds_config=Path(ds_config) if ds_config else None,
        data=Path(data) if data else None, samples=int(samples) if samples else None,
        target_accuracy=float(target_accuracy) if target_accuracy is not None else None,
        compile=bool(compile), timeout=float(timeout))
    app.train(_project(c), target=target, options=options, scaling=scaling, dry_run=dry_run,
              nodes=int(nodes))


@task(
    help={
        "target": "image the job runs (or builds); default: the detected site's default target",
        "workload": "smoke, ddp, deepspeed, fsdp or build",
        "site": "the site whose scheduler, launcher, binds and environment the job uses; "
                "default: the target's own (the cpu image on a Slurm cluster: local-slurm)",
        "nodes": "nodes (one for build)",
        "gpus_per_node": "GPUs per node (default: all), or CPU ranks per node on CPU sites "
                         "(default: 2)",
        "time": "wall time HH:MM:SS (default: 00:30:00 smoke, 01:00:00 training, 02:00:00 build)",
        "account": "account (project) to charge",
        "partition": "partition or queue; default: the site's",
        "launcher": "override the site's launch pattern: torchrun, srun-per-gpu or "
                    "mpiexec-torchrun",
        "out": "write the script to this file (atomically) instead of printing it",
        "submit": "submit it (sbatch or qsub) and print the job id and where output goes",
        "nccl_debug": "NCCL_DEBUG=INFO in the container (which transport NCCL/RCCL picked)",
        "sizes": "smoke: message sizes MIN:MAX",
        "iters": "smoke: timed iterations per size",
        "cycles": "smoke: repeat the sweep this many times (corruption soak)",
        "model": "training: vit, wideresnet, cnn or resnet",
        "model_size": "training: tiny, small, base, or a seed's network (wideresnet olivia)",
        "epochs": "training: epochs",
        "batch_size": "training: GLOBAL batch size over all ranks of all nodes",
        "samples": "training: synthetic training samples",
    },
    auto_shortflags=False,
)
@_user_errors
def job(c, workload="smoke", target=None, site=None, nodes=1, gpus_per_node=None, time=None,
        account=None, partition=None, launcher=None, out=None, submit=False, nccl_debug=False,
        sizes="1K:128M", iters=20, cycles=1, model=None, model_size=None, epochs=3,
        batch_size=None,
        samples=None):
    """Batch job for a site (Slurm or PBS): smoke, training or an image build; print or submit."""
    counts: dict[str, int | None] = {}
    for flag, value in (("--gpus-per-node", gpus_per_node), ("--samples", samples)):
        try:
            counts[flag] = int(value) if value not in (None, "") else None
        except ValueError as exc:
            raise UsageError(f"{flag} takes a whole number (got {value!r})", flag=flag) from exc
    gpus, samples = counts["--gpus-per-node"], counts["--samples"]
    if workload == "smoke":
        options = SmokeOptions(gpus=gpus or 1, sizes=sizes, iters=int(iters), cycles=int(cycles))
    elif workload == "build":
        options = None
    else:
        options = TrainOptions(example=workload, gpus=gpus or 1, model=model,
                               model_size=model_size, epochs=int(epochs),
                               batch_size=int(batch_size) if batch_size else None,
                               samples=samples)
    app.job(_project(c), target=target, workload=workload, site=site, nodes=int(nodes),
            gpus_per_node=gpus, time=time, account=account, partition=partition,
            launcher=launcher, out=out, submit=submit, nccl_debug=nccl_debug, options=options)


@task(
    help={
        "target": "image target to publish (its built images/<target>.sif)",
        "dest": "site folder to publish into (catalogue.json, <target>/, modules/, keys/)",
        "version": "version name (letters, digits, . _ + -); default: <build date>-<inputs hash>",
        "sign": "sign the image with apptainer sign (keyring: containers.sign_keysdir, key "
                "containers.sign_keyidx)",
        "keep": "afterwards keep only the newest N versions of the target (never latest's); "
                "0: keep all",
        "group": "give published files to this group (default: containers.publish_group)",
        "force": "replace a version that is already published (recorded in the catalogue)",
        "skip_checks": "publish without apptainer test and smoke checks (loud warning, "
                       "recorded in the catalogue)",
    },
)
@_user_errors
def publish(c, target=None, dest=None, version=None, sign=False, keep=0, group=None,
            force=False, skip_checks=False):
    """Publish a checked image for a site: copy, checksum, sign, catalogue, Lmod module file."""
    app.publish(_project(c), target=target, dest=dest, version=version, sign=sign,
                keep=int(keep) or None, group=group, force=force, skip_checks=skip_checks)


@task(
    help={
        "dest": "site folder that invoke publish wrote",
        "target": "only this target's images; default: all",
    },
)
@_user_errors
def verify(c, dest=None, target=None):
    """Check published images: checksums, signatures, catalogue, latest and module files."""
    app.verify(_project(c), dest=dest, target=target)
