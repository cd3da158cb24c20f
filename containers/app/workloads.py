"""``invoke smoke`` and ``invoke train``: run a workload in the image, judge it, report it."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Callable, Sequence

from containers.app.project import Project
from containers.errors import ImageMissing, UsageError, on_disk
from containers.files import atomic_write_text
from containers.host.facts import Machine, fit_problem, gpu_memory, run_stamp, this_machine
from containers.image import provenance
from containers.host.runtime import Runtime
from containers.image.arch import check_arch, machine_arches, recorded_arch
from containers.inputs.sites import HOST_VAR, Gpu, Site
from containers.prove import perflog, verdict
from containers.prove.kind import Options, plan
from containers.prove.train import TrainOptions, scaling_rows
from containers import records
from containers.records import Verdict
from containers.report import (Say, comment, commenting, deferred, plot_scaling,
                               say_line as _print, show_command, show_table)
from containers.run import allocation
from containers.run.needs import TORCH, check_image
from containers.run.workload import Placement, Workload
from containers.unique import claim_folder


def prove(project: Project, *, target: str | None, options: Options, dry_run: bool = False,
          nodes: int = 1, force: bool = False, say: Say = _print) -> verdict.Result | Workload:
    """One run of ``options``' kind; raises for a failed gate once its verdict is written."""
    (outcome,) = _runs(project, target=target, runs=[(options, run_stamp())], dry_run=dry_run,
                       nodes=nodes, force=force, say=say)
    if isinstance(outcome, verdict.Result):
        verdict.check(outcome)
    return outcome


def train(project: Project, *, target: str | None, options: TrainOptions,
          scaling: Sequence[int] | None = None, dry_run: bool = False, nodes: int = 1,
          force: bool = False, say: Say = _print) -> list[verdict.Result | Workload]:
    """One training run, or one per rank count of ``scaling`` with a speedup report."""
    stamp = run_stamp()
    counts = scaling or [options.gpus]
    runs = [(dataclasses.replace(options, gpus=n), f"{stamp}-{n}r" if scaling else stamp)
            for n in counts]
    results = _runs(project, target=target, runs=runs, dry_run=dry_run, nodes=nodes, force=force,
                    say=say)
    if dry_run:
        return results
    if scaling:
        _scaling_report(project, results, options=options, stamp=stamp, say=say)
    for result in results:
        verdict.check(result)
    return results


def smoke_history(project: Project, *, target: str | None, as_json: bool = False,
                  plot: bool = True, ops: Sequence[str] | None = None,
                  say: Say = _print) -> list[dict]:
    """The perflog as a table and a PNG, or one JSON document; ``ops``: only these."""
    records = perflog.read(project.settings.perflog_dir, target=target, ops=ops)
    shown = ", ".join(ops) if ops else None
    if not records and not as_json:  # nothing recorded yet is an answer, not an error
        say(f"no smoke runs recorded yet in {os.path.relpath(project.settings.perflog_dir)}"
            + (f" for target {target}" if target else "") + (f" of {shown}" if shown else "")
            + "; each invoke smoke adds one")
        return records
    png = None
    if records and plot:
        named = "" if not ops else "-op-" + ("+".join(ops) if len(ops) < 3 else f"{len(ops)}-ops")
        with on_disk("write the history plot", project.settings.perflog_dir):
            png = perflog.plot_history(records, project.settings.perflog_dir /
                                       f"history-{target or 'all'}{named}.png",
                                       title=f"{shown or 'collective'} busbw history: "
                                             f"{target or 'all targets'}")
    if as_json:
        say(json.dumps({"target": target, "ops": list(ops) if ops else None,
                        "perflog_dir": str(project.settings.perflog_dir),
                        "plot": str(png) if png else None,
                        "runs": perflog.history_json(records)}, indent=2))
        return records
    show_table(f"smoke history ({len(records)} runs)", perflog.HISTORY_COLUMNS,
                          perflog.history_rows(records))
    if png:
        say(f"plot: {os.path.relpath(png)}")
    return records


def shown_environ(site: Site) -> dict[str, str]:
    """os.environ plus a :func:`deferred` marker (expanded where pasted) per unset site variable."""
    environ = dict(os.environ)
    for text in (*site.env.values(), *site.binds, *site.transport.binds,
                 *site.transport.env.values()):
        for match in HOST_VAR.finditer(text):
            name = match.group(1) or match.group(2)
            if name and name not in environ:
                environ[name] = deferred(name)
    return environ


def say_plan(say: Say, header: str, steps: Sequence[tuple[str, list[str]]], *,
             dry_run: bool, placement: Placement | None, notes: Sequence[str] = (),
             folder: Path | None = None) -> None:
    """A run as it starts; a dry run's lines paste into ``salloc`` as they are."""
    if not dry_run:
        say(header)
        for label, argv in steps:
            say(f"  {label:<4} {show_command(argv)}")
        for note in notes:
            say(f"  {note}")
        return
    say(comment(header))
    for note in notes:
        say(comment(note))
    for line in allocation.shown_lines(placement):
        say(line)
    if folder is not None:
        say(comment("the results folder the run binds (a real run claims a new one)"))
        say(show_command(["mkdir", "-p", str(folder)]))
    for label, argv in steps:
        say(comment(label))
        say(show_command(argv))


def machine_here(gpu: Gpu) -> Callable[[bool], Machine]:
    """This machine as :func:`check_fits` reads it, probed once, on first use."""
    @functools.cache
    def machine(with_gpu_memory: bool) -> Machine:
        if with_gpu_memory and gpu == Gpu.CUDA:
            return dataclasses.replace(machine(False), gpu_memory=gpu_memory())
        return this_machine(gpu, with_gpu_memory=False)
    return machine


def check_fits(workload: Workload, options: Options, site: Site, *,
               machine: Callable[[bool], Machine], force: bool, say: Say) -> None:
    """Refuse in one line a run this machine cannot hold (``--force`` runs it anyway)."""
    largest = getattr(options, "largest_size", None)
    problem = fit_problem(ranks=workload.ranks, largest=largest, gpu=site.gpus.kind,
                          machine=machine(bool(largest)))
    if problem and force:
        say(f"  warning: {problem} (running anyway: --force)")
    elif problem:
        raise UsageError(f"{problem}; --force runs it anyway")


def _runs(project: Project, *, target: str | None, runs: Sequence[tuple[Options, str]],
          dry_run: bool, nodes: int, say: Say,
          force: bool = False) -> list[verdict.Result | Workload]:
    """Plan, show and (unless ``dry_run``) run and record each ``(options, run id)``."""
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    placement = allocation.across_nodes(nodes, dry_run=dry_run, scheduler=site.scheduler)
    partition = os.environ.get("SLURM_JOB_PARTITION") or site.default_partition
    here = placement is None and (not dry_run or site.name == project.current_site().name)
    machine = machine_here(site.gpus.kind)  # probed only if a run is checked, once for them all
    first = runs[0][0]  # every run is of one kind: an image without torch runs none of them
    check_image(item, project.settings, need=TORCH, doing=first.kind.title(first))
    if not dry_run:
        guard_run(project, item.name, runtime)
    done: list[verdict.Result | Workload] = []
    for options, run_id in runs:
        kind = options.kind
        planned = functools.partial(plan, item, site, settings=project.settings,
                                    runtime=runtime, options=options, strict=not dry_run,
                                    placement=placement,
                                    environ=shown_environ(site) if dry_run else None)
        workload = planned(run_id=run_id)
        if here:
            check_fits(workload, options, site, machine=machine, force=force,
                       say=commenting(say) if dry_run else say)
        if not dry_run:  # two runs started in the same second never share a folder
            if not workload.image.is_file():  # refused before a folder is claimed for it
                raise ImageMissing(workload.image, item.name)
            claimed = claim_folder(workload.out_dir.parent, workload.out_dir.name)
            if claimed != workload.out_dir.name:
                workload = planned(run_id=claimed.removeprefix(f"{item.name}-"))
        say_plan(say, f"{kind.title(options)}: {item.name} on site {site.name}, "
                 f"{workload.ranks} ranks, results in {os.path.relpath(workload.out_dir)}",
                 [("run", workload.argv)], dry_run=dry_run, placement=placement,
                 notes=[workload.cores_note] if workload.cores_note else [],
                 folder=workload.out_dir)
        if dry_run:
            done.append(workload)
            continue
        result = verdict.run(kind, workload, say=say, partition=partition)
        _record(project, result, say=say)
        done.append(result)
    return done


def guard_run(project: Project, target: str, runtime: Runtime) -> None:
    """Refuse an image whose architecture this machine neither is nor emulates."""
    image = project.settings.image_path(target)
    if image.is_file():
        record = provenance.read(project.settings.provenance_path(target))
        check_arch(recorded_arch(record, image, runtime), machine_arches(),
                   image=os.path.relpath(image), where="this machine", doing="running")


def _record(project: Project, result: verdict.Result, *, say: Say) -> None:
    out = result.plan.out_dir
    with on_disk("write the run's reports", out):
        for path in result.kind.write_reports(result):
            say(f"plot: {os.path.relpath(path)}")
    for word, path in result.kind.report_files(result):
        say(f"{word}: {os.path.relpath(path)}")
    record = verdict.record(result, image_record=provenance.read(
        project.settings.provenance_path(result.plan.target.name)))
    with on_disk("write the verdict", out / "verdict.json"):
        written = records.write(out / "verdict.json", record, Verdict)
    for line in result.kind.perflog_records(record):  # kept as made (no schema)
        path = perflog.append(project.settings.perflog_dir, line)
        say(f"perflog: {os.path.relpath(path)}"
            + (f" ({line['op']})" if len(written.collectives or {}) > 1 else ""))
    for line in verdict.gate_lines(written):
        say(line)


def _scaling_report(project: Project, results: list[verdict.Result], *,
                    options: TrainOptions, stamp: str, say: Say) -> Path:
    rows = scaling_rows(results)
    name = results[0].plan.target.name
    out = project.settings.results_dir / options.kind.folder(options) / f"{name}-{stamp}-scaling"
    atomic_write_text(out / "scaling.json", records.json_text(
        {"target": name, "example": options.example, "rows": rows}))
    show_table(
        f"scaling: {options.example} on {name}", ("ranks", "samples/s", "speedup",
                                                  "efficiency", "verdict"),
        [(r["ranks"], _fmt(r["throughput"], ".1f"), _fmt(r["speedup"], ".2f") + "x",
          _fmt(r["efficiency"] and r["efficiency"] * 100, ".0f") + " %",
          "PASS" if r["passed"] else "FAIL") for r in rows])
    png = plot_scaling(rows, out / "scaling.png", title=f"{options.example} scaling on {name}")
    say(f"json: {os.path.relpath(out / 'scaling.json')}\nplot: {os.path.relpath(png)}")
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
