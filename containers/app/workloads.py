"""``invoke smoke`` and ``invoke train``: run a workload in the image, judge it, report it."""

from __future__ import annotations

import datetime
import json
import os

from containers.app.project import Project
from containers.build import provenance
from containers.errors import ConfigError
from containers.files import atomic_write_text
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.sites import Site
from containers.prove import perflog
from containers.prove.smoke import SmokeOptions, SmokeResult, check, plan_smoke, run_smoke, summary
from containers.prove.train import (TrainOptions, TrainResult, check as train_check, parse_scaling,
                                    plan_train, run_train, scaling_rows, verdict as train_verdict,
                                    with_ranks)
from containers.report import (Say, console, plot_busbw, plot_scaling, say_line as _print,
                               show_command, table)
from containers.run import allocation
from containers.run.workload import Placement, Workload


def smoke(project: Project, *, target: str | None, options: SmokeOptions, dry_run: bool = False,
          nodes: int = 1, say: Say = _print) -> SmokeResult | Workload:
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    plan = plan_smoke(item, site, settings=project.settings, runtime=runtime, options=options,
                      run_id=run_id, strict=not dry_run,
                      placement=allocation.across_nodes(nodes, dry_run=dry_run))
    say(f"smoke: {item.name} on site {site.name}, {plan.ranks} ranks, results in "
        f"{os.path.relpath(plan.out_dir)}")
    say(f"  run  {show_command(plan.argv)}")
    if dry_run:
        return plan
    partition = os.environ.get("SLURM_JOB_PARTITION") or site.default_partition
    result = run_smoke(plan, say=say, partition=partition)
    if result.rows:
        png = plot_busbw(result.report, plan.out_dir / "allreduce.png",
                         title=f"all_reduce busbw: {item.name}, {plan.ranks} ranks, "
                               f"{result.report.get('backend', '?')}")
        say(f"plot: {os.path.relpath(png)}")
    say(f"json: {os.path.relpath(plan.out_dir / 'allreduce.json')}")
    record = summary(result, image_record=provenance.read(
        project.settings.provenance_path(item.name)))
    atomic_write_text(plan.out_dir / "verdict.json", json.dumps(record, indent=2) + "\n")
    log = perflog.append(project.settings.perflog_dir, record)
    say(f"perflog: {os.path.relpath(log)}")
    reasons = record["reasons"]
    transport = record["transport"]
    if transport is not None:
        say(f"transport:   {'ok' if transport['ok'] else 'FAIL'}: {transport['message']}")
    say("sanity:      " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons)))
    performance = record["performance"]
    say(f"performance: {performance['state'].upper()}: {performance['message']}")
    check(result)
    return result


def smoke_history(project: Project, *, target: str | None, say: Say = _print) -> list[dict]:
    """The perflog as a table and a PNG: busbw at the reference size per image version."""
    records = perflog.read(project.settings.perflog_dir, target=target)
    if not records:
        raise ConfigError(f"no smoke runs recorded in {project.settings.perflog_dir}"
                          + (f" for target {target}" if target else ""))
    console().print(table(f"smoke history ({len(records)} runs)", perflog.HISTORY_COLUMNS,
                          perflog.history_rows(records)))
    png = perflog.plot_history(records, project.settings.perflog_dir /
                               f"history-{target or 'all'}.png",
                               title=f"all_reduce busbw history: {target or 'all targets'}")
    say(f"plot: {os.path.relpath(png)}")
    return records


def _train_once(project: Project, item: Target, site: Site, runtime: Runtime,
                options: TrainOptions, run_id: str, dry_run: bool, say: Say,
                placement: Placement | None = None) -> TrainResult | Workload:
    plan = plan_train(item, site, settings=project.settings, runtime=runtime, options=options,
                      run_id=run_id, strict=not dry_run, placement=placement)
    say(f"train: {options.example} on {item.name} (site {site.name}), {plan.ranks} ranks, "
        f"results in {os.path.relpath(plan.out_dir)}")
    say(f"  run  {show_command(plan.argv)}")
    if dry_run:
        return plan
    result = run_train(plan, say=say)
    reasons = train_verdict(result)
    say("verdict: " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons)))
    return result


def train(project: Project, *, target: str | None, options: TrainOptions,
          scaling: str | None = None, dry_run: bool = False, nodes: int = 1,
          say: Say = _print) -> list[TrainResult | Workload]:
    """One training run, or one per rank count of ``scaling`` with a speedup report."""
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    counts = parse_scaling(scaling) if scaling else [options.gpus]
    placement = allocation.across_nodes(nodes, dry_run=dry_run)
    results = [_train_once(project, item, site, runtime, with_ranks(options, n),
                           f"{stamp}-{n}r" if scaling else stamp, dry_run, say, placement)
               for n in counts]
    if dry_run:
        return results
    if scaling:
        rows = scaling_rows(results)
        out = project.settings.results_dir / f"train-{options.example}" / \
            f"{item.name}-{stamp}-scaling"
        atomic_write_text(out / "scaling.json", json.dumps(
            {"target": item.name, "example": options.example, "rows": rows}, indent=2) + "\n")
        console().print(table(
            f"scaling: {options.example} on {item.name}", ("ranks", "samples/s", "speedup",
                                                            "efficiency", "verdict"),
            [(r["ranks"], _fmt(r["throughput"], ".1f"), _fmt(r["speedup"], ".2f") + "x",
              _fmt(r["efficiency"] and r["efficiency"] * 100, ".0f") + " %",
              "PASS" if r["passed"] else "FAIL") for r in rows]))
        png = plot_scaling(rows, out / "scaling.png",
                           title=f"{options.example} scaling on {item.name}")
        say(f"json: {os.path.relpath(out / 'scaling.json')}\nplot: {os.path.relpath(png)}")
    for result in results:
        train_check(result)
    return results


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
