"""``invoke train``: the DDP / DeepSpeed / FSDP examples inside an image, and a scaling report.

The run goes through :mod:`containers.run.workload` (same exec composition, timeout and rank
accounting as smoke). The verdict asks what a person asks: did every rank finish, did the loss
fall, are the parameters the same on every rank afterwards. ``--scaling 1,2,4`` repeats the run at
several rank counts and reports speedup and efficiency (table, JSON, PNG).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from containers.errors import ConfigError, VerdictFailed
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.sites import Site
from containers.run.workload import (Outcome, Placement, Say, Workload, check_ranks,
                                     failure_reasons, plan_workload, run_workload)
from containers.settings import Settings

SCRIPT = "train.py"
EXAMPLES = ("ddp", "deepspeed", "fsdp")
MODELS = ("vit", "wideresnet", "cnn", "resnet")
DATA_MOUNT = "/opt/containers/data"
DS_CONFIG_MOUNT = "/opt/containers/ds_config.json"


@dataclass(frozen=True)
class TrainOptions:
    example: str
    gpus: int
    model: str | None = None
    model_size: str | None = None
    epochs: int = 3
    batch_size: int = 64
    lr: float | None = None
    zero_stage: int = 1
    ds_config: Path | None = None
    data: Path | None = None
    samples: int | None = None
    target_accuracy: float | None = None
    timeout: float = 1800.0


@dataclass(frozen=True)
class TrainResult:
    plan: Workload
    outcome: Outcome

    @property
    def report(self) -> dict | None:
        return self.outcome.report


def _validate(options: TrainOptions) -> None:
    if options.example not in EXAMPLES:
        raise ConfigError(f"--example must be one of {', '.join(EXAMPLES)} "
                          f"(got '{options.example}')", key="--example")
    if options.model is not None and options.model not in MODELS:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)} (got '{options.model}')",
                          key="--model")
    if options.zero_stage not in (1, 2, 3):
        raise ConfigError(f"--zero-stage must be 1, 2 or 3 (got {options.zero_stage})",
                          key="--zero-stage")
    if options.epochs < 1 or options.batch_size < 1:
        raise ConfigError("--epochs and --batch-size must be at least 1", key="--epochs")
    if options.batch_size % options.gpus:
        raise ConfigError(f"--batch-size {options.batch_size} is the global batch; it must "
                          f"divide evenly over {options.gpus} ranks", key="--batch-size")
    for flag, path, kind in (("--ds-config", options.ds_config, "file"),
                             ("--data", options.data, "folder")):
        if path is not None and not (path.is_file() if kind == "file" else path.is_dir()):
            raise ConfigError(f"{flag} {path}: no such {kind}", key=flag)


def plan_train(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
               options: TrainOptions, run_id: str, environ: Mapping[str, str] | None = None,
               strict: bool = True, placement: Placement | None = None) -> Workload:
    check_ranks(site, options.gpus)
    _validate(options)
    world = options.gpus * (placement.nodes if placement else 1)
    if options.batch_size % world:
        raise ConfigError(f"--batch-size {options.batch_size} is the global batch; it must "
                          f"divide evenly over {world} ranks", key="--batch-size")
    args = ["--example", options.example, "--epochs", str(options.epochs),
            "--batch-size", str(options.batch_size), "--out", settings.results_mount]
    if options.model:
        args += ["--model", options.model]
    if options.model_size:
        args += ["--model-size", options.model_size]
    if options.lr is not None:
        args += ["--lr", str(options.lr)]
    if options.samples is not None:
        args += ["--samples", str(options.samples)]
    if options.target_accuracy is not None:
        args += ["--target-accuracy", str(options.target_accuracy)]
    binds = []
    if options.example == "deepspeed":
        args += ["--zero-stage", str(options.zero_stage)]
        if options.ds_config is not None:
            binds.append(f"{options.ds_config.resolve()}:{DS_CONFIG_MOUNT}:ro")
            args += ["--ds-config", DS_CONFIG_MOUNT]
    if options.data is not None:
        binds.append(f"{options.data.resolve()}:{DATA_MOUNT}:ro")
        args += ["--data", DATA_MOUNT]
    return plan_workload(target, site, settings=settings, runtime=runtime,
                         kind=f"train-{options.example}", script=SCRIPT, args=args,
                         ranks=options.gpus, timeout=options.timeout, run_id=run_id,
                         report_name="train.json", extra_binds=binds, environ=environ,
                         strict=strict, placement=placement)


def run_train(plan: Workload, *, say: Say) -> TrainResult:
    return TrainResult(plan=plan, outcome=run_workload(plan, say=say))


def verdict(result: TrainResult) -> list[str]:
    """Why a training run failed, one line per reason; empty when it passed."""
    reasons = failure_reasons(result.plan, result.outcome)
    report = result.report
    # The workload's own one-line diagnosis (a bad ds_config, missing data) says the most.
    reasons += [line.strip() for line in result.outcome.lines
                if line.strip().startswith("train.py: error:")][:1]
    if report is not None and report.get("error"):
        reasons.append(str(report["error"]))
    if result.outcome.returncode != 0 and not result.outcome.timed_out and not reasons:
        reasons.append(f"the training exited with code {result.outcome.returncode}")
    if report is None:
        if not reasons:
            reasons.append("no train.json was written")
        return reasons
    first, last = report.get("loss_first"), report.get("loss_last")
    if len(report.get("epochs") or []) < 2 and report.get("ok"):
        pass  # one epoch has no trend to judge; the run itself succeeded
    elif first is None or last is None or not last < first:
        reasons.append(f"the loss did not fall (first epoch {first}, last epoch {last})")
    if report.get("params_consistent") is False:
        reasons.append("model parameters differ across ranks after training")
    return reasons


def check(result: TrainResult) -> None:
    reasons = verdict(result)
    if reasons:
        raise VerdictFailed(f"train FAILED for {result.plan.target.name} ({result.plan.ranks} "
                          f"ranks): " + "; ".join(reasons)
                          + f" [log: {result.plan.out_dir / 'run.log'}]")


def parse_scaling(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"--scaling '{text}' is not a comma list of rank counts",
                          key="--scaling") from None
    if not counts or counts[0] < 1:
        raise ConfigError(f"--scaling '{text}' needs rank counts >= 1", key="--scaling")
    return counts


def scaling_rows(results: list[TrainResult]) -> list[dict]:
    """Throughput, speedup and efficiency relative to the smallest rank count."""
    base = results[0]
    base_rate = base.report["throughput"] if base.report else None
    rows = []
    for result in results:
        rate = result.report["throughput"] if result.report else None
        speedup = rate / base_rate if rate and base_rate else None
        ideal = result.plan.ranks / base.plan.ranks
        rows.append({"ranks": result.plan.ranks, "throughput": rate, "speedup": speedup,
                     "efficiency": speedup / ideal if speedup else None,
                     "passed": not verdict(result), "out_dir": str(result.plan.out_dir)})
    return rows


def with_ranks(options: TrainOptions, ranks: int) -> TrainOptions:
    return replace(options, gpus=ranks)
