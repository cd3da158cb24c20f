"""``invoke publish`` and ``invoke verify``: the project's side of publishing.

:mod:`containers.publish` takes plain values; this gathers them, and the quick smoke it cannot run.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from containers.app.inspecting import fit_findings
from containers.app.project import Project
from containers.app.workloads import prove
from containers.batch.frame import example_preamble
from containers.errors import UsageError
from containers.host.runtime import Runtime
from containers.image.arch import (check_arch, check_compression, image_compression,
                                     recorded_arch, site_arches)
from containers.image.identity import chain_hashes
from containers.inputs.recipes import Target
from containers.prove.smoke import SmokeOptions
from containers.publish import decision, planning, publisher, verify as checking
from containers.publish.checks import QuickCheck
from containers.report import Say, say_line as _print

# Enough to prove ranks talk and sum correctly; the bandwidth table is `invoke smoke`'s job.
QUICK_SMOKE = SmokeOptions(gpus=2, sizes="4K:256K", iters=3, warmup=1, timeout=300)


def quick_smoke(project: Project, target: Target) -> QuickCheck:
    """The check publishing runs when no passing verdict exists for the image: a short smoke."""
    def run(say: Say) -> None:
        say(f"quick check: a {QUICK_SMOKE.gpus}-rank smoke test of {target.name}")
        prove(project, target=target.name, options=QUICK_SMOKE, say=say)
    return run


def publish(project: Project, *, target: str | None, dest: Path | str | None,
            version: str | None = None, sign: bool = False, keep: int | None = None,
            group: str | None = None, force: bool = False, skip_checks: bool = False,
            accept_regression: str | None = None, say: Say = _print) -> dict:
    """Check, copy, sign, checksum, catalogue and module-file one image; its catalogue entry."""
    if accept_regression is not None and not accept_regression.strip():
        raise UsageError("say why the regression is accepted (it is recorded)",
                         flag="--accept-regression")
    request = planning.PublishRequest(target=target or "", dest=dest or "", version=version,
                                       sign=sign, keep=keep, group=group, force=force,
                                       skip_checks=skip_checks)
    item = project.target(request.target)
    site = project.site_of(item)
    plan = planning.plan_publish(request, target=item, site=site, settings=project.settings,
                                  inputs_hash=chain_hashes(project.targets, item.name)[item.name])
    preamble = example_preamble(site, item.name)
    plan = replace(plan, batch_preamble=tuple(preamble) if preamble is not None else None)
    runtime = project.runtime(flavour=site.runtime)
    check_arch(recorded_arch(plan.provenance, plan.image, runtime),
               site_arches(site, project.targets), image=os.path.relpath(plan.image),
               where=f"site {site.name}", doing="publishing")
    if plan.image.is_file():  # a missing image is the publisher's to refuse
        check_compression(plan.provenance.squashfs
                          or image_compression(runtime, plan.image), site,
                          image=os.path.relpath(plan.image), target=item.name)
    return publisher.publish(plan, runtime, quick_check=quick_smoke(project, item), say=say,
                             review=release_review(project, runtime, accept_regression))


def release_review(project: Project, runtime: Runtime, accept: str | None) -> planning.Review:
    return decision.release_review(
        runtime, accept, fit=lambda stack, site, errors: fit_findings(project, stack, site, errors))


def verify(project: Project, *, dest: Path | str | None, target: str | None = None,
           as_json: bool = False, say: Say = _print) -> list[tuple]:
    return checking.verify(dest or "", runtime=project.runtime, target=target,
                           as_json=as_json, say=say)
