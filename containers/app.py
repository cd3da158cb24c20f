"""What each command does, as plain functions: the invoke tasks only parse flags and call these.

This is the impure edge: it gathers host facts (runtime, mirror, pip configuration, git revision,
existing images), calls the pure planners, prints, and executes. Functions take ``say`` for output
so tests can capture it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import shutil
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

from . import allocation, batch, builder, hostcfg, perflog
from .deffile import read_definition
from .locking import atomic_write_text
from .errors import CommandFailed, ConfigError, ContainersError, RuntimeNotFound
from .plan import CONTEXT_ARGS, PROVENANCE_ARGS, BuildPlan, HostFacts, chain_hashes, plan_build
from .process import capture
from .report import console, plot_busbw, plot_scaling, table
from .runtime import Runtime, assumed_runtime, find_runtime
from .schema import suggest
from .settings import Settings, load_settings
from .sites import Site, detect_site, get_site, load_sites
from .launch import Placement, Workload
from .smoke import SmokeOptions, SmokeResult, check, plan_smoke, run_smoke, summary
from .targets import Target, get_target, load_targets
from .train import TrainOptions, TrainResult, parse_scaling, plan_train, run_train, scaling_rows
from .train import check as train_check
from .train import verdict as train_verdict
from .train import with_ranks

Say = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass
class Project:
    """The project folder and its settings; targets and sites load (and validate) on first use."""

    root: Path
    settings: Settings

    @classmethod
    def load(cls, root: Path, config: Mapping[str, Any] | None = None) -> "Project":
        return cls(root=root, settings=load_settings(root, config))

    @cached_property
    def targets(self) -> dict[str, Target]:
        return load_targets(self.root)

    @cached_property
    def sites(self) -> dict[str, Site]:
        return load_sites(self.root)

    def target(self, name: str) -> Target:
        return get_target(self.targets, name)

    def site_of(self, target: Target) -> Site:
        return get_site(self.sites, target.site)

    def default_target(self) -> str:
        """The detected site's default target, else the configured default (``cpu``)."""
        site = detect_site(self.sites)
        if site is not None and site.default_target:
            return site.default_target
        return self.settings.default_target

    def runtime(self, *, required: bool = True, flavour: str = "apptainer") -> Runtime:
        try:
            return find_runtime(self.settings.runtime)
        except RuntimeNotFound:
            if required:
                raise
            return assumed_runtime(flavour)

    def current_site(self) -> Site:
        return detect_site(self.sites) or get_site(self.sites, "local")

    def runtime_for(self, site: Site, *, dry_run: bool) -> Runtime:
        """The runtime a command for ``site`` uses: this machine's, or for a dry run planned for
        another site, that site's flavour (``singularity`` on LUMI) as it would be called there."""
        if dry_run and site.name != self.current_site().name:
            return assumed_runtime(site.runtime)
        return self.runtime(required=not dry_run, flavour=site.runtime)


def git_revision(root: Path) -> str:
    try:
        revision = capture(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=20).strip()
        dirty = capture(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                        timeout=20).strip()
    except CommandFailed:
        return "unknown"
    return revision + ("-dirty" if dirty else "")


def host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def gather_host(project: Project, runtime: Runtime, names: list[str], *,
                mirror_override: str | None) -> HostFacts:
    pip = hostcfg.host_pip_config()
    if pip.cert and not Path(pip.cert).is_file():
        pip = hostcfg.PipConfig(**{**pip.__dict__, "cert": None})
    mirror = mirror_override
    if mirror is None:
        try:
            mirror = hostcfg.debian_mirror()
        except ConfigError:
            mirror = None  # only a debootstrap definition needs it; its render check says so
    return HostFacts(
        runtime=runtime, pip=pip, mirror=mirror, host_paths=tuple(pip.local_paths()),
        ca_certificates=tuple(hostcfg.extra_ca_certificates()),
        git_revision=git_revision(project.root),
        build_date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        arch=host_arch(), cotainr=_cotainr_binary(), built_hashes=builder.built_hashes(project.settings.images_dir, names))


def _cotainr_binary() -> str:
    """cotainr from PATH, else the one installed beside this Python (a venv not activated)."""
    beside = Path(sys.executable).parent / "cotainr"
    return shutil.which("cotainr") or (str(beside) if beside.is_file() else "cotainr")


def show_command(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shlex.join(argv)


# ----------------------------------------------------------------------------------- targets
def targets_report(project: Project, *, say: Say = _print) -> None:
    runtime = project.runtime(required=False)
    say(f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}")
    rows = []
    for name, target in sorted(project.targets.items()):
        image = project.settings.image_path(name)
        recorded = builder.built_hashes(project.settings.images_dir, [name]).get(name)
        try:
            current = chain_hashes(project.targets, name)[name]
        except ContainersError as exc:
            current, state = "", f"invalid: {exc}"
        else:
            state = ("built" if recorded == current else "stale" if recorded
                     else "built (no record)" if image.is_file() else "not built")
        rows.append((name, target.site, target.arch, target.gpu, target.builder,
                     os.path.relpath(image, Path.cwd()), state, current[:12]))
    console().print(table("Image targets", ("target", "site", "arch", "gpu", "builder", "image",
                                            "state", "inputs hash"), rows))


# ------------------------------------------------------------------------------------- check
def check_inputs(project: Project, *, target: str | None = None, say: Say = _print) -> None:
    """Validate everything (or one target and what it needs); raise at the first problem."""
    runtime = project.runtime(required=False)
    say(f"runtime: {runtime.label if runtime.version != 'unknown' else 'none found on PATH'}")
    sites = project.sites
    targets = project.targets
    names = [project.target(target).name] if target else sorted(targets)
    for site in sites.values():
        if site.default_target and site.default_target not in targets:
            raise ConfigError(f"default_target '{site.default_target}' is not a target",
                              path=site.path, line=site.lines.get("default_target"),
                              key="default_target")
    for name in names:
        item = targets[name]
        if item.site not in sites:
            raise ConfigError(f"site '{item.site}' has no profile in sites/"
                              f"{suggest(item.site, list(sites))}", path=item.manifest,
                              line=item.line("site"), key="site")
        chain_hashes(targets, name)
        if item.definition is not None:
            definition = read_definition(item.definition)
            missing = [a for a in definition.missing_args(item.build_args)
                       if a not in CONTEXT_ARGS and a not in PROVENANCE_ARGS]
            if missing:
                raise ConfigError(f"build argument {{{{ {missing[0]} }}}} has no value (no default "
                                  f"in %arguments, none in the manifest's build_args)",
                                  path=item.definition, line=definition.arg_lines.get(missing[0]),
                                  key=missing[0])
        say(f"ok  target {name:<14} {os.path.relpath(item.manifest)}")
    for site in sites.values():
        say(f"ok  site   {site.name:<14} {os.path.relpath(site.path)}")


# ------------------------------------------------------------------------------------- build
def build(project: Project, *, target: str, force: bool = False, dry_run: bool = False,
          build_args: Mapping[str, str] | None = None, say: Say = _print) -> BuildPlan:
    item = project.target(target)
    runtime = project.runtime(required=not dry_run)
    if item.arch != host_arch():
        raise ConfigError(
            f"target '{item.name}' is {item.arch} but this machine is {host_arch()}; an "
            f"{item.arch} image cannot be built here without emulation. Build it on an "
            f"{item.arch} node (a build job there), then copy the .sif back",
            path=item.manifest, line=item.line("arch"), key="arch")
    here = project.current_site()
    if item.builder == "apptainer" and not here.fakeroot and item.definition is not None \
            and read_definition(item.definition).has_section("post"):
        raise ConfigError(
            f"{item.definition.name} has a %post section, which needs --fakeroot, and site "
            f"'{here.name}' has none; build it with a cotainr target (builder: cotainr) or on a "
            f"machine with fakeroot, then copy the .sif", path=here.path,
            line=here.lines.get("fakeroot"), key="fakeroot")
    cli_args = dict(build_args or {})
    host = gather_host(project, runtime, [t.name for t in project.targets.values()],
                       mirror_override=cli_args.get("MIRROR"))
    plan = plan_build(project.targets, item.name, settings=project.settings, host=host,
                      cli_args=cli_args, force=force)
    say(f"runtime: {runtime.label}")
    for number, step in enumerate(plan.steps, start=1):
        say(f"step {number}/{len(plan.steps)}: {step.target.name} [{step.action}] "
            f"inputs {step.short_hash} -> {os.path.relpath(step.image)}")
        if step.action != "build":
            continue
        for name in sorted([*step.staged, *step.copied]):
            say(f"  stage  {step.workdir / 'context' / name}")
        for link, target in sorted(step.links.items()):
            say(f"  link   {link} -> {target}")
        say(f"  run    {show_command(step.build_argv, step.env)}")
        if step.test_argv:
            say(f"  run    {show_command(step.test_argv, step.env)}")
        say(f"  run    {show_command(step.inspect_argv)}")
        say(f"  rename {os.path.relpath(step.partial)} -> {os.path.relpath(step.image)} "
            f"(+ {os.path.relpath(step.image)}.json)")
    if dry_run or not plan.pending:
        if not plan.pending:
            say(f"{item.name} is up to date: nothing to build")
        return plan
    builder.execute(plan, runtime=runtime, say=say)
    return plan


# ------------------------------------------------------------------------------------- smoke
def smoke(project: Project, *, target: str | None, options: SmokeOptions, dry_run: bool = False,
          nodes: int = 1, say: Say = _print) -> SmokeResult | Workload:
    item = project.target(target or project.default_target())
    site = project.site_of(item)
    runtime = project.runtime_for(site, dry_run=dry_run)
    run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    plan = plan_smoke(item, site, settings=project.settings, runtime=runtime, options=options,
                      run_id=run_id, strict=not dry_run,
                      placement=across_nodes(nodes, dry_run=dry_run))
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
    record = summary(result, image_record=builder.read_provenance(
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


# ------------------------------------------------------------------------------------- train
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
    placement = across_nodes(nodes, dry_run=dry_run)
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


# --------------------------------------------------------------------------------- multi-node
def across_nodes(nodes: int, *, dry_run: bool = False,
                 environ: Mapping[str, str] | None = None) -> Placement | None:
    """``--nodes M``: one torchrun per node of the Slurm allocation we are in, through srun
    (None: this node only). A dry run outside an allocation shows the variables it would use."""
    environ = os.environ if environ is None else environ
    found = allocation.current_allocation(environ)
    if dry_run and found is None and nodes > 1:
        return Placement(nodes=nodes, endpoint="$FIRST_NODE_ADDR:$MASTER_PORT",
                         rdzv_id="$SLURM_JOB_ID", launcher=tuple(allocation.srun_argv(nodes)))
    allocation.check_nodes(nodes, found)
    if nodes == 1 or found is None:
        return None
    return allocation.placement(found, nodes, head=allocation.head_address(found.nodelist))


# --------------------------------------------------------------------------------------- job
@dataclass(frozen=True)
class JobSubmission:
    """A rendered batch job, where its script was written, and its job id once submitted."""

    job: batch.Job
    script: Path | None = None
    job_id: str | None = None


def job(project: Project, *, target: str | None, workload: str, site: str | None = None,
        nodes: int = 1, gpus_per_node: int | None = None, time: str | None = None,
        account: str | None = None, partition: str | None = None, launcher: str | None = None,
        out: str | Path | None = None, submit: bool = False, nccl_debug: bool = False,
        options: SmokeOptions | TrainOptions | None = None,
        say: Say = _print) -> JobSubmission:
    """Render the batch job for a site; print it, write it (atomically) or submit it."""
    item = project.target(target or project.default_target())
    where = get_site(project.sites, site) if site else project.site_of(item)
    home = project.targets.get(where.default_target or "")
    request = batch.JobRequest(workload=workload, nodes=int(nodes), gpus_per_node=gpus_per_node,
                               time=time, account=account, partition=partition,
                               launcher=launcher, nccl_debug=nccl_debug, options=options)
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
    planned = batch.plan_job(item, where, settings=project.settings, request=request,
                             host_arch=host_arch(), site_arch=home.arch if home else None,
                             venv=venv)
    jobs_dir = project.settings.results_dir / "jobs"
    script = Path(out).resolve() if out else None
    if submit and script is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        script = jobs_dir / f"{planned.name}-{stamp}.sh"
    if script is None:
        say(planned.text.rstrip("\n"))
        return JobSubmission(job=planned)
    jobs_dir.mkdir(parents=True, exist_ok=True)  # the scheduler writes the job's output there
    atomic_write_text(script, planned.text)
    script.chmod(0o755)
    say(f"wrote {os.path.relpath(script)} ({planned.scheduler.submit_command} it to run)")
    if not submit:
        return JobSubmission(job=planned, script=script)
    if workload != "build" and not project.settings.image_path(item.name).is_file():
        raise ConfigError(f"image {os.path.relpath(project.settings.image_path(item.name))} is "
                          f"not built; build it first (on a login node, or as a job: invoke job "
                          f"--target {item.name} --workload build --submit)")
    job_id = planned.scheduler.parse_job_id(
        capture(planned.scheduler.submit_argv(script), timeout=120))
    results = planned.results_of(job_id)
    say(f"submitted job {job_id}: output {os.path.relpath(planned.output_of(job_id))}"
        + (f", results {os.path.relpath(results)}" if results else ""))
    return JobSubmission(job=planned, script=script, job_id=job_id)
