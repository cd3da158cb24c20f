"""``invoke publish`` and ``invoke verify``: the project's side of publishing.

Publishing itself (:mod:`containers.publish`) takes plain values; this gathers them from the
project (target, site, settings, runtime) and hands over the one check it cannot run on its own:
a quick 2-rank smoke of the image through :func:`containers.app.workloads.prove`, which writes
the ``verdict.json`` publishing then finds by the image's sha256.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path

from containers.app.project import Project
from containers.app.workloads import prove
from containers.image.plan import chain_hashes
from containers.image.arch import check_arch, recorded_arch, site_arches
from containers.inputs.recipes import Target
from containers.prove.smoke import SmokeOptions
from containers.errors import UsageError, VerdictFailed
from containers.host.facts import utc_now
from containers.image import inspect as probing, sitefit
from containers.publish import catalogue as cat, diff as diffing, gate as gating, publisher, \
    verify as checking
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
    request = publisher.PublishRequest(target=target or "", dest=dest or "", version=version,
                                       sign=sign, keep=keep, group=group, force=force,
                                       skip_checks=skip_checks)
    item = project.target(request.target)
    site = project.site_of(item)
    plan = publisher.plan_publish(request, target=item, site=site, settings=project.settings,
                                  inputs_hash=chain_hashes(project.targets, item.name)[item.name])
    runtime = project.runtime(flavour=site.runtime)
    check_arch(recorded_arch(plan.provenance, plan.image, runtime),
               site_arches(site, project.targets), image=os.path.relpath(plan.image),
               where=f"site {site.name}", doing="publishing")
    return publisher.publish(plan, runtime, quick_check=quick_smoke(project, item), say=say,
                             review=release_review(project, runtime, accept_regression))


def release_review(project: Project, runtime, accept: str | None) -> publisher.Review:
    """The release gate publish runs once the checks passed (:mod:`containers.publish.gate`):
    the new image's site fit, the diff against the current ``latest`` (printed, and kept beside
    the version), and its smoke busbw against latest's. A fit error or a busbw regression
    refuses the version unless ``accept`` (``--accept-regression WHY``) says why it may go out;
    the entry records the findings and who accepted what."""
    def review(plan: publisher.PublishPlan, checks: dict, say: Say) -> dict:
        sha = plan.provenance.get("sha256")
        facts = (probing.known_facts(plan.image, plan.provenance)
                 or probing.probe(runtime, plan.image, sha256=sha))
        stack = probing.summary(facts)
        findings = sitefit.judge(stack, site_name=plan.site.name, site_gpu=plan.site.gpus.kind,
                                 arches=site_arches(plan.site, project.targets),
                                 fit=plan.site.fit,
                                 probe_errors=facts.get("errors"), gpus=plan.site.gpus)
        for finding in findings:
            say(f"site fit ({plan.site.name}): {finding.line()}")
        problems = [f"site fit: {f.message}" for f in sitefit.errors(findings)]
        before = cat.load(plan.dest / cat.CATALOGUE_NAME)
        latest = cat.latest(before, plan.target.name)
        old = cat.find(before, plan.target.name, latest) if latest else None
        result: dict = {"fit": [f.as_dict() for f in findings], "stack": stack}
        gate_record: dict = {"against": latest}
        if old is not None and (plan.dest / old["file"]).is_file():
            old_sha = (old.get("provenance") or {}).get("sha256")
            old_facts = (probing.known_facts(plan.dest / old["file"],
                                             {**(old.get("provenance") or {}),
                                              "stack": old.get("stack")})
                         or probing.probe(runtime, plan.dest / old["file"], sha256=old_sha))
            result["diff"] = diffing.diff(
                diffing.side(f"{plan.target.name}@{latest}", old_facts,
                             size=old["size_bytes"], smoke=(old.get("checks") or {}).get("smoke")),
                diffing.side(f"{plan.target.name}@{plan.version}", facts,
                             size=plan.image.stat().st_size, smoke=checks.get("smoke")))
            for line in diffing.lines(result["diff"]):
                say(f"gate: {line}")
        elif old is not None:
            say(f"gate: {plan.target.name} {latest}'s image is not in {plan.dest}: no diff")
        if old is not None:
            busbw = gating.busbw_check((old.get("checks") or {}).get("smoke"),
                                       checks.get("smoke"))
            gate_record["busbw"] = busbw
            if busbw["regression"]:
                problems.append(busbw["regression"])
            else:
                say(f"gate: busbw {busbw.get('note') or 'within the reference tolerance'}")
        else:
            say(f"gate: no published latest of {plan.target.name} to compare with")
        if problems and not accept:
            raise VerdictFailed(
                f"not publishing {plan.target.name} {plan.version}: " + "; ".join(problems)
                + "; publish with --accept-regression \"WHY\" to release it anyway "
                "(recorded in the catalogue)")
        if problems:
            gate_record["accepted"] = {"why": accept, "problems": problems,
                                       "by": f"{getpass.getuser()}@{socket.gethostname()}",
                                       "date": utc_now()}
            say(f"gate: ACCEPTED by {gate_record['accepted']['by']}: {accept} "
                f"({'; '.join(problems)})")
        result["gate"] = gate_record
        return result
    return review


def verify(project: Project, *, dest: Path | str | None, target: str | None = None,
           as_json: bool = False, say: Say = _print) -> list[tuple]:
    """Check every published image in ``dest`` and its catalogue; the table's rows. With
    ``as_json``, one JSON document on stdout instead of the table (its shape:
    :func:`containers.publish.verify.verify`)."""
    return checking.verify(dest or "", runtime=project.runtime, target=target,
                           as_json=as_json, say=say)
