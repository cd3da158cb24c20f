"""The catalogue page (``<dest>/index.html``) and each version's diff page, for people with a
browser: what is published, read like a site's software library (docs/publishing.md).

Autoescaped: a value others may edit reaches the page as text. Who published stays off pages.
"""

from __future__ import annotations

import base64
import functools
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from containers.inputs.names import Gpu
from containers.publish.catalogue import driver_needed
from containers.publish.checks import proof_of
from containers.publish.diff import shown, where_run
from containers.publish.modulefile import EXAMPLE_COMMAND, by_hand, exec_name
from containers.records import CatalogueEntry, Checks, ImageTest, SmokeSummary
from containers.report import human_bytes, new_figure, save_figure

if TYPE_CHECKING:  # imported where a page is rendered: judging a job on a node never needs it
    import jinja2

#: A file of the publish folder as the catalogue names one (``cpu/1.0.sif.cdx.json``): relative,
#: plain names, no ``..``, so no scheme (``javascript:``), host or absolute path gets a link.
_OWN_FILE = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*\Z")
_UTC = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(?::\d\d(?:\.\d+)?)?Z\Z")


@functools.cache
def _templates() -> "jinja2.Environment":
    """Autoescape on for every template, ``None`` shown as ``-``, a missing name an error."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("containers.publish", "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, finalize=lambda value: "-" if value is None else value)


def when(value: object) -> str | None:
    """A recorded UTC time as people read it (``2026-11-25 02:00 UTC``); anything else as is."""
    if value is None:
        return None
    match = _UTC.match(str(value))
    return f"{match[1]} {match[2]} UTC" if match else str(value)


def link(path: object, text: str) -> dict:
    """A link to a file of the publish folder; anything else the catalogue names is text."""
    if not path:
        return {"href": None, "text": None}
    if not isinstance(path, str) or not _OWN_FILE.match(path):
        return {"href": None, "text": f"{path} (not a file of this folder)"}
    return {"href": path, "text": text}


def stack_rows(entry: CatalogueEntry) -> list[tuple[str, str]]:
    """(what, value) of the image's stack, GPU parts first; only what the build recorded."""
    stack = entry.stack or {}
    if not stack:
        return [("stack", "not recorded (published with --skip-checks or by an older tool)")]
    build = stack.get("build")
    collective = "RCCL" if build == Gpu.ROCM else "NCCL"
    linkage = f" ({stack['nccl_linkage']} library)" if stack.get("nccl_linkage") else ""
    gpu = build in (Gpu.CUDA, Gpu.ROCM)
    torch = (f"{stack['torch']} ({shown(build)} build)" if stack.get("torch")
             else "none: the image holds no torch")
    rows = [("torch", torch),
            ("CUDA", stack.get("cuda")), ("cuDNN", stack.get("cudnn")),
            ("ROCm", stack.get("rocm")), ("HIP", stack.get("hip")),
            (collective, stack.get("nccl") and f"{stack['nccl']}{linkage}"),
            ("GPU architectures", stack.get("gpu_arches") or ("not recorded" if gpu else None)),
            ("driver needed", entry.driver_needed or driver_needed(entry.stack)),
            ("DeepSpeed", stack.get("deepspeed")), ("Python", stack.get("python")),
            ("OS", stack.get("os") and f"{stack['os']}, glibc {shown(stack.get('glibc'))}"),
            ("CPU", stack.get("arch"))]
    return [(what, str(value)) for what, value in rows if value]


def _verdict(state: str, text: str, date: object = None, notes: list[str] | None = None) -> dict:
    return {"state": state, "text": text, "date": when(date), "notes": notes or []}


def _smoke_verdict(smoke: SmokeSummary) -> list[dict]:
    """The smoke run a version was proven by: where it ran, its collectives, its busbw."""
    where = (f"{shown(smoke.ranks)} ranks on {shown(smoke.nodes)} node(s), "
             f"{where_run(smoke.site, smoke.partition)}"
             + (f", {smoke.backend} on {shown(smoke.device_kind)}" if smoke.backend else ""))
    notes = [f"collectives: {shown(smoke.ops)}"] if smoke.ops else []
    found = [_verdict("pass" if smoke.passed else "fail",
                      f"smoke {'PASS' if smoke.passed else 'FAIL'}: {where}", smoke.date, notes)]
    performance = smoke.performance
    if performance is not None and performance.measured is not None:
        size = performance.reference.bytes if performance.reference else None
        found.append(_verdict("pass" if performance.state == "pass" else "warn",
                              f"busbw {performance.measured} GB/s"
                              + (f" at {human_bytes(size)}" if size is not None else "")
                              + f": performance {performance.state.upper()}", smoke.date))
    return found


def verdicts(entry: CatalogueEntry) -> list[dict]:
    """Every verdict a version was published with; who accepted a regression left out."""
    checks = entry.checks or Checks()
    if checks.skipped:
        return [_verdict("fail", "checks skipped (--skip-checks): no apptainer test, no smoke "
                         "run", entry.published)]
    test = checks.apptainer_test or ImageTest()
    if test.passed is None:
        found = [_verdict("none", f"apptainer test: {test.how or 'the definition has no %test'}")]
    else:
        found = [_verdict("pass" if test.passed else "fail", "apptainer test "
                          f"{'PASS' if test.passed else 'FAIL'}, {shown(test.how)}", test.date)]
    if checks.smoke:
        found += _smoke_verdict(checks.smoke)
    elif checks.proof:  # what an image without torch was published with instead
        found.append(_verdict("none", checks.proof))
        if checks.run:  # the passing run of a command that proved it
            found.append(_verdict("pass", proof_of(checks.run), checks.run.date))
    for finding in entry.fit or []:
        if finding.get("level") in ("error", "warning"):
            found.append(_verdict("warn", f"site fit {finding['level']}: "
                                          f"{shown(finding.get('message'))}"))
    accepted = entry.gate.accepted if entry.gate else None
    if accepted:
        found.append(_verdict("fail", f"regression accepted: {shown(accepted.why)}",
                              accepted.date, accepted.problems))
    return found


def example_command(stack: object) -> str:
    """The command the page's examples run: torch's version, else (an R image, a base) its OS."""
    without = isinstance(stack, Mapping) and stack and not stack.get("torch")
    return "cat /etc/os-release" if without else EXAMPLE_COMMAND


def commands(target: str, entry: CatalogueEntry) -> list[str]:
    """How a user runs this version: its module, then the wrapper or the runtime's flags."""
    command = example_command(entry.stack)
    lines = [f"module load {target}/{entry.version}", f"{exec_name(target)} {command}"]
    runs = entry.site_runtime or {}
    if runs.get("runtime"):
        lines.append(by_hand(runs["runtime"], runs.get("gpu_flag"), command))
    return lines


def batch_job(preamble: Sequence[str] | None, *, target: str, version: str, dest: Path,
              stack: Mapping) -> list[str] | None:
    """The batch job a user pastes to run this version; None without a scheduler."""
    if preamble is None:
        return None
    return ["#!/bin/bash", *preamble, f"module use {dest / 'modules'}",
            f"module load {target}/{version}", f"{exec_name(target)} {example_command(stack)}"]


def base_definition(entry: CatalogueEntry, dest: Path) -> str | None:
    """A definition that builds on this version (``apptainer build mine.sif mine.def``)."""
    if not isinstance(entry.file, str) or not _OWN_FILE.match(entry.file):
        return None
    return (f"Bootstrap: localimage\nFrom: {dest / entry.file}\n\n%post\n"
            "    # what your image adds, e.g. apt-get install -y ... or pip install ...\n")


def files(entry: CatalogueEntry, dest: Path) -> dict:
    against = entry.gate.against if entry.gate else None
    return {
        "image": str(dest / str(entry.file)) if entry.file else None,
        "sha256": entry.sha256,
        "checksum": link(entry.checksum_file, "sha256sum -c file"),
        "signed": bool(entry.signed),
        "fingerprint": entry.key_fingerprint,
        "key": link(entry.public_key, "public key"),
        "sbom": link(entry.sbom_file, "CycloneDX SBOM"),
        "diff_page": link(entry.diff_page, f"what changed since {against}" if against
                          else "what changed since the previous latest"),
        "diff_json": link(entry.diff_file, "as JSON"),
    }


def version_view(target: str, entry: Mapping, *, latest: str | None, dest: Path) -> dict:
    entry = CatalogueEntry.of(entry)
    return {"version": entry.version, "anchor": f"{target}@{entry.version}",
            "latest": entry.version == latest, "published": when(entry.published),
            "site": entry.site, "size": human_bytes(entry.size_bytes or 0),
            "commands": commands(target, entry), "stack": stack_rows(entry),
            "batch": entry.batch_example,
            "base_definition": base_definition(entry, dest),
            "verdicts": verdicts(entry), "files": files(entry, dest)}


def image_view(target: str, block: Mapping, dest: Path) -> dict:
    """One image: the newest version's description and license, its versions newest first."""
    versions = list(block.get("versions", []))
    described = [e.get("description") for e in versions if e.get("description")]
    licensed = [e.get("license") for e in versions if e.get("license")]
    latest = block.get("latest")
    return {"name": target, "anchor": f"image-{target}",
            "description": described[-1] if described else None,
            "license": licensed[-1] if licensed else None, "latest": latest,
            "versions": [version_view(target, e, latest=latest, dest=dest)
                         for e in reversed(versions)]}


def history_png(catalogue: Mapping) -> bytes | None:
    """busbw at the reference size per version, one line per target; None: no version has one."""
    series = {}
    for target, block in sorted(catalogue.get("targets", {}).items()):
        points = []
        for entry in block.get("versions", []):
            performance = ((entry.get("checks") or {}).get("smoke") or {}).get("performance")
            measured = (performance or {}).get("measured")
            if isinstance(measured, (int, float)):
                points.append((entry["version"], float(measured)))
        if points:
            series[target] = points
    if not series:
        return None
    fig, ax = new_figure((8, 3.5), dpi=100)
    for target, points in series.items():
        ax.plot(range(len(points)), [p[1] for p in points], "o-", label=target)
        for index, (version, value) in enumerate(points):
            ax.annotate(f"{value:g}", (index, value), fontsize=7,
                        textcoords="offset points", xytext=(0, 6))
    longest = max(series.values(), key=len)
    ax.set_xticks(range(len(longest)),
                  [p[0] for p in longest] if len(series) == 1 else range(len(longest)),
                  fontsize=7)
    ax.set_xlabel("published version (oldest first)")
    ax.set_ylabel("smoke busbw at reference size (GB/s)")
    ax.set_title("busbw history of published versions")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, io.BytesIO()).getvalue()


def render_page(catalogue: Mapping, dest: Path) -> str:
    """``<dest>/index.html`` for ``catalogue``: every image, newest version first."""
    png = history_png(catalogue)
    view = {"dest": str(dest), "modules": str(dest / "modules"),
            "updated": when(catalogue.get("updated")),
            "images": [image_view(target, block, dest) for target, block
                       in sorted(catalogue.get("targets", {}).items())],
            "history": png and "data:image/png;base64," + base64.b64encode(png).decode("ascii")}
    return _templates().get_template("catalogue.html").render(view)


def _smoke_side(smoke: Any) -> dict | None:
    if not isinstance(smoke, Mapping):
        return None
    size = smoke.get("bytes")
    return {"passed": "PASS" if smoke.get("passed") else "FAIL",
            "busbw": smoke.get("busbw"), "size": human_bytes(size) if isinstance(size, int)
            else None, "state": smoke.get("state"), "site": smoke.get("site"),
            "partition": smoke.get("partition"), "ranks": smoke.get("ranks"),
            "nodes": smoke.get("nodes"), "date": when(smoke.get("date"))}


def render_diff_page(result: Mapping, *, target: str, version: str) -> str:
    """``<dest>/<target>/<version>.diff.html``: the diff as tables, linked both ways."""
    old_size, new_size = result["size_bytes"]
    packages = result["packages"]
    view = {"old": result["old"], "new": result["new"], "target": target, "version": version,
            "back": f"../index.html#{target}@{version}",
            "json": f"{version}.diff.json",
            "added": [(k, shown(v)) for k, v in packages["added"].items()],
            "removed": [(k, shown(v)) for k, v in packages["removed"].items()],
            "changed": [(k, shown(was), shown(now)) for k, (was, now)
                        in packages["changed"].items()],
            "stack": [(k, shown(was), shown(now)) for k, (was, now) in result["stack"].items()],
            "labels": [(k, shown(was), shown(now)) for k, (was, now)
                       in result["labels"].items()],
            "size": (human_bytes(old_size), human_bytes(new_size), f"{new_size - old_size:+d} B"),
            "smoke": [_smoke_side(side) for side in result["smoke"]]}
    return _templates().get_template("diff.html").render(view)
