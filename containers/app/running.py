"""``invoke run -- CMD`` and ``invoke shell``: a researcher's own command in the image, launched
the way the site's smoke runs are (:mod:`containers.run.command`)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from typing import Sequence

from containers.app.project import Project
from containers.app.workloads import guard_run, say_plan, shown_environ
from containers.errors import ContainersError, ImageMissing, VerdictFailed, on_disk
from containers.records import BuildRecord, RunStatus, write
from containers.host.facts import run_stamp, utc_now
from containers.image import provenance
from containers.image.emulated import emulated_binds
from containers.inputs.recipes import Target
from containers.report import Say, commenting, say_line as _print, show_command
from containers.run import allocation
from containers.run.command import KIND, CommandRun, plan_command, shell_argv
from containers.run.needs import PYTHON, check_image, command_need, image_lacking
from containers.run.workload import Placement, first_failure, run_logged
from containers.unique import claim_folder


#: Seconds the device gate may take before the command is not started.
GATE_TIMEOUT = 300
#: ``status.json``'s exit status of a run stopped by Ctrl-C (the shell's 128 + SIGINT).
INTERRUPTED = 130


class CommandExit(ContainersError):
    """The command ended non-zero: the tool exits with its status (else ``fallback``)."""

    fallback = 1

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code if 0 < code < 256 else self.fallback


def run_command(project: Project, *, target: str | None, command: Sequence[str],
                gpus: int = 1, nodes: int = 1, launcher: bool = True,
                timeout: float | None = None, dry_run: bool = False,
                say: Say = _print) -> int:
    """Run ``command`` in the image, ``gpus`` ranks per node (``launcher`` False: one process)."""
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    placement = allocation.across_nodes(nodes, dry_run=dry_run, scheduler=site.scheduler)

    def planned_as(run_id: str, strict: bool = True, gate: bool = True) -> CommandRun:
        return plan_command(item, site, settings=project.settings, runtime=runtime,
                            command=command, ranks=gpus, run_id=run_id, timeout=timeout or 0,
                            launcher=launcher, placement=placement, strict=strict, gate=gate,
                            environ=shown_environ(site) if dry_run else None)

    planned = _fit_image(project, item, planned_as(run_stamp(), strict=not dry_run),
                         launcher=launcher, say=commenting(say) if dry_run else say)
    if not dry_run:  # refused before its folder is claimed: nothing is left behind
        guard_run(project, item.name, runtime)
        if not planned.workload.image.is_file():
            raise ImageMissing(planned.workload.image, item.name)
        out = planned.workload.out_dir
        claimed = claim_folder(out.parent, out.name)
        if claimed != out.name:
            planned = planned_as(claimed.removeprefix(f"{item.name}-"),
                                 gate=planned.gate is not None)
    _announce(planned, target=item.name, site=site.name, launcher=launcher, dry_run=dry_run,
              placement=placement, say=say)
    if not dry_run:
        _run(planned, image=provenance.read(project.settings.provenance_path(item.name)),
             timeout=timeout, say=say)
    return 0


def _announce(planned: CommandRun, *, target: str, site: str, launcher: bool, dry_run: bool,
              placement: Placement | None, say: Say) -> None:
    workload = planned.workload
    ranks = workload.ranks if launcher else 1
    say_plan(say, f"run: {target} on site {site}, {ranks} rank{'s' * (ranks != 1)}"
             + ("" if launcher else " (no launcher)")
             + ("" if dry_run else f", log in {os.path.relpath(workload.out_dir / 'run.log')}"),
             [*([("gate", planned.gate)] if planned.gate else []), ("run", workload.argv)],
             dry_run=dry_run, placement=placement, folder=workload.out_dir)


def _run(planned: CommandRun, *, image: BuildRecord, timeout: float | None, say: Say) -> None:
    """The gate, then the command; ``status.json`` records how it ended (a Ctrl-C too)."""
    out, gate = planned.workload.out_dir, planned.gate
    log, shown = os.path.relpath(out / "run.log"), show_command(list(planned.command))
    started = time.monotonic()
    emulated_binds(planned.workload.target.arch)  # writes the CPU folder the plan names
    try:
        logged = run_logged([*([(gate, GATE_TIMEOUT)] if gate else []),
                             (planned.workload.argv, timeout or None)], out_dir=out, say=say)
    except KeyboardInterrupt:  # Ctrl-C: the log says so, and so does status.json
        _status(planned, image, returncode=INTERRUPTED, gate=0 if gate else None,
                seconds=time.monotonic() - started, interrupted=True)
        raise
    if gate and len(logged.steps) == 1 and not logged.last.ok:
        code = 124 if logged.last.timed_out else logged.last.returncode
        _status(planned, image, returncode=None, gate=code, seconds=logged.seconds)
        said = [ln for ln in logged.lines if ln.startswith("device gate: FAIL")]
        raise VerdictFailed(
            (said[-1] if said else f"device gate: the probe in the image failed (exit {code})")
            + f"; {shown} was not started (log: {log})")
    completed, failure = logged.last, first_failure(logged.lines)
    code = command_status(completed.returncode, completed.timed_out, failure)
    _status(planned, image, returncode=code, gate=0 if gate else None,
            seconds=logged.seconds, first_failure=failure)
    if code == 0:
        say(f"run: exit 0 ({completed.seconds:.1f} s)")
        return
    where = f"rank {failure[0]} failed first (exit {failure[1]})" if failure else f"exit {code}"
    raise CommandExit(f"{shown}: {where}"
                      + (f", timed out after {timeout:.0f} s" if completed.timed_out else "")
                      + f"; log: {log}", code)


def command_status(returncode: int, timed_out: bool, failure: tuple[int, int] | None) -> int:
    """What ``invoke run`` exits with: 124 on timeout, else the failing rank's status."""
    if timed_out:
        return 124
    if returncode and failure is not None and 0 < failure[1] < 256:
        return failure[1]
    return returncode


def _fit_image(project: Project, item: Target, planned: CommandRun, *, launcher: bool,
               say: Say) -> CommandRun:
    """Refuse a launcher the image cannot start; leave out the gate where no Python."""
    if launcher and (need := command_need(planned.workload)):
        check_image(item, project.settings, need=need,
                    doing=f"invoke run's launcher ({planned.workload.launcher.name})",
                    hint="--no-launcher runs the command as one process without it")
    lacks = image_lacking(item, project.settings, PYTHON) if planned.gate else None
    if lacks:
        say(f"  no device gate: {lacks} (the gate is a Python program); the command starts "
            "without it")
        return replace(planned, gate=None)
    return planned


def _status(planned: CommandRun, image: BuildRecord, *, returncode: int | None,
            gate: int | None, seconds: float, first_failure: tuple[int, int] | None = None,
            interrupted: bool = False) -> None:
    """``status.json``, the user's alone (0644): publish takes a proof only from such a file."""
    path = planned.workload.out_dir / "status.json"
    record = {"kind": KIND, "target": planned.workload.target.name, "sha256": image.sha256,
              "command": list(planned.command), "exit_status": returncode,
              "interrupted": interrupted,
              "device_gate": None if gate is None else ("pass" if gate == 0 else "fail"),
              "first_failure": None if first_failure is None else
              {"rank": first_failure[0], "exit_code": first_failure[1]},
              "seconds": round(seconds, 3), "date": utc_now()}
    with on_disk("write the run's status", path):
        write(path, record, RunStatus, mode=0o644)


def shell(project: Project, *, target: str | None, command: Sequence[str] = (),
          dry_run: bool = False, say: Say = _print) -> int:
    """``apptainer exec`` of the image with the site's flags: a shell, or ``command``."""
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    argv = shell_argv(item, site, settings=project.settings, runtime=runtime, command=command,
                      run_id=run_stamp(), environ=shown_environ(site) if dry_run else None)
    if dry_run:
        say(show_command(argv))
        return 0
    guard_run(project, item.name, runtime)
    image = project.settings.image_path(item.name)
    if not image.is_file():
        raise ImageMissing(image, item.name)
    emulated_binds(item.arch)  # writes the CPU folder the plan names
    # The terminal is the user's: stdin, stdout and stderr are passed through, not captured.
    if code := subprocess.call(argv):
        raise CommandExit(f"{show_command(list(command)) if command else 'shell'}: exit {code}",
                          code)
    return 0
