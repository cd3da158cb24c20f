"""The release gate: a new version must not be slower than the one it replaces, nor misfit its site.

``invoke publish`` compares the new image's smoke (its catalogue summary,
:func:`containers.publish.checks.smoke_summary`) with the current ``latest``'s. The busbw both
measured at the reference size is compared only when the runs are alike (same site, partition,
nodes and ranks, same reference size): a regression is a new busbw below the old one by more
than the reference's own tolerance (its ``lower`` fraction, e.g. -0.05). A site-fit error
(:mod:`containers.image.sitefit`) refuses too. ``--accept-regression WHY`` publishes anyway and
the catalogue entry records who accepted what, when and why.

Before any of that, the smoke verdict the checks found is not taken at its word:
:func:`evidence_reasons` re-derives it from the files its run left beside it (each rank's
``rank-<N>.json``, the benchmark's results JSON, the run's log, the device reports, the image
record a batch job copied, which a job's folder must hold) and the image: each rank records the
labels it read inside the image it ran in, and those must be this image's, so a verdict edited by
hand (its ``sha256`` made another image's), or one whose run timed out or lost a rank, proves
nothing. Each file is read as a typed record (``wrong_total: false`` is no count).

Pure apart from reading the run's folder: plain summaries in, reasons out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from containers.files import read_json_object, read_regular_text
from containers.inputs.names import Gpu
from containers.prove.devices import device_kind
from containers.publish.diff import shown, where_run
from containers.records import BuildRecord, JobRecord, Refused, Verdict, read_smoke
from containers.run.workload import (IMAGE_RECORD, JOB_RECORD, first_failure,
                                      read_device_reports)

#: What a smoke run leaves beside its verdict: the benchmark's results JSON, and its log.
SMOKE_REPORT = "allreduce.json"
RUN_LOG = "run.log"
#: More ranks than any verdict of this tool holds: a record claiming more is not one.
MOST_RANKS = 1 << 16

#: What must match for two smoke runs' busbw to be compared.
ALIKE = ("site", "partition", "nodes", "ranks")


def _measured(smoke: Mapping | None) -> tuple[float, Mapping] | None:
    performance = (smoke or {}).get("performance")
    if not isinstance(performance, Mapping):
        return None
    measured, reference = performance.get("measured"), performance.get("reference")
    if not isinstance(measured, (int, float)) or isinstance(measured, bool) \
            or not isinstance(reference, Mapping):
        return None
    return float(measured), reference


def busbw_check(old: Mapping | None, new: Mapping | None) -> dict:
    """``{"regression": reason or None, "note": why not compared or None, ...figures}``."""
    before, after = _measured(old), _measured(new)
    if before is None or after is None:
        which = "the current latest" if before is None else "the new version"
        return {"regression": None, "note": f"not compared: {which} has no busbw at a "
                                            "reference size"}
    unlike = [k for k in ALIKE if (old or {}).get(k) != (new or {}).get(k)]
    if before[1].get("bytes") != after[1].get("bytes"):
        unlike.append("reference size")
    if unlike:
        return {"regression": None, "note": "not compared: the runs differ in "
                                            + ", ".join(unlike)}
    lower = after[1].get("lower")
    if not isinstance(lower, (int, float)) or isinstance(lower, bool):
        return {"regression": None, "note": "not compared: the reference has no lower "
                                            "tolerance"}
    floor = before[0] * (1 + float(lower))
    figures = {"old_busbw": before[0], "new_busbw": after[0], "floor": round(floor, 6),
               "tolerance": float(lower), "bytes": after[1].get("bytes")}
    if after[0] < floor:
        drop = (before[0] - after[0]) / before[0] if before[0] else 0.0
        return {**figures, "note": None, "regression": (
            f"busbw fell from {before[0]:g} to {after[0]:g} GB/s at {after[1].get('bytes')} B "
            f"({drop:.0%} lower; the reference allows {-float(lower):.0%}) on "
            f"{where_run(new)}, {shown((new or {}).get('ranks'))} ranks")}
    return {**figures, "note": None, "regression": None}


def torch_mismatch(build: str | None, gpu: Gpu, site: str) -> str | None:
    """Why the image's torch cannot serve ``gpu`` (the target's or its site's GPU kind), or None:
    a CPU-only torch on a CUDA site runs, slowly and on no GPU, which the site fit only warns of
    at build; a published image must be the build its GPUs need."""
    if gpu == Gpu.NONE or build == gpu:
        return None
    return (f"torch in the image is a {build or 'missing'} build; {site}'s GPUs need a {gpu} "
            "build")


# ------------------------------------------------------------------- the verdict's evidence
#: The labels that tell one build from another (the target, its inputs, the tool's build date and
#: Apptainer's own, to the second). Each rank reads them inside the image it runs in
#: (``/.singularity.d/labels.json``, jobs/devices.py) into its ``device-<N>.json``; the image's
#: build record holds the same labels, read from the built image.
IDENTITY_LABELS = ("containers.target", "containers.inputs-hash", "containers.build-date",
                   "org.label-schema.build-date")


def identity(labels: object) -> dict[str, str]:
    """The identity labels among ``labels`` (empty where it is not a mapping of text)."""
    if not isinstance(labels, Mapping):
        return {}
    return {k: labels[k] for k in IDENTITY_LABELS if isinstance(labels.get(k), str)}


def _report_reasons(folder: Path, ranks: int) -> list[str]:
    """What the benchmark's own results JSON says against a pass."""
    try:
        report = read_smoke(folder / SMOKE_REPORT)
    except Refused as exc:
        return [str(exc)]
    reasons = []
    if not report.ok or not report.finished:
        reasons.append(f"{SMOKE_REPORT} says the benchmark did not finish correctly")
    if report.wrong_total != 0 or any(report.wrong):
        counted = max(report.wrong_total, sum(w or 0 for w in report.wrong))
        reasons.append(f"{SMOKE_REPORT} counts {counted} wrong values")
    if report.world_size != ranks:
        reasons.append(f"{SMOKE_REPORT} has {report.world_size} ranks, the verdict {ranks}")
    return reasons


def _rank_reasons(folder: Path, ranks: int) -> list[str]:
    """Every rank must have written its ``rank-<N>.json`` saying it finished."""
    missing = []
    for rank in range(ranks):
        record = read_json_object(folder / f"rank-{rank}.json") or {}
        if not (type(record.get("rank")) is int and record["rank"] == rank
                and record.get("finished") not in (None, False, "")):
            missing.append(str(rank))
    if not missing:
        return []
    shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
    return [f"ranks that did not finish: {shown} (of {ranks})"]


def _log_reasons(folder: Path) -> list[str]:
    """The run's log must be there, and show no failed rank or benchmark failure."""
    try:
        lines = read_regular_text(folder / RUN_LOG).splitlines()
    except (OSError, ValueError):
        return [f"no readable {RUN_LOG}"]
    failed = first_failure(lines)
    if failed is not None:
        return [f"{RUN_LOG} shows rank {failed[0]} failed (exit code {failed[1]})"]
    return [f"{RUN_LOG} says {line.strip()[:120]!r}" for line in lines
            if line.lstrip().startswith("# FAILED")][:1]


def _record_reasons(folder: Path, sha256: str) -> list[str]:
    """A batch job copies the image's build record at launch (``image.json``): a job's results
    folder (its ``job.json``) without it, or with another image's, is not of this image."""
    if not (folder / IMAGE_RECORD).exists():
        return [f"the batch job left no {IMAGE_RECORD} (the image it launched)"] \
            if (folder / JOB_RECORD).exists() else []
    ran = BuildRecord.of(read_json_object(folder / IMAGE_RECORD) or {},
                         source=folder / IMAGE_RECORD)
    if ran.sha256 != sha256:
        return [f"its {IMAGE_RECORD} is not of this image (sha256 {sha256[:12]})"]
    return []


def _image_reasons(folder: Path, ranks: int, sha256: str, gpu: Gpu,
                   labels: Mapping | None) -> list[str]:
    """The run must have run in this image: every rank's device report carries the identity
    labels it read inside its image, and they must be this image's (a verdict's sha256 is one
    edit away from another image's; the ranks' reports are the run's own); and on GPUs."""
    reasons = _record_reasons(folder, sha256)
    wanted = identity(labels)
    reports = {r["rank"]: r for r in read_device_reports(folder)}
    if not wanted:
        reasons.append("the image's build record has no labels to tie a run to (rebuild it)")
    else:
        strangers = [str(rank) for rank in range(ranks)
                     if identity((reports.get(rank) or {}).get("image")) != wanted]
        if strangers:
            reasons.append(f"ranks {', '.join(strangers[:8])} did not record running in this "
                           f"image (its labels {wanted.get('containers.build-date') or ''} "
                           "in their device reports)")
    if gpu != Gpu.NONE and device_kind(tuple(reports.values())) != gpu:
        reasons.append(f"its device reports do not show every rank on a {gpu} GPU")
    return reasons


def _degraded(folder: Path, record: Mapping) -> str | None:
    """The degraded transport the run chose (``invoke job --transport socket``), from the
    verdict or from the job's own record, whichever says so: either is enough to refuse."""
    said = Verdict.view(record, source=folder).degraded
    if said:
        return str(said)
    chosen = JobRecord.of(read_json_object(folder / JOB_RECORD) or {},
                          source=folder / JOB_RECORD).transport
    return f"--transport {chosen}" if chosen else None


def evidence_reasons(verdict: Path, record: Mapping, *, sha256: str, gpu: Gpu = Gpu.NONE,
                     labels: Mapping | None = None) -> list[str]:
    """Why the run beside ``verdict`` does not bear out a pass of the image ``sha256`` whose
    labels are ``labels`` (empty: it does). Read from the run's own files, never from the
    verdict's claims: a results folder is writable by whoever runs smokes, and a verdict is only
    as good as the run behind it."""
    folder = verdict.parent
    if verdict.is_symlink() or folder.is_symlink():
        return [f"{verdict} is reached through a link"]
    record = Verdict.view(record, source=verdict)
    ranks = record.ranks
    if type(ranks) is not int or not 2 <= ranks <= MOST_RANKS:
        return [f"the verdict's ranks ({ranks!r}) are not a run of 2 or more ranks"]
    if record.sha256 != sha256:
        return [f"the verdict is of sha256 {str(record.sha256)[:12]}, not {sha256[:12]}"]
    degraded = _degraded(folder, record)
    if degraded:
        return [f"the run chose a degraded transport ({degraded}): it proves the image over TCP "
                "sockets, not over the site's network; prove it on one node or over the site's "
                "transport"]
    return (_rank_reasons(folder, ranks) + _report_reasons(folder, ranks)
            + _log_reasons(folder) + _image_reasons(folder, ranks, sha256, gpu, labels))
