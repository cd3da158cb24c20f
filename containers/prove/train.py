"""``invoke train``: the DDP / DeepSpeed / FSDP examples inside an image, as a workload kind, and
the scaling report. Sanity asks what a person asks: did the loss fall, are the parameters the same
on every rank afterwards; performance is not judged against references."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from containers.errors import UsageError
from containers.inputs import flags, names
from containers.jobsfiles import trainreport
from containers.prove.kind import GPUS, TIMEOUT, Invocation, WorkloadKind

if TYPE_CHECKING:  # the kind is declared when the command line starts (invoke --list): light
    from containers.inputs.settings import Settings
    from containers.inputs.sites import Site
    from containers.prove import verdict

DATA_MOUNT = "/opt/containers/data"
DS_CONFIG_MOUNT = "/opt/containers/ds_config.json"
EXAMPLES = names.EXAMPLES  # batch jobs name their training workloads by these
#: The training report's one shape, from the very file the workload writes it with.
TrainReport = trainreport.TrainReport
#: The global batch when neither the flag nor a seed preset sets it: small enough for CPU ranks.
DEFAULT_BATCH = 64


def deepspeed_only(example: str, *, example_flag: str = "--example", **given: Any) -> None:
    """Refuse ``--zero-stage`` and ``--ds-config`` for any example but deepspeed."""
    for name, value in given.items():
        flag = flags.flag_of(name)
        if value is not None and example != "deepspeed":
            raise UsageError(f"{flag} applies to {example_flag} deepspeed, not {example_flag} "
                             f"{example}; leave it out", flag=flag)


@dataclass(frozen=True)
class TrainOptions:
    """``invoke train``'s run options, checked when made (the script's rules). ``batch_size`` is
    the GLOBAL batch, divided over every rank; left out, the seed preset's, else the default."""

    example: str = flags.Option("how the model is distributed", flags.EXAMPLE,
                                in_job=False).field("ddp")
    gpus: int = GPUS.field(2)
    model: str | None = flags.option("the network; default: cnn", flags.MODEL)
    model_size: str | None = flags.option(
        "a preset (tiny: seconds per epoch on a CPU; small, the default; base) or a seed's own "
        "network: wideresnet olivia, vit lumi; wideresnet also takes DEPTH-WIDTH such as 40-2",
        flags.MODEL_SIZE)
    epochs: int = flags.option("training epochs", flags.POSITIVE_INT, 3)
    batch_size: int | None = flags.option(
        "GLOBAL batch size, split evenly over the ranks of all nodes (default: the seed "
        "preset's, e.g. 256 for --model-size olivia, else 64)", flags.POSITIVE_INT)
    lr: float | None = flags.option("learning rate (default: the workload's)",
                                    flags.POSITIVE_FLOAT)
    zero_stage: int | None = flags.option("DeepSpeed ZeRO stage (the deepspeed example only; "
                                          "default: 1)", flags.ZERO_STAGE)
    ds_config: Path | None = flags.option("DeepSpeed config file (JSON; trailing commas "
                                          "accepted; the deepspeed example only)",
                                          flags.EXISTING_FILE)
    data: Path | None = flags.option("local folder with CIFAR-100 (cifar-100-python/) or MNIST "
                                     "files, bound read-only; default: synthetic data shaped "
                                     "like the dataset", flags.EXISTING_FOLDER)
    samples: int | None = flags.option("synthetic training samples", flags.POSITIVE_INT)
    target_accuracy: float | None = flags.option("stop early once validation accuracy reaches "
                                                 "this", flags.FRACTION)
    compile: bool = flags.option("torch.compile the model (its compile time is reported apart "
                                 "from the epochs)", default=False)
    timeout: float = TIMEOUT.field(1800)

    def __post_init__(self) -> None:
        flags.check(self)
        object.__setattr__(self, "model_size",
                           flags.model_size("--model-size", self.model_size, self.model))
        divides(self.global_batch, self.gpus)
        deepspeed_only(self.example, zero_stage=self.zero_stage, ds_config=self.ds_config)

    @property
    def global_batch(self) -> int:
        preset = names.preset_defaults(self.model, self.model_size).get("batch_size")
        return self.batch_size or (int(preset) if isinstance(preset, int) else DEFAULT_BATCH)

    @property
    def kind(self) -> "TrainKind":
        return TRAINS[self.example]


#: The arguments only one example takes, by its name (the others take none of their own).
EXAMPLE_ARGS: dict[str, Callable[[TrainOptions], list[str]]] = {
    "deepspeed": lambda options: ["--zero-stage", str(options.zero_stage or 1)]}


def divides(batch_size: int, ranks: int) -> None:
    if batch_size % ranks:
        raise UsageError(f"--batch-size {batch_size} is the global batch; it must divide "
                         f"evenly over {ranks} ranks", flag="--batch-size")


class TrainKind(WorkloadKind):
    name = "train"
    script = "train.py"
    report_name = "train.json"
    program = "the training"
    options_type = TrainOptions

    def __init__(self, example: str) -> None:
        self.example = example

    @property
    def workload(self) -> str:
        return self.example

    def make_options(self, *, gpus: int, given: Mapping[str, Any]) -> TrainOptions:
        """A refusal names the flag that chose the example."""
        deepspeed_only(self.example, example_flag="--workload",
                       zero_stage=given.get("zero_stage"), ds_config=given.get("ds_config"))
        return TrainOptions(example=self.example, gpus=gpus, **given)

    def resized(self, options: Any, *, gpus: int) -> TrainOptions:
        return replace(super().resized(options, gpus=gpus), example=self.example)  # type: ignore

    def folder(self, options: TrainOptions) -> str:
        return f"train-{options.example}"

    def title(self, options: TrainOptions) -> str:
        return f"train {options.example}"

    def launch(self, options: TrainOptions, *, site: Site, settings: Settings,
               nodes: int) -> Invocation:
        if nodes > 1:  # the options know their ranks per node; the world is known only now
            divides(options.global_batch, options.gpus * nodes)
        args = ["--example", options.example, "--epochs", str(options.epochs),
                "--batch-size", str(options.global_batch), "--out", settings.results_mount]
        for flag, value in (("--model", options.model), ("--model-size", options.model_size),
                            ("--lr", options.lr), ("--samples", options.samples),
                            ("--target-accuracy", options.target_accuracy)):
            if value is not None:
                args += [flag, str(value)]
        if options.compile:
            args.append("--compile")
        args += EXAMPLE_ARGS.get(options.example, lambda _: [])(options)
        binds = []  # a ds_config is only ever given for deepspeed (deepspeed_only refuses it)
        for path, mount, flag in ((options.ds_config, DS_CONFIG_MOUNT, "--ds-config"),
                                  (options.data, DATA_MOUNT, "--data")):
            if path is not None:
                binds.append(f"{path.resolve()}:{mount}:ro")
                args += [flag, mount]
        return Invocation(args=args, binds=binds)

    def failures(self, result: verdict.Result) -> list[str]:
        report, problem = read_report(result)
        return [problem] if problem else [report.error] if report and report.error else []

    def report_reasons(self, result: verdict.Result, *, settled: bool) -> list[str]:
        report, _ = read_report(result)
        if report is None:
            return []  # not the report's shape: failures() said so
        reasons = []
        first, last = report.loss_first, report.loss_last
        if len(report.epochs) < 2 and report.ok:
            pass  # one epoch has no trend to judge; the run itself succeeded
        elif first is None or last is None or not last < first:
            reasons.append(f"the loss did not fall (first epoch {first}, last epoch {last})")
        if report.params_consistent is False:
            reasons.append("model parameters differ across ranks after training")
        return reasons

    def details(self, result: verdict.Result) -> dict:
        report, _ = read_report(result)
        return {key: getattr(report, key, None) for key in (
            "example", "model_name", "epochs_run", "loss_first", "loss_last", "throughput",
            "params_consistent")}


TRAINS = {example: TrainKind(example) for example in EXAMPLES}


def read_report(result: verdict.Result) -> tuple[Any, str | None]:
    """The run's ``train.json``: ``(report, None)``, ``(None, why not)`` or ``(None, None)``."""
    report = result.outcome.report
    if report is None:
        return None, None
    try:
        return TrainReport.from_dict(report), None
    except trainreport.ReportError as exc:
        return None, f"{exc} (not the report jobs/train.py writes)"


def scaling_rows(results: list[verdict.Result]) -> list[dict]:
    """Throughput, speedup and efficiency relative to the smallest rank count."""
    base = results[0]
    base_rate = getattr(read_report(base)[0], "throughput", None)
    rows = []
    for result in results:
        rate = getattr(read_report(result)[0], "throughput", None)
        speedup = rate / base_rate if rate and base_rate else None
        ideal = result.plan.ranks / base.plan.ranks
        rows.append({"ranks": result.plan.ranks, "throughput": rate, "speedup": speedup,
                     "efficiency": speedup / ideal if speedup else None,
                     "passed": not result.reasons, "out_dir": str(result.plan.out_dir)})
    return rows
