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

from containers.app.inspecting import fit_findings
from containers.app.project import Project
from containers.app.workloads import prove
from containers.image.plan import chain_hashes
from containers.image.arch import (check_arch, check_compression, image_compression,
                                     recorded_arch, site_arches)
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
    if plan.image.is_file():  # a missing image is the publisher's to refuse
        check_compression(plan.provenance.get("squashfs")
                          or image_compression(runtime, plan.image), site,
                          image=os.path.relpath(plan.image), target=item.name)
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
                 or probing.probe(runtime, plan.image, sha256=sha,
                                  arch=plan.provenance.get("arch")))
        stack = probing.summary(facts)
        mismatch = gating.torch_mismatch(stack.get("build"), plan.gpu, plan.site.name)
        if mismatch:  # what the image is: never skipped, never accepted
            raise VerdictFailed(f"not publishing {plan.target.name} {plan.version}: {mismatch}"
                                " (--skip-checks skips the smoke, not what the image is)")
        findings = fit_findings(project, stack, plan.site, facts.get("errors"))
        for finding in findings:
            say(f"site fit ({plan.site.name}): {finding.line()}")
        problems = [f"site fit: {f.message}" for f in sitefit.errors(findings)]
        result: dict = {"fit": [f.as_dict() for f in findings], "stack": stack}
        if plan.skip_checks:  # the fit reads the image (no GPU needed): never skipped
            say("gate: the diff and busbw comparison are skipped with the checks "
                "(--skip-checks); the site fit is judged")
            result["gate"] = {"skipped": True, **accepted(plan, problems, accept, say)}
            return result
        gate_record, diff, regressions = _against_latest(plan, runtime, facts, checks, say)
        if diff is not None:
            result["diff"] = diff
        problems += regressions
        result["gate"] = {**gate_record, **accepted(plan, problems, accept, say)}
        return result
    return review


def _against_latest(plan: publisher.PublishPlan, runtime, facts: dict, checks: dict,
                    say: Say) -> tuple[dict, dict | None, list[str]]:
    """The new image against the catalogue's current ``latest`` of its target: the gate's
    record, the diff of the two images' facts (None where there is no latest, or its image is
    gone) and the busbw regression, if any."""
    before = cat.load(plan.dest / cat.CATALOGUE_NAME)
    latest = cat.latest(before, plan.target.name)
    old = cat.find(before, plan.target.name, latest) if latest else None
    gate_record: dict = {"against": latest}
    if old is None:
        say(f"gate: no published latest of {plan.target.name} to compare with")
        return gate_record, None, []
    diff = None
    if (plan.dest / old["file"]).is_file():
        diff = _diff(plan, runtime, old, latest, facts, checks)
        for line in diffing.lines(diff):
            say(f"gate: {line}")
    else:
        say(f"gate: {plan.target.name} {latest}'s image is not in {plan.dest}: no diff")
    busbw = gating.busbw_check((old.get("checks") or {}).get("smoke"), checks.get("smoke"))
    gate_record["busbw"] = busbw
    if busbw["regression"]:
        return gate_record, diff, [busbw["regression"]]
    say(f"gate: busbw {busbw.get('note') or 'within the reference tolerance'}")
    return gate_record, diff, []


def _diff(plan: publisher.PublishPlan, runtime, old: dict, latest: str, facts: dict,
          checks: dict) -> dict:
    """The diff of latest's published image (its recorded facts, else a probe) and the new one."""
    record = old.get("provenance") or {}
    old_facts = (probing.known_facts(plan.dest / old["file"], {**record, "stack": old.get("stack")})
                 or probing.probe(runtime, plan.dest / old["file"], sha256=record.get("sha256"),
                                  arch=record.get("arch")))
    return diffing.diff(
        diffing.side(f"{plan.target.name}@{latest}", old_facts,
                     size=old["size_bytes"], smoke=(old.get("checks") or {}).get("smoke")),
        diffing.side(f"{plan.target.name}@{plan.version}", facts,
                     size=plan.image.stat().st_size, smoke=checks.get("smoke")))


def accepted(plan: publisher.PublishPlan, problems: list[str], accept: str | None,
             say: Say) -> dict:
    """The gate's verdict on ``problems``: none, nothing to record; some, refused unless
    ``accept`` says why, and then who accepted what, when (the catalogue keeps it)."""
    if not problems:
        return {}
    if not accept:
        raise VerdictFailed(
            f"not publishing {plan.target.name} {plan.version}: " + "; ".join(problems)
            + "; publish with --accept-regression \"WHY\" to release it anyway "
            "(recorded in the catalogue)")
    record = {"why": accept, "problems": problems,
              "by": f"{getpass.getuser()}@{socket.gethostname()}", "date": utc_now()}
    say(f"gate: ACCEPTED by {record['by']}: {accept} ({'; '.join(problems)})")
    return {"accepted": record}


def verify(project: Project, *, dest: Path | str | None, target: str | None = None,
           as_json: bool = False, say: Say = _print) -> list[tuple]:
    """Check every published image in ``dest`` and its catalogue; the table's rows. With
    ``as_json``, one JSON document on stdout instead of the table (its shape:
    :func:`containers.publish.verify.verify`)."""
    return checking.verify(dest or "", runtime=project.runtime, target=target,
                           as_json=as_json, say=say)
