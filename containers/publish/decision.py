"""The release decision: whether a checked image may go out as a new version of its target."""

from __future__ import annotations

import getpass
import socket
from typing import Callable

from containers.errors import VerdictFailed
from containers.host.facts import utc_now
from containers.host.runtime import Runtime
from containers.image import inspect as probing, sitefit
from containers.inputs.sites import Site
from containers.publish import catalogue as cat, diff as diffing, gate as gating
from containers.publish.planning import PublishPlan, Review
from containers.records import BuildRecord, CatalogueEntry, Checks, SmokeSummary
from containers.report import Say

#: The site-fit findings of an image's stack (and its probe's errors) against a site.
Fit = Callable[[dict, Site, object], list[sitefit.Finding]]


def release_review(runtime: Runtime, accept: str | None, *, fit: Fit) -> Review:
    """Site fit, diff and busbw against ``latest``; an error refuses unless ``accept`` says why."""
    def review(plan: PublishPlan, checks: dict, say: Say) -> dict:
        built = BuildRecord.of(plan.provenance, source=plan.image)
        facts = (probing.known_facts(plan.image, built)
                 or probing.probe(runtime, plan.image, sha256=built.sha256, arch=built.arch))
        stack = probing.summary(facts)
        mismatch = None if sitefit.holds_no_torch(stack, facts.get("errors")) else \
            gating.torch_mismatch(stack.get("build"), plan.gpu, plan.site.name)
        if mismatch:  # a torch for other GPUs (none: judged by its %test); never accepted
            raise VerdictFailed(f"not publishing {plan.target.name} {plan.version}: {mismatch}"
                                " (--skip-checks skips the smoke, not what the image is)")
        findings = fit(stack, plan.site, facts.get("errors"))
        for finding in findings:
            say(f"site fit ({plan.site.name}): {finding.line()}")
        problems = [f"site fit: {f.message}" for f in sitefit.errors(findings)]
        result: dict = {"fit": [f.as_dict() for f in findings], "stack": stack}
        if plan.skip_checks:  # the fit reads the image (no GPU needed): never skipped
            say("gate: the diff and busbw comparison are skipped with the checks "
                "(--skip-checks); the site fit is judged")
            result["gate"] = {"skipped": True, **accepted(plan, problems, accept, say)}
            return result
        gate_record, diff, regressions = against_latest(plan, runtime, facts, checks, say)
        if diff is not None:
            result["diff"] = diff
        problems += regressions
        result["gate"] = {**gate_record, **accepted(plan, problems, accept, say)}
        return result
    return review


def against_latest(plan: PublishPlan, runtime, facts: dict, checks: dict,
                    say: Say) -> tuple[dict, dict | None, list[str]]:
    """The new image against ``latest``: the gate's record, the diff, any regression."""
    before = cat.load(plan.dest / cat.CATALOGUE_NAME)
    latest = cat.latest(before, plan.target.name)
    old = cat.find(before, plan.target.name, latest) if latest else None
    gate_record: dict = {"against": latest}
    if old is None:
        say(f"gate: no published latest of {plan.target.name} to compare with")
        return gate_record, None, []
    diff, smokes = None, ((old.checks or Checks()).smoke, Checks.model_validate(checks).smoke)
    if (plan.dest / old.file).is_file():
        diff = _diff(plan, runtime, old, latest, facts, smokes)
        for line in diffing.lines(diff):
            say(f"gate: {line}")
    else:
        say(f"gate: {plan.target.name} {latest}'s image is not in {plan.dest}: no diff")
    busbw = gating.busbw_check(*smokes)
    gate_record["busbw"] = busbw
    if busbw["regression"]:
        return gate_record, diff, [busbw["regression"]]
    say(f"gate: busbw {busbw.get('note') or 'within the reference tolerance'}")
    return gate_record, diff, []


def _diff(plan: PublishPlan, runtime: Runtime, old: CatalogueEntry, latest: str,
          facts: dict, smokes: tuple[SmokeSummary | None, SmokeSummary | None]) -> dict:
    """The diff of latest's published image (its recorded facts, else a probe) and the new one."""
    record = BuildRecord.of(old.provenance or {}, source=f"{old.version}'s provenance")
    old_facts = (probing.known_facts(plan.dest / old.file,
                                     record.model_copy(update={"stack": old.stack}))
                 or probing.probe(runtime, plan.dest / old.file, sha256=record.sha256,
                                  arch=record.arch))
    return diffing.diff(
        diffing.side(f"{plan.target.name}@{latest}", old_facts,
                     size=old.size_bytes, smoke=smokes[0]),
        diffing.side(f"{plan.target.name}@{plan.version}", facts,
                     size=plan.image.stat().st_size, smoke=smokes[1]))


def accepted(plan: PublishPlan, problems: list[str], accept: str | None,
             say: Say) -> dict:
    """The gate's verdict on ``problems``: refused unless ``accept`` says why."""
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
