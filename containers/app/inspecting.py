"""``invoke inspect`` and ``invoke diff``: what an image holds, whether it fits, what changed."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from containers.app.project import Project
from containers.errors import CommandFailed, StateError, UsageError, VerdictFailed
from containers.files import sha256_file
from containers.image import inspect as probing, provenance, sitefit
from containers.image.arch import site_arches
from containers.inputs.sites import Site
from containers.publish import catalogue as cat, diff as diffing
from containers.publish.diff import shown
from containers.publish.checks import find_verdict, smoke_summary
from containers.records import BuildRecord, Checks, SmokeSummary
from containers.report import Say, human_bytes, say_line as _print, show_table
from containers.run.needs import PYTHON, refuse_lacking

PUBLISHED = re.compile(r"(?P<dest>.+):(?P<target>[A-Za-z0-9][A-Za-z0-9._-]*)"
                       r"@(?P<version>[^@/:]+)\Z")


@dataclass(frozen=True)
class ImageRef:
    """An image as a command named it, resolved to its file and what is known about it."""

    name: str
    image: Path
    target: str | None
    record: BuildRecord
    smoke: SmokeSummary | None = None  # the catalogue's smoke summary of a published version


def resolve(project: Project, spec: str, *, flag: str) -> ImageRef:
    """``spec`` (target, image path or ``DEST:TARGET@VERSION``) as an :class:`ImageRef`."""
    match = PUBLISHED.match(spec)
    if match and Path(match["dest"]).is_dir():
        dest = Path(match["dest"])
        data = cat.load(dest / cat.CATALOGUE_NAME)
        version = match["version"]
        if version == "latest":
            version = cat.latest(data, match["target"]) or ""
        entry = cat.find(data, match["target"], version)
        if entry is None:
            raise UsageError(f"{spec}: {dest / cat.CATALOGUE_NAME} lists no {match['target']} "
                             f"{match['version']}", flag=flag)
        return ImageRef(name=f"{match['target']}@{version}", image=dest / entry.file,
                        target=match["target"],
                        record=BuildRecord.of(entry.provenance or {}, source=spec),
                        smoke=(entry.checks or Checks()).smoke)
    path = Path(spec)
    if spec.endswith(".sif") or os.sep in spec or path.is_file():
        if not path.is_file():
            raise UsageError(f"{spec}: no such image file", flag=flag)
        record = provenance.read(probing.record_path(path))
        return ImageRef(name=str(path), image=path, target=record.target, record=record)
    target = project.target(spec)
    image = project.settings.image_path(target.name)
    return ImageRef(name=target.name, image=image, target=target.name,
                    record=provenance.read(project.settings.provenance_path(target.name)))


def latest_smoke(project: Project, ref: ImageRef) -> SmokeSummary | None:
    """The latest passing smoke of this image: its catalogue entry's, else by its sha256."""
    if ref.smoke is not None or ref.target is None:
        return ref.smoke
    sha = ref.record.sha256 or sha256_file(ref.image)
    found = find_verdict(project.settings.results_dir, ref.target, sha)
    return SmokeSummary.model_validate(smoke_summary(*found, run_now=False)) if found else None


def site_for(project: Project, ref: ImageRef, site: str | None) -> Site:
    """``--site``, else the image's target's site, else the site this machine is."""
    if site:
        if site not in project.sites:
            raise UsageError(f"no site profile sites/{site}.yaml", flag="--site")
        return project.sites[site]
    if ref.target and ref.target in project.targets:
        return project.site_of(project.target(ref.target))
    return project.current_site()


def fit_findings(project: Project, stack: dict, site: Site,
                 probe_errors: object) -> list[sitefit.Finding]:
    return sitefit.judge(stack, site_name=site.name, site_gpu=site.gpus.kind,
                         arches=site_arches(site, project.targets), fit=site.fit,
                         probe_errors=probe_errors, gpus=site.gpus)


def inspect(project: Project, *, target: str | None = None, image: str | None = None,
            site: str | None = None, as_json: bool = False, say: Say = _print) -> dict:
    """Inspect one image and judge its site fit (:class:`VerdictFailed` after the report)."""
    if target and image:
        raise UsageError("give --target or --image, not both", flag="--image")
    spec = image or target or project.default_target()
    ref = resolve(project, spec, flag="--image" if image else "--target")
    refuse_lacking(ref.record, image=ref.image, need=PYTHON, doing="invoke inspect")
    runtime = project.runtime()
    if not as_json:
        say(f"reading {ref.image} (one {runtime.flavour} exec of its python)")
    report = probing.inspect_image(runtime, ref.image, target=ref.target)
    where = site_for(project, ref, site)
    findings = fit_findings(project, report["stack"], where, report["facts"].get("errors"))
    report["site"] = where.name
    report["fit"] = [f.as_dict() for f in findings]
    if as_json:
        print(json.dumps({k: v for k, v in report.items() if k != "facts"}, indent=2,
                         default=str))
    else:
        show(report, findings, say)
    if bad := sitefit.errors(findings):
        raise VerdictFailed(f"{ref.name} does not fit site {where.name}: "
                            + "; ".join(f.message for f in bad))
    return report


def show(report: dict, findings: list[sitefit.Finding], say: Say) -> None:
    stack, sbom = report["stack"], report.get("sbom")
    record = BuildRecord.of(report.get("provenance") or {}, source=report["image"])
    rows = [*((key, shown(stack.get(key))) for key in probing.STACK_KEYS),
            *([("driver needed", report["driver_needed"])] if report.get("driver_needed")
              else []),
            ("size", human_bytes(report["size_bytes"])),
            ("packages", f"{report['packages']['debian']} Debian, "
                         f"{report['packages']['pip']} pip"),
            ("sbom", f"{sbom['path']} ({shown(sbom['counts'])})" if sbom else "none"),
            ("provenance", f"inputs {shown(record.inputs_hash)[:16]}, built "
                           f"{shown(record.build_date)}, sha256 "
                           f"{shown(record.sha256)[:12]}" if record else "none"),
            *((f"label {key}", shown(value)) for key, value in sorted(report["labels"].items())
              if key != "containers.pip-freeze")]
    show_table(f"inspect {report['image']}", ["what", "value"], rows)
    if report.get("site"):
        say(f"site fit ({report['site']}):" if findings else
            f"site fit ({report['site']}): nothing to report")
        for finding in findings:
            say(f"  {finding.line()}")


def diff(project: Project, *, old: str, new: str, as_json: bool = False,
         say: Say = _print) -> dict:
    """``invoke diff --old OLD --new NEW``: what changed between two images (one probe each)."""
    runtime = project.runtime()
    sides = []
    for spec, flag in ((old, "--old"), (new, "--new")):
        ref = resolve(project, spec, flag=flag)
        if not ref.image.is_file():
            raise StateError(f"{flag} {spec}: {ref.image} is not there")
        refuse_lacking(ref.record, image=ref.image, need=PYTHON, doing="invoke diff")
        if not as_json:
            say(f"reading {ref.image} (one {runtime.flavour} exec of its python)")
        facts = probing.probe(runtime, ref.image, sha256=ref.record.sha256,
                             arch=ref.record.arch)
        sides.append(diffing.side(ref.name, facts, size=ref.image.stat().st_size,
                                  smoke=latest_smoke(project, ref)))
    result = diffing.diff(*sides)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        for line in diffing.lines(result):
            say(line)
    return result


def examine_built(project: Project):
    """The build's last test of an image: a probe, its SBOM, its site fit (errors fail)."""
    from containers.image import sbom

    sbom.preload()

    def examine(step, runtime, record: dict, say: Say) -> dict:
        say(f"==> examining {step.target.name}: SBOM and site fit (one probe of the image)")
        built = BuildRecord.of(record, source=step.image)  # the record being written
        facts = probing.probe(runtime, step.partial, sha256=built.sha256, arch=built.arch)
        files = {probing.SBOM_SUFFIX: sbom.render(sbom.make(facts, record))}
        stack = probing.summary(facts)
        record["stack"] = stack  # read back by publish with the SBOM (probing.known_facts)
        if facts.get("errors"):
            record["probe_errors"] = facts["errors"]
        site = project.site_of(step.target)
        findings = fit_findings(project, stack, site, facts.get("errors"))
        for finding in findings:
            say(f"  site fit ({site.name}): {finding.line()}")
        record["fit"] = {"site": site.name, "findings": [f.as_dict() for f in findings]}
        if bad := sitefit.errors(findings):
            raise CommandFailed(f"{step.target.name} does not fit site {site.name}: "
                                + "; ".join(f.message for f in bad) + "; the image is not kept")
        return files
    return examine
