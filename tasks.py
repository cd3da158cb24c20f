"""Command line of the image build system: ``invoke --list`` shows the tasks.

Thin on purpose: each task converts its flags through the option types of
:mod:`containers.inputs.flags` (so a bad value is one line before anything runs or is written),
turns them into a call into :mod:`containers.app`, and maps the tool's one error family to a
one-line message and a non-zero exit (``invoke.Exit``). Flags are declared without types for
invoke (their defaults are text), so invoke never casts a value itself; each flag's help says
its type and default. There are no short flags: ``-h`` is help on every task.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from invoke import Exit, task
from invoke.exceptions import ParseError
from invoke.main import program as _program
from invoke.parser import Parser
from invoke.parser.parser import ParseMachine

# Only what the flags' help needs is imported here: ``invoke --list`` and ``-h`` import this
# file and run no task. ``app`` imports each command's modules on first use (its docstring).
from containers import app
from containers.errors import ContainersError, UsageError, describe, readable
from containers.inputs import flags
from containers.inputs.names import suggest
from containers.prove import registry
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.transport import CHOICES as TRANSPORTS
from containers.prove.train import TRAINS, TrainOptions
from containers.run.launchers import LAUNCHERS

if TYPE_CHECKING:
    from containers.prove.kind import WorkloadKind

ROOT = Path(__file__).resolve().parent


def _project(c) -> app.Project:
    from containers.app.project import settings_of  # the settings model: only when a task runs

    settings, sources = settings_of(c.config)
    return app.Project.load(ROOT, settings, sources=sources)


def _quiet_broken_pipe(kind, value, traceback, previous=sys.excepthook) -> None:
    """invoke prints ``-h`` and ``--list`` itself, outside every task: a reader that went away
    (``invoke smoke -h | head``) ends it quietly with 141, as cat does, not with a traceback.
    invoke also casts the ``INVOKE_*`` variables of the keys a file declares before any task
    runs (``INVOKE_CONTAINERS_SQUASHFS_LEVEL=abc`` is its ValueError): that is said in one line
    by the tool's own reading of them. Any other exception goes to the hook that was there."""
    if not issubclass(kind, BrokenPipeError):
        _environment_error()
        previous(kind, value, traceback)
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    os._exit(141)  # the program is over; nothing is left to clean up


sys.excepthook = _quiet_broken_pipe


def _environment_error() -> None:
    """Exit with the one line of a bad ``INVOKE_CONTAINERS_*`` variable, if there is one."""
    from containers.inputs.settings import environment_settings  # the model: only on an error

    try:
        environment_settings(os.environ)
    except ContainersError as exc:
        message, code = describe(exc)
        print(message, file=sys.stderr)
        os._exit(code)


#: invoke's own line for a word that is no task, flag or value where it stands.
UNKNOWN_WORD = re.compile(r"No idea what (?P<word>'[^\n]*'|\"[^\n]*\") is!")


def did_you_mean(error: ParseError, parser: Parser) -> ParseError:
    """invoke's ``No idea what 'smok' is!`` with the likely name, still one line: a word with a
    dash is compared with the flags of the task it follows and invoke's own, any other word
    with the task names; with nothing close, where the names are listed. Other parse errors
    (a flag without its value) are returned as they are."""
    match = UNKNOWN_WORD.fullmatch(str(error))
    if match is None:
        return error
    word, context = ast.literal_eval(match["word"]), error.context
    if word.startswith("-"):
        task = context.name if context is not None and context.name else None
        names = [*(context.flags if task else ()), *(context.inverse_flags if task else ()),
                 *parser.initial.flags]
        where = f"invoke {task} -h lists its flags" if task else "invoke -h lists them"
    else:
        names, where = list(parser.contexts), "invoke --list shows the tasks"
    return ParseError(f"{error}{suggest(word, names) or f' ({where})'}", context)


def _suggesting(parse_tasks: Callable[[], None]) -> Callable[[], None]:
    """invoke's program prints a parse error's text itself (``Program.run``) and exits 1; the
    program that loaded these tasks parses their words in its ``parse_tasks`` step, so that step
    re-raises with :func:`did_you_mean`, cut as the tool's own errors are (``readable``). Users
    keep running the plain ``invoke`` command."""
    @functools.wraps(parse_tasks)
    def wrapper() -> None:
        try:
            parse_tasks()
        except ParseError as exc:
            found = did_you_mean(exc, _program.parser)
            raise ParseError(readable(str(found)), found.context) from None
    wrapper.suggests = True  # type: ignore[attr-defined]
    return wrapper


if not getattr(_program.parse_tasks, "suggests", False):
    _program.parse_tasks = _suggesting(_program.parse_tasks)


def _value_first(handle: Callable[[ParseMachine, str], None]
                 ) -> Callable[[ParseMachine, str], None]:
    """A flag that waits for its value takes the next word as it, as getopt does: invoke's
    parser took a word spelled like one of the task's own flags as that flag, so ``invoke job
    --directive=--submit`` (or ``--directive --submit``) submitted the job."""
    @functools.wraps(handle)
    def wrapper(machine: ParseMachine, token: str) -> None:
        if (machine.current_state != "unknown" and machine.waiting_for_flag_value
                and not machine.flag.optional):
            machine.see_value(token)
        else:
            handle(machine, token)
    wrapper.value_first = True  # type: ignore[attr-defined]
    return wrapper


if not getattr(ParseMachine.handle, "value_first", False):
    ParseMachine.handle = _value_first(ParseMachine.handle)  # every parse of every task


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


def _command(help: dict[str, str | tuple[str, str | flags.FlagType]],
             **options: Any) -> Callable:
    """``@task`` with no short flags, each flag's help ending in its type (``help``: text, or
    ``(text, type)``; text when none is given) and default (read from the signature), and user
    errors as one line."""
    def wrap(body: Callable) -> Callable:
        defaults = inspect.signature(body).parameters
        described = {}
        for name, entry in help.items():
            text, kind = entry if isinstance(entry, tuple) else (entry, "text")
            default = defaults[name].default
            label = kind.label if isinstance(kind, flags.FlagType) else kind
            if isinstance(default, bool):
                described[name] = f"{text} [switch]"
            else:
                shown = "" if default in (None, "") else f"; default: {default}"
                described[name] = f"{text} [{label}{shown}]"
        return task(help=described, auto_shortflags=False, **options)(_user_errors(body))
    return wrap


def _dry(c, dry_run: bool) -> bool:
    """``--dry-run``, or invoke's own ``invoke --dry <task>`` (it sets ``run.dry``)."""
    return bool(dry_run or c.config.run.dry)


def _no_dry(c, what: str) -> None:
    """Refuse ``invoke --dry`` for a task that has no dry run: never a real action under it."""
    if c.config.run.dry:
        raise UsageError(f"invoke --dry: {what}")


JSON_HELP = "print one JSON document (its shape: docs/results.md, JSON shapes) instead of " \
            "the table"
NODES_HELP = ("inside a Slurm allocation: run on this many of its nodes (srun, one torchrun per "
              "node); --gpus is then per node")
GPUS_HELP = "ranks on this node: one per GPU, or CPU processes (gloo) where there is no GPU"
FORCE_HELP = "run even when this machine cannot fit it (ranks over its cores or GPUs, message " \
             "buffers over its memory)"


#: The one table of the options that change a smoke or training run: flag -> (help, type). Which
#: workloads each applies to is their kind's (``WorkloadKind.run_options`` in the registry,
#: containers.prove.registry). invoke smoke, invoke train and invoke job all take their help and
#: types from it (SmokeOptions, TrainOptions check every value), so a run option added here is
#: one that a batch job takes too.
RUN_OPTIONS: dict[str, tuple[str, Any]] = {
    "sizes": ("message sizes MIN:MAX in bytes (K/M/G suffixes), doubling; or a comma list",
              flags.SIZES_LABEL),
    "iters": ("timed iterations per size", flags.POSITIVE_INT),
    "warmup": ("untimed warm-up iterations per size", flags.NON_NEGATIVE_INT),
    "cycles": ("repeat the whole sweep this many times (a corruption soak, nccl-tests' -N); any "
               "wrong value in any cycle fails, naming the cycles and sizes", flags.POSITIVE_INT),
    "op": ("the collectives to measure, each with its nccl-tests table, bus factor, check and "
           "verdict (comma list, or all; default: all_reduce)", flags.OPS),
    "dtype": ("element type", flags.DTYPE),
    "model": ("the network; default: cnn", flags.MODEL),
    "model_size": ("a preset (tiny: seconds per epoch on a CPU; small, the default; base) or a "
                   "seed's own network: wideresnet olivia, vit lumi; wideresnet also takes "
                   "DEPTH-WIDTH such as 40-2", flags.MODEL_SIZE_LABEL),
    "epochs": ("training epochs", flags.POSITIVE_INT),
    "batch_size": ("GLOBAL batch size, split evenly over the ranks of all nodes (default: the "
                   "seed preset's, e.g. 256 for --model-size olivia, else 64)",
                   flags.POSITIVE_INT),
    "samples": ("synthetic training samples", flags.POSITIVE_INT),
    "lr": ("learning rate (default: the workload's)", flags.POSITIVE_FLOAT),
    "zero_stage": ("DeepSpeed ZeRO stage (the deepspeed example only; default: 1)",
                   flags.ZERO_STAGE),
    "ds_config": ("DeepSpeed config file (JSON; trailing commas accepted; the deepspeed "
                  "example only)", flags.EXISTING_FILE),
    "data": ("local folder with CIFAR-100 (cifar-100-python/) or MNIST files, bound read-only; "
             "default: synthetic data shaped like the dataset", flags.EXISTING_FOLDER),
    "target_accuracy": ("stop early once validation accuracy reaches this", flags.FRACTION),
    "compile": ("torch.compile the model (its compile time is reported apart from the epochs)",
                "switch"),
    "timeout": ("seconds before every rank is stopped and the run fails", flags.SECONDS),
}


def run_options(kind: WorkloadKind | None) -> dict[str, tuple[str, Any]]:
    """The RUN_OPTIONS that ``kind`` takes (None: all of them, for invoke job, each help
    prefixed with the kinds it applies to)."""
    return {name: (("/".join(registry.applies_to(name)) + ": " if kind is None else "") + text,
                   rule)
            for name, (text, rule) in RUN_OPTIONS.items()
            if kind is None or name in kind.run_options}


SMOKE_OPTIONS, TRAIN_OPTIONS = run_options(SMOKE), run_options(TRAINS["ddp"])
WORKLOAD = flags.choice(tuple(registry.WORKLOADS))


@_command(help={"target": ("only this target (and what it needs); default: everything",
                           flags.TARGET),
                "json": JSON_HELP})
def check(c, target=None, json=False):
    """Validate manifests, env specs, definitions and site profiles."""
    target = flags.TARGET("--target", target)
    app.check_inputs(_project(c), target=target, as_json=json)


@_command(help={"json": JSON_HELP})
def targets(c, json=False):
    """List image targets: site, arch, GPU kind, builder, image, built or not, inputs hash."""
    app.list_targets(c.config.get("containers") or {}, ROOT, lambda: _project(c), as_json=json)


@_command(
    iterable=["build_arg"],
    help={
        "target": ("image target to build (recipes/<target>.yaml); bases are built first; "
                   "default: containers.default_target", flags.TARGET),
        "force": "rebuild this target even if its inputs are unchanged",
        "dry_run": "print the plan and the exact commands, run nothing (also: invoke --dry)",
        "build_arg": ("KEY=VALUE build argument for the definition (repeatable)", "KEY=VALUE"),
        "no_cache": "fetch every package afresh: no shared package cache (pip's, debootstrap's; "
                    "invoke cache shows and prunes it)",
    },
)
def build(c, target=None, force=False, dry_run=False, build_arg=None, no_cache=False):
    """Build an image (and its bases) unless its inputs hash says it is up to date."""
    from containers.image.identity import parse_build_args  # the planner: only when building
    target = flags.TARGET("--target", target)
    build_args = parse_build_args(build_arg or [])
    project = _project(c)
    app.build(project, target=target or project.settings.default_target, force=force,
              dry_run=_dry(c, dry_run), build_args=build_args, no_cache=no_cache)


@_command(help={"prune": "empty it (waits for running builds; the next build fills it again)"})
def cache(c, prune=False):
    """The package cache builds share (containers.cache_dir): where, how big; --prune empties it."""
    if prune:
        _no_dry(c, "cache --prune removes files; run it without --dry")
    app.package_cache(_project(c), prune=prune)


@_command(
    help={
        "target": ("image to test; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "gpus": (GPUS_HELP, flags.POSITIVE_INT),
        **SMOKE_OPTIONS,
        "op": (SMOKE_OPTIONS["op"][0] + "; with --history: only their runs", flags.OPS),
        "dry_run": "print the exact exec command, run nothing (also: invoke --dry)",
        "history": "show earlier runs (perflog) as a table and a PNG instead of running",
        "json": "with --history: print the history as one JSON document (docs/results.md, "
                "JSON shapes)",
        "nodes": (NODES_HELP, flags.POSITIVE_INT),
        "force": FORCE_HELP,
    },
)
def smoke(c, target=None, gpus="2", sizes="1K:128M", iters="20", warmup="5", timeout="600",
          dtype="float32", cycles="1", op=None, dry_run=False, history=False, json=False,
          nodes="1", force=False):
    """Collective benchmark inside the image (nccl-tests style): algbw, busbw, #wrong, verdict."""
    target = flags.TARGET("--target", target)
    op = flags.OPS("--op", op)
    if json and not history:
        raise UsageError("--json goes with --history; a run writes its JSON report and "
                         "prints where (json: ...)", flag="--json")
    if history:
        app.smoke_history(_project(c), target=target, as_json=json, plot=not c.config.run.dry,
                          ops=op.split(",") if op else None)
        return
    options = SmokeOptions(gpus=gpus, sizes=sizes, iters=iters, warmup=warmup, timeout=timeout,
                           dtype=dtype, cycles=cycles, op=op or "all_reduce")
    nodes = flags.POSITIVE_INT("--nodes", nodes)
    app.prove(_project(c), target=target, options=options, dry_run=_dry(c, dry_run),
              nodes=nodes, force=force)


@_command(
    help={
        "target": ("image to train in; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "example": ("how the model is distributed", flags.EXAMPLE),
        **TRAIN_OPTIONS,
        "gpus": (GPUS_HELP, flags.POSITIVE_INT),
        "scaling": ("rank counts (e.g. 1,2,4): run each, report speedup + PNG", flags.RANK_LIST),
        "dry_run": "print the exact exec command(s), run nothing (also: invoke --dry)",
        "nodes": (NODES_HELP, flags.POSITIVE_INT),
        "force": FORCE_HELP,
    },
)
def train(c, example="ddp", target=None, model=None, model_size=None, gpus="2", epochs="3",
          batch_size=None, lr=None, zero_stage=None, ds_config=None, data=None, samples=None,
          target_accuracy=None, scaling=None, compile=False, timeout="1800", dry_run=False,
          nodes="1", force=False):
    """Train the DDP / DeepSpeed / FSDP example inside the image; loss, throughput, verdict."""
    target = flags.TARGET("--target", target)
    options = TrainOptions(
        example=example, gpus=gpus, model=model, model_size=model_size, epochs=epochs,
        batch_size=batch_size, lr=lr, zero_stage=zero_stage, ds_config=ds_config, data=data,
        samples=samples, target_accuracy=target_accuracy, compile=bool(compile),
        timeout=timeout)
    flags.RANK_LIST("--scaling", scaling)
    nodes = flags.POSITIVE_INT("--nodes", nodes)
    app.train(_project(c), target=target, options=options, scaling=scaling,
              dry_run=_dry(c, dry_run), nodes=nodes, force=force)


def _remainder(c) -> list[str]:
    """The words after a standalone ``--`` exactly as the shell passed them (invoke's
    ``c.remainder`` joins them with spaces, which would lose quoting and newlines)."""
    joined = getattr(c, "remainder", "") or ""
    if "--" in sys.argv:
        words = sys.argv[sys.argv.index("--") + 1:]
        if " ".join(words) == joined:
            return words
    return shlex.split(joined)


@_command(
    help={
        "target": ("image to run in; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "gpus": ("ranks on this node, started by the site's launcher (torchrun): one per GPU, "
                 "or CPU processes where there is no GPU", flags.POSITIVE_INT),
        "nodes": (NODES_HELP, flags.POSITIVE_INT),
        "no_launcher": "run the command as one process, without torchrun",
        "timeout": ("seconds before every process of the run is stopped; default: none",
                    flags.SECONDS),
        "dry_run": "print the device gate and the exact exec command, run nothing",
    },
)
def run(c, target=None, gpus="1", nodes="1", no_launcher=False, timeout=None, dry_run=False):
    """Your own command in the image, launched as the site's smoke runs are: invoke run -- CMD.

    The site's GPU flag, binds, environment and launcher (torch.distributed's variables set for
    every rank); on GPU sites a device gate first (exit 2 before the command starts). The exit
    status is the command's; the log is kept under results/run/."""
    target = flags.TARGET("--target", target)
    gpus, nodes = flags.POSITIVE_INT("--gpus", gpus), flags.POSITIVE_INT("--nodes", nodes)
    timeout = flags.SECONDS("--timeout", timeout)
    app.run_command(_project(c), target=target, command=_remainder(c), gpus=gpus, nodes=nodes,
                    launcher=not no_launcher, timeout=timeout, dry_run=_dry(c, dry_run))


@_command(
    help={
        "target": ("image to enter; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "dry_run": "print the exact exec command, run nothing",
    },
)
def shell(c, target=None, dry_run=False):
    """A shell in the image with the site's GPU flag, binds and environment (or -- CMD)."""
    target = flags.TARGET("--target", target)
    app.shell(_project(c), target=target, command=_remainder(c), dry_run=_dry(c, dry_run))


#: invoke job's flags. JOB_CHECKED: those the task converts by their type here, in the order it
#: checks them (the first bad one is the error), each named as app.job names it.
JOB_FLAGS: dict[str, str | tuple[str, Any]] = {
    "target": ("image the job runs (or builds); default: the detected site's default "
               "target", flags.TARGET),
    "workload": ("what the job runs (run: your own command after --, through the site's "
                 "launcher, with the device gate and a verdict)", WORKLOAD),
    "site": ("the site whose scheduler, launcher, binds and environment the job uses; "
             "default: the target's own (the cpu image on a Slurm cluster: local-slurm)",
             flags.SITE),
    "nodes": ("nodes (one for build)", flags.POSITIVE_INT),
    "gpus_per_node": ("GPUs per node (default: all), or CPU ranks per node on CPU sites "
                      "(default: 2)", flags.POSITIVE_INT),
    "time": ("wall time; default: the workload's estimate (smoke 30 min, training 1 h, "
             "build 2 h) capped by the partition's limit", flags.TIME),
    "account": ("account (project) to charge", flags.ACCOUNT),
    "partition": ("partition or queue; default: the site's", flags.PARTITION),
    "launcher": ("override the site's launch pattern", flags.choice(LAUNCHERS)),
    "out": ("write the script to this file (atomically) instead of printing it",
            flags.OUT_FILE),
    "submit": "submit it (sbatch or qsub) and print the job id and where output goes",
    "wait": "with --submit: follow the job (its state changes), then print its verdict and "
            "exit with the verdict's code",
    "nccl_debug": "NCCL_DEBUG=INFO in the container (which transport NCCL/RCCL picked)",
    "transport": ("across nodes, NCCL's TCP sockets instead of the site's network transport "
                  "(where no plugin for containers exists, as on Derecho): degraded, recorded "
                  "in job.json and named by the verdict", flags.choice(TRANSPORTS)),
    "qos": "quality of service (Slurm; Olivia's devel for short tests)",
    "reservation": "run in this reservation (Slurm)",
    "directive": "one more scheduler option for the preamble, e.g. --constraint=hbm or "
                 "-l place=scatter (repeatable; checked)",
    **run_options(None),
}
JOB_CHECKED = ("workload", "target", "site", "nodes", "gpus_per_node", "time", "account",
               "partition", "launcher", "out", "transport")


@_command(iterable=["directive"], help=JOB_FLAGS)
def job(c, workload="smoke", target=None, site=None, nodes="1", gpus_per_node=None, time=None,
        account=None, partition=None, launcher=None, out=None, submit=False, nccl_debug=False,
        sizes=None, iters=None, warmup=None, cycles=None, op=None, dtype=None, model=None,
        model_size=None, epochs=None, batch_size=None, samples=None, lr=None, zero_stage=None,
        ds_config=None, data=None, target_accuracy=None, compile=False, timeout=None,
        qos=None, reservation=None, directive=None, wait=False, transport=None):
    """Batch job for a site (Slurm or PBS): smoke, training or an image build; print or submit.

    Every option of invoke smoke / invoke train that changes the run is taken (the table
    RUN_OPTIONS); one that does not apply to the workload is refused in one line."""
    values = dict(locals())  # the flags as given: the run options by their RUN_OPTIONS names
    if wait and not submit:
        raise UsageError("--wait follows a submitted job; add --submit", flag="--wait")
    if out or submit:
        _no_dry(c, "invoke job prints the script under --dry; --out and --submit write or "
                   "submit it, so they are refused")
    checked = {name: JOB_FLAGS[name][1]("--" + name.replace("_", "-"), values[name])
               for name in JOB_CHECKED}
    given = {name: values[name] for name in RUN_OPTIONS
             if values[name] is not None and values[name] is not False}  # a switch left off
    kind = registry.kind_of(checked.pop("workload"))  # once: handed down as the object
    options = registry.job_options(kind, gpus=checked["gpus_per_node"] or 1, given=given)
    app.job(_project(c), **checked, submit=submit, nccl_debug=nccl_debug, options=options,
            qos=qos, reservation=reservation, directives=tuple(directive or ()),
            command=tuple(_remainder(c)), wait=wait, kind=kind)


@_command(help={"json": JSON_HELP})
def jobs(c, json=False):
    """The batch jobs this checkout submitted (results/jobs/index.jsonl): state and verdict."""
    app.jobs_report(_project(c), as_json=json)


@_command(
    help={
        "target": ("image target to publish (its built images/<target>.sif)", flags.TARGET),
        "dest": ("site folder to publish into (catalogue.json, <target>/, modules/, keys/)",
                 flags.DEST_FOLDER),
        "version": ("version name; default: <build date>-<inputs hash>", flags.VERSION),
        "sign": "sign the image with apptainer sign (keyring: containers.sign_keysdir, key "
                "containers.sign_keyidx)",
        "keep": ("afterwards keep only the newest N versions of the target (never latest's); "
                 "0: keep all", flags.NON_NEGATIVE_INT),
        "group": ("give published files to this group (default: containers.publish_group)",
                  "group name"),
        "force": "replace a version that is already published (recorded in the catalogue)",
        "skip_checks": "publish without apptainer test and smoke checks (loud warning, "
                       "recorded in the catalogue)",
        "accept_regression": ("release anyway although the gate refuses it (busbw below "
                              "latest's beyond the reference tolerance, or a site-fit error): "
                              "say why; recorded in the catalogue with who and when", "reason"),
    },
)
def publish(c, target=None, dest=None, version=None, sign=False, keep="0", group=None,
            force=False, skip_checks=False, accept_regression=None):
    """Publish a checked image for a site: copy, checksum, sign, catalogue, Lmod module file."""
    _no_dry(c, "publish has no dry run (it copies, signs and catalogues); leave out --dry, or "
               "see what is published with invoke verify")
    target, dest = flags.TARGET("--target", target), flags.DEST_FOLDER("--dest", dest)
    version, keep = flags.VERSION("--version", version), flags.NON_NEGATIVE_INT("--keep", keep)
    app.publish(_project(c), target=target, dest=dest, version=version, sign=sign,
                keep=keep or None, group=group, force=force, skip_checks=skip_checks,
                accept_regression=accept_regression)


@_command(
    help={
        "dest": ("site folder that invoke publish wrote", flags.PUBLISHED_FOLDER),
        "target": ("only this target's images; default: all", flags.TARGET),
        "json": JSON_HELP,
    },
)
def verify(c, dest=None, target=None, json=False):
    """Check published images: checksums, signatures, catalogue, latest and module files."""
    dest, target = flags.PUBLISHED_FOLDER("--dest", dest), flags.TARGET("--target", target)
    app.verify(_project(c), dest=dest, target=target, as_json=json)


@_command(
    help={
        "target": ("inspect this target's built image; default: the site's default target",
                   flags.TARGET),
        "image": ("inspect this .sif, or a published version DEST:TARGET@VERSION (@latest too)",
                  "path or DEST:TARGET@VERSION"),
        "site": ("judge the image against this site; default: its target's site", flags.SITE),
        "json": JSON_HELP,
    },
    name="inspect",  # the function's own name would hide the inspect module used above
)
def inspect_image(c, target=None, image=None, site=None, json=False):
    """What an image holds (read from the image itself) and whether it fits its site.

    Exits non-zero when a site-fit rule finds an error (one line each above)."""
    target, site = flags.TARGET("--target", target), flags.SITE("--site", site)
    app.inspect(_project(c), target=target, image=image, site=site, as_json=json)


@_command(
    help={
        # flags, not positional arguments: invoke refuses -h on a task with positional ones
        "old": ("target, .sif path, or published DEST:TARGET@VERSION", "image"),
        "new": ("target, .sif path, or published DEST:TARGET@VERSION", "image"),
        "json": JSON_HELP,
    },
)
def diff(c, old=None, new=None, json=False):
    """What changed between two images: packages, stack, labels, size, latest smoke runs."""
    if not old or not new:
        raise UsageError("name two images: invoke diff --old OLD --new NEW",
                         flag="--new" if old else "--old")
    app.diff(_project(c), old=old, new=new, as_json=json)


@_command(
    help={
        "results": ("a batch job's results folder (job.json, the ranks' files, run.log)",
                    flags.EXISTING_FOLDER),
        "exit_status": ("the launcher's exit status in the job", flags.NON_NEGATIVE_INT),
    },
)
def verdict(c, results=None, exit_status="0"):
    """Judge a finished batch run from its files: verdict.json (and the perflog line for smoke).

    Batch smoke and training jobs end with it, so a job's proof is the one an interactive run
    writes (``invoke publish`` finds it); its exit status is the verdict's (0, 2 or 3)."""
    _no_dry(c, "verdict writes verdict.json and has no dry run")
    if results is None:
        raise UsageError("--results: name the results folder of a batch job", flag="--results")
    folder = flags.EXISTING_FOLDER("--results", results)
    app.judge_results(_project(c), results=folder,
                      exit_status=flags.NON_NEGATIVE_INT("--exit-status", exit_status))


# --- invoke local-slurm: a Slurm cluster on this machine, to try batch jobs (docs/local-slurm.md)
@_command(
    help={
        "start": "start it: munged, slurmctld and two slurmd on this machine (root), and print "
                 "the SLURM_CONF line jobs need",
        "stop": "stop it (its job steps, then its daemons by PID; also one cut off half way) "
                "and remove its folder",
        "status": "show its nodes, partitions, daemons and SLURM_CONF line",
        "site": ("with --start: shape it like this Slurm site (its partitions, limits, cores, "
                 "GPUs as GRES on stand-in devices, required account); default: nodes n1 and "
                 "n2, partition debug", flags.SITE),
    },
)
def local_slurm(c, start=False, stop=False, status=False, site=None):
    """A two-node Slurm cluster on this machine, to try invoke job --submit --wait without one.

    The same cluster the test suite runs its batch jobs on; needs root and Debian's slurm-wlm
    and munge (./setup.sh installs them)."""
    _no_dry(c, "local-slurm starts and stops daemons and has no dry run")
    actions = [name for name, on in (("start", start), ("stop", stop), ("status", status)) if on]
    if len(actions) != 1:
        raise UsageError("name one of --start, --stop or --status", flag="--start")
    if site and not start:
        raise UsageError("goes with --start", flag="--site")
    app.local_slurm(_project(c), action=actions[0], site=flags.SITE("--site", site))
