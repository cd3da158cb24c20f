"""``invoke build``: plan a target and its bases, show the exact commands, then build."""

from __future__ import annotations

import os
from typing import Mapping

from containers.app.inspecting import examine_built
from containers.app.project import Project
from containers.errors import ConfigError
from containers.host.facts import host_arch
from containers.image import builder
from containers.image.cache import gather_cache
from containers.image.arch import emulation
from containers.image.gather import gather_host
from containers.image.plan import (STAGED_DEFINITION, BuildPlan, BuildStep, fakeroot_refusal,
                                     plan_build)
from containers.inputs.builders import builder_of
from containers.inputs.recipes import Target
from containers.inputs.validate import example_findings, host_path_policy
from containers.report import Say, say_line as _print, show_command


def foreign_build(item: Target, *, dry_run: bool) -> str | None:
    """For a foreign target: how it builds here, or a refusal without qemu-user."""
    here = host_arch()
    if item.arch == here:
        return None
    missing = emulation(item.arch)
    where = (f"build it on an {item.arch} machine (invoke build --target {item.name} there, or "
             f"a build job: invoke job --workload build --target {item.name}), then copy the "
             f".sif back")
    if missing is None:
        return (f"target {item.name} is {item.arch}, this machine {here}: building under qemu "
                f"emulation (slow; natively: {where})")
    if dry_run:
        return (f"target {item.name} is {item.arch}, this machine {here} without emulation "
                f"({missing}); {where}")
    raise ConfigError(f"target '{item.name}' is {item.arch} but this machine is {here} and "
                      f"cannot emulate it: {missing}; or {where}",
                      path=item.manifest, line=item.line("arch"), key="arch")


def cache_line(step: BuildStep, *, no_cache: bool) -> str:
    """The plan's line on the package cache of one build: used (how, where) or why not."""
    if step.package_cache is not None:
        return f"  cache  {step.cache_use}"
    if no_cache:
        return "  cache  not used (--no-cache): every package is fetched afresh"
    return "  cache  not used: this build fetches nothing the package cache keeps"


def build(project: Project, *, target: str, force: bool = False, dry_run: bool = False,
          build_args: Mapping[str, str] | None = None, no_cache: bool = False,
          say: Say = _print) -> BuildPlan:
    item = project.target(target)
    runtime = project.runtime(required=not dry_run)
    foreign = foreign_build(item, dry_run=dry_run)
    if (refusal := fakeroot_refusal(item, project.current_site())) is not None:
        raise refusal
    cli_args = dict(build_args or {})
    try:
        cache = gather_cache(project.settings.cache_dir, use=not no_cache,
                             group=project.settings.cache_group,
                             keep_roots=project.settings.keep_roots)
    except ConfigError as exc:
        raise project.setting_error(exc) from exc
    host = gather_host(project.root, project.settings.images_dir, runtime,
                       [t.name for t in project.targets.values()],
                       mirror_override=cli_args.get("MIRROR"), package_cache=cache)
    plan = plan_build(project.targets, item.name, settings=project.settings, host=host,
                      cli_args=cli_args, force=force)
    say(f"runtime: {runtime.label}")
    for step in plan.pending:  # errors were raised while planning; warnings and infos as check
        _, warnings, infos = example_findings(step.target)  # says them (torch as this build's)
        for warning in [*host_path_policy(step.target)[1], *warnings]:
            say(f"warning: {warning}")
        for info in infos:
            say(f"info: {info}")
    if foreign:
        say(foreign)
    for number, step in enumerate(plan.steps, start=1):
        say(f"step {number}/{len(plan.steps)}: {step.target.name} [{step.action}] "
            f"inputs {step.short_hash} -> {os.path.relpath(step.image)}")
        if step.action == "build":
            _describe_build(step, no_cache=no_cache, say=say)
    if not dry_run:
        for step in plan.pending:
            builder_of(step.target).check_base_image(step.target, step.inputs)
    if dry_run or not plan.pending:
        if not plan.pending:
            say(f"{item.name} is up to date: nothing to build")
        return plan
    builder.execute(plan, runtime=runtime, say=say, examine=examine_built(project))
    return plan


def _describe_build(step: BuildStep, *, no_cache: bool, say: Say) -> None:
    """What a build step will do, as the commands it runs (``--dry-run`` shows only this)."""
    say(f"  work   {step.workdir}-XXXXXXXX (made fresh for this build; the paths below "
        f"show it as {step.workdir.name})")
    if step.definition is not None:
        say(f"  stage  {step.workdir / STAGED_DEFINITION} ({step.target.definition}, labelled)")
    for name in sorted([*step.staged, *step.copied]):
        say(f"  stage  {step.workdir / 'context' / name}")
    for link, target in sorted(step.links.items()):
        say(f"  link   {link} -> {target}")
    say(cache_line(step, no_cache=no_cache))
    say(f"  run    {show_command(step.build_argv, step.env)}")
    if step.test_argv:
        say(f"  run    {show_command(step.test_argv, step.env)}")
    say(f"  run    {show_command(step.inspect_argv)}")
    say(f"  probe  {step.image.name}'s python runs containers/image/probe_script.py (one "
        f"exec): its SBOM, and its fit to site {step.target.site} (an error fails the build)")
    say(f"  rename {os.path.relpath(step.partial)} -> {os.path.relpath(step.image)} "
        f"(+ {os.path.relpath(step.image)}.json, .cdx.json)")
