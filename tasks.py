"""Command line of the image build system: ``invoke --list`` shows the tasks.

Thin on purpose: each flag is declared once, on the request it fills (``SmokeOptions``,
``TrainOptions``, ``JobRequest``: :func:`containers.inputs.flags.option`) or here for a task's
own; one typed conversion refuses a bad value in one line before anything runs. Defaults reach
invoke as text, so invoke never casts; each flag's help says its type and default. There are
no short flags: ``-h`` is help on every task. User errors are one line and a non-zero exit."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import shlex
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import invoke.parser.parser
from invoke import Exit, task
from invoke.exceptions import ParseError
from invoke.main import program as _program
from invoke.parser import Parser
from invoke.parser.parser import ParseMachine

# Only what the flags' help needs is imported here: ``invoke --list`` and ``-h`` import this
# file and run no task. Each task imports its command's module (containers.app) when it runs.
from containers.errors import ContainersError, UsageError, describe, readable
from containers.inputs import flags
from containers.inputs.names import suggest
from containers.batch.request import JobRequest
from containers.prove import registry
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions

ROOT = Path(__file__).resolve().parent

if TYPE_CHECKING:
    from containers.app.project import Project


def _project(c) -> Project:
    from containers.app.project import Project, settings_of

    settings, sources = settings_of(c.config)
    return Project.load(ROOT, settings, sources=sources)


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


def _value_first_machine(**settings: Any) -> ParseMachine:
    """invoke's parse machine, but a flag that waits for its value takes the next word as it,
    as getopt does: invoke's took a word spelled like one of the task's own flags as that flag,
    so ``invoke job --directive=--submit`` (or ``--directive --submit``) submitted the job."""
    machine = ParseMachine(**settings)
    handle = machine.handle

    def value_first(token: str) -> None:
        if (machine.current_state != "unknown" and machine.waiting_for_flag_value
                and not machine.flag.optional):
            machine.see_value(token)
        else:
            handle(token)
    machine.handle = value_first  # type: ignore[method-assign]
    return machine


#: invoke's own ``Parser.parse_argv``, run by :func:`_value_first_machine`: it names its
#: machine by a global of its module, so this copy of it reads that name from globals of its own.
_parse_argv = types.FunctionType(Parser.parse_argv.__code__, {
    **vars(invoke.parser.parser), "ParseMachine": _value_first_machine})


def _value_first(make_parser: Callable[[], Parser]) -> Callable[[], Parser]:
    """The parser the ``invoke`` program makes for these tasks, parsing by
    :func:`_value_first_machine` (only that parser: invoke's classes stay as they are)."""
    @functools.wraps(make_parser)
    def made() -> Parser:
        parser = make_parser()
        parser.parse_argv = functools.partial(_parse_argv, parser)  # type: ignore[method-assign]
        return parser
    return made


if not getattr(_program.parse_tasks, "suggests", False):
    _program.parse_tasks = _suggesting(_program.parse_tasks)
    _program._make_parser = _value_first(_program._make_parser)


def _text(default: Any) -> Any:
    """A default as invoke is given it: text, so it casts nothing (None and switches stay)."""
    if default is None or isinstance(default, bool):
        return default
    return format(default, "g") if isinstance(default, float) else str(default)


def _described(text: str, kind: str | flags.FlagType | None, default: Any) -> str:
    """A flag's help ending in its type and default."""
    if isinstance(default, bool):
        return f"{text} [switch]"
    label = kind.label if isinstance(kind, flags.FlagType) else kind or "text"
    shown = "" if default in (None, "") else f"; default: {default}"
    return f"{text} [{label}{shown}]"


def _command(help: dict[str, str | tuple[str, str | flags.FlagType]],
             takes: Mapping[str, tuple[flags.Option, Any]] | None = None,
             **options: Any) -> Callable:
    """``@task`` with no short flags and user errors as one line. The body's own flags have
    their help here (text, or ``(text, type)``) and reach it converted by their type; the
    options ``takes`` declares (:func:`containers.inputs.flags.declared`) are flags too, from
    their declaration, and reach the body's ``**given`` as text for the request they fill,
    which checks them (an entry of ``help`` may say more of one)."""
    def wrap(body: Callable) -> Callable:
        own = {name: p for name, p in inspect.signature(body).parameters.items()
               if p.kind is not p.VAR_KEYWORD}
        table = {name: (option.help, option.type, _text(default))
                 for name, (option, default) in (takes or {}).items() if name not in own}
        for name, entry in help.items():
            text, kind = entry if isinstance(entry, tuple) else (entry, None)
            table[name] = (text, kind, own[name].default if name in own else table[name][2])
        signature = inspect.Signature([*own.values(), *(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, (_, _, default) in table.items() if name not in own)])
        typed = {name: kind for name, (_, kind, _) in table.items()
                 if name in own and isinstance(kind, flags.FlagType)}

        @functools.wraps(body)
        def wrapper(c, *args, **kwargs):
            try:
                bound = signature.bind(c, *args, **kwargs)
                bound.apply_defaults()
                given = {name: typed[name](flags.flag_of(name), value) if name in typed
                         else value for name, value in list(bound.arguments.items())[1:]}
                return body(c, **given)
            except ContainersError as exc:
                message, code = describe(exc)
                raise Exit(message, code=code) from exc
            except KeyboardInterrupt:
                raise Exit("interrupted", code=130) from None
            except BrokenPipeError:
                # The reader went away (`invoke build --dry-run | head`): stop quietly.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise Exit(code=141) from None
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        described = {name: _described(*entry) for name, entry in table.items()}
        return task(help=described, auto_shortflags=False, **options)(wrapper)
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
FORCE_HELP = "run even when this machine cannot fit it (ranks over its cores or GPUs, message " \
             "buffers over its memory)"


@_command(help={"target": ("only this target (and what it needs); default: everything",
                           flags.TARGET),
                "json": JSON_HELP})
def check(c, target=None, json=False):
    """Validate manifests, env specs, definitions and site profiles."""
    from containers.app import inputs
    inputs.check_inputs(_project(c), target=target, as_json=json)


@_command(help={"json": JSON_HELP})
def targets(c, json=False):
    """List image targets: site, arch, GPU kind, builder, image, built or not, inputs hash."""
    from containers.app import inputs
    inputs.list_targets(c.config.get("containers") or {}, ROOT, lambda: _project(c),
                        as_json=json)


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
    from containers.host.sources import start_pip_config
    start_pip_config()  # its ~0.25 s overlaps the imports below (the plan reads pip's sources)
    from containers.app import build as building
    from containers.image.identity import parse_build_args  # the planner: only when building
    build_args = parse_build_args(build_arg or [])
    project = _project(c)
    building.build(project, target=target or project.settings.default_target, force=force,
                   dry_run=_dry(c, dry_run), build_args=build_args, no_cache=no_cache)


@_command(help={"prune": "empty it (waits for running builds; the next build fills it again)"})
def cache(c, prune=False):
    """The package cache builds share (containers.cache_dir): where, how big; --prune empties it."""
    from containers.app import caching
    if prune:
        _no_dry(c, "cache --prune removes files; run it without --dry")
    caching.package_cache(_project(c), prune=prune)


@_command(
    help={
        "target": ("image to test; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "op": (flags.declared(SmokeOptions)["op"][0].help + "; with --history: only their runs",
               flags.OPS),
        "dry_run": "print the exact exec command, run nothing (also: invoke --dry)",
        "history": "show earlier runs (perflog) as a table and a PNG instead of running",
        "json": "with --history: print the history as one JSON document (docs/results.md, "
                "JSON shapes)",
        "nodes": (NODES_HELP, flags.POSITIVE_INT),
        "force": FORCE_HELP,
    },
    takes=flags.declared(SmokeOptions),
)
def smoke(c, target=None, dry_run=False, history=False, json=False, nodes="1", force=False,
          **given):
    """Collective benchmark inside the image (nccl-tests style): algbw, busbw, #wrong, verdict."""
    from containers.app import workloads
    if json and not history:
        raise UsageError("--json goes with --history; a run writes its JSON report and "
                         "prints where (json: ...)", flag="--json")
    options = SmokeOptions(**given)
    if history:
        workloads.smoke_history(_project(c), target=target, as_json=json,
                                plot=not c.config.run.dry,
                                ops=options.op.split(",") if given["op"] else None)
        return
    workloads.prove(_project(c), target=target, options=options, dry_run=_dry(c, dry_run),
                    nodes=nodes, force=force)


@_command(
    help={
        "target": ("image to train in; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "scaling": ("rank counts (e.g. 1,2,4): run each, report speedup + PNG", flags.RANK_LIST),
        "dry_run": "print the exact exec command(s), run nothing (also: invoke --dry)",
        "nodes": (NODES_HELP, flags.POSITIVE_INT),
        "force": FORCE_HELP,
    },
    takes=flags.declared(TrainOptions),
)
def train(c, target=None, scaling=None, dry_run=False, nodes="1", force=False, **given):
    """Train the DDP / DeepSpeed / FSDP example inside the image; loss, throughput, verdict."""
    from containers.app import workloads
    workloads.train(_project(c), target=target, options=TrainOptions(**given),
                    scaling=scaling, dry_run=_dry(c, dry_run), nodes=nodes, force=force)


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
    from containers.app import running
    running.run_command(_project(c), target=target, command=_remainder(c), gpus=gpus,
                        nodes=nodes, launcher=not no_launcher, timeout=timeout,
                        dry_run=_dry(c, dry_run))


@_command(
    help={
        "target": ("image to enter; default: the detected site's default target, else cpu",
                   flags.TARGET),
        "dry_run": "print the exact exec command, run nothing",
    },
)
def shell(c, target=None, dry_run=False):
    """A shell in the image with the site's GPU flag, binds and environment (or -- CMD)."""
    from containers.app import running
    running.shell(_project(c), target=target, command=_remainder(c), dry_run=_dry(c, dry_run))


@_command(
    iterable=["directive"],
    help={
        "workload": ("what the job runs (run: your own command after --, through the site's "
                     "launcher, with the device gate and a verdict)",
                     flags.choice(tuple(registry.WORKLOADS))),
        "target": ("image the job runs (or builds); default: the detected site's default "
                   "target", flags.TARGET),
        "site": ("the site whose scheduler, launcher, binds and environment the job uses; "
                 "default: the target's own (the cpu image on a Slurm cluster: local-slurm)",
                 flags.SITE),
        "out": ("write the script to this file (atomically) instead of printing it",
                "file to write (not a folder)"),
        "submit": "submit it (sbatch or qsub) and print the job id and where output goes",
        "wait": "with --submit: follow the job (its state changes), then print its verdict and "
                "exit with the verdict's code",
        "directive": "one more scheduler option for the preamble, e.g. --constraint=hbm or "
                     "-l place=scatter (repeatable; checked)",
        # a run option's help names the workloads it applies to; left out, it is the kind's
        **{name: ("/".join(registry.applies_to(name)) + ": " + option.help, option.type)
           for name, option in registry.RUN_OPTIONS.items()},
    },
    takes={**flags.declared(JobRequest), **{
        name: (option, False if option.type is None else None)
        for name, option in registry.RUN_OPTIONS.items()}},
)
def job(c, workload="smoke", target=None, site=None, out=None, submit=False, wait=False,
        directive=None, **given):
    """Batch job for a site (Slurm or PBS): smoke, training or an image build; print or submit.

    Every option of invoke smoke / invoke train that changes the run is taken; one that does
    not apply to the workload is refused in one line."""
    from containers.app import jobs
    if wait and not submit:
        raise UsageError("--wait follows a submitted job; add --submit", flag="--wait")
    if out or submit:
        _no_dry(c, "invoke job prints the script under --dry; --out and --submit write or "
                   "submit it, so they are refused")
    kind = registry.kind_of(workload)  # once: handed down as the object
    run = {name: given.pop(name) for name in registry.RUN_OPTIONS}
    request = JobRequest(kind=kind, **given, directives=tuple(directive or ()),
                         options={name: value for name, value in run.items()
                                  if value is not None and value is not False},
                         command=tuple(_remainder(c)), workdir=kind.workdir(os.getcwd))
    jobs.job(_project(c), request, target=target, site=site, out=out, submit=submit, wait=wait)


@_command(help={"json": JSON_HELP})
def jobs(c, json=False):
    """The batch jobs this checkout submitted (results/jobs/index.jsonl): state and verdict."""
    from containers.app import following
    following.jobs_report(_project(c), as_json=json)


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
    from containers.app import publishing
    _no_dry(c, "publish has no dry run (it copies, signs and catalogues); leave out --dry, or "
               "see what is published with invoke verify")
    publishing.publish(_project(c), target=target, dest=dest, version=version, sign=sign,
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
    from containers.app import publishing
    publishing.verify(_project(c), dest=dest, target=target, as_json=json)


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
    from containers.app import inspecting
    inspecting.inspect(_project(c), target=target, image=image, site=site, as_json=json)


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
    from containers.app import inspecting
    if not old or not new:
        raise UsageError("name two images: invoke diff --old OLD --new NEW",
                         flag="--new" if old else "--old")
    inspecting.diff(_project(c), old=old, new=new, as_json=json)


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
    from containers.app import judging
    _no_dry(c, "verdict writes verdict.json and has no dry run")
    if results is None:
        raise UsageError("--results: name the results folder of a batch job", flag="--results")
    judging.judge_results(_project(c), results=results, exit_status=exit_status)


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
    from containers.app import localslurm
    _no_dry(c, "local-slurm starts and stops daemons and has no dry run")
    actions = [name for name, on in (("start", start), ("stop", stop), ("status", status)) if on]
    if len(actions) != 1:
        raise UsageError("name one of --start, --stop or --status", flag="--start")
    if site and not start:
        raise UsageError("goes with --start", flag="--site")
    localslurm.local_slurm(_project(c), action=actions[0], site=site)
