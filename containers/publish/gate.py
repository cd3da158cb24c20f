"""The release gate: a new version must not be slower than the one it replaces, nor misfit its site.

A verdict edited by hand proves nothing: its run's files are read (docs/release-gate.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from containers.files import read_json_object, read_regular_text
from containers.inputs.names import Gpu
from containers.prove.devices import device_kind
from containers.publish.diff import shown, where_run
from containers.prove.smoke import read_smoke, run_file_reasons
from containers.records import BuildRecord, JobRecord, Reference, SmokeSummary, Verdict
from containers.run.workload import (IMAGE_RECORD, JOB_RECORD, first_failure,
                                      read_device_reports, unfinished_ranks)

#: What a smoke run leaves beside its verdict: the benchmark's results JSON, and its log.
SMOKE_REPORT = "allreduce.json"
RUN_LOG = "run.log"
#: More ranks than any verdict of this tool holds: a record claiming more is not one.
MOST_RANKS = 1 << 16

#: What must match for two smoke runs' busbw to be compared.
ALIKE = ("site", "partition", "nodes", "ranks")


def _measured(smoke: SmokeSummary | None) -> tuple[float, Reference] | None:
    performance = smoke.performance if smoke else None
    if performance is None or performance.measured is None or performance.reference is None:
        return None
    return performance.measured, performance.reference


def busbw_check(old: SmokeSummary | None, new: SmokeSummary | None) -> dict:
    """``{"regression": reason or None, "note": why not compared or None, ...figures}``."""
    before, after = _measured(old), _measured(new)
    if before is None or after is None:
        which = "the current latest" if before is None else "the new version"
        return {"regression": None, "note": f"not compared: {which} has no busbw at a "
                                            "reference size"}
    unlike = [k for k in ALIKE if getattr(old, k) != getattr(new, k)]
    if before[1].bytes != after[1].bytes:
        unlike.append("reference size")
    if unlike:
        return {"regression": None, "note": "not compared: the runs differ in "
                                            + ", ".join(unlike)}
    lower = after[1].lower
    if lower is None:
        return {"regression": None, "note": "not compared: the reference has no lower "
                                            "tolerance"}
    floor = before[0] * (1 + lower)
    figures = {"old_busbw": before[0], "new_busbw": after[0], "floor": round(floor, 6),
               "tolerance": lower, "bytes": after[1].bytes}
    if after[0] < floor:
        drop = (before[0] - after[0]) / before[0] if before[0] else 0.0
        return {**figures, "note": None, "regression": (
            f"busbw fell from {before[0]:g} to {after[0]:g} GB/s at {after[1].bytes} B "
            f"({drop:.0%} lower; the reference allows {-lower:.0%}) on "
            f"{where_run(new.site, new.partition)}, {shown(new.ranks)} ranks")}
    return {**figures, "note": None, "regression": None}


def torch_mismatch(build: str | None, gpu: Gpu, site: str) -> str | None:
    """Why the image's torch cannot serve ``gpu`` (a CPU torch on a CUDA site runs on no GPU)."""
    if gpu == Gpu.NONE or build == gpu:
        return None
    return (f"torch in the image is a {build or 'missing'} build; {site}'s GPUs need a {gpu} "
            "build")


#: Labels that tell builds apart, in the build record and read by each rank (jobs/devices.py).
IDENTITY_LABELS = ("containers.target", "containers.inputs-hash", "containers.build-date",
                   "org.label-schema.build-date")


def identity(labels: object) -> dict[str, str]:
    """The identity labels among ``labels`` (empty where it is not a mapping of text)."""
    if not isinstance(labels, Mapping):
        return {}
    return {k: labels[k] for k in IDENTITY_LABELS if isinstance(labels.get(k), str)}


def _report_reasons(folder: Path, ranks: int) -> list[str]:
    """What the benchmark's own results JSON says against a pass."""
    report = read_smoke(folder, SMOKE_REPORT)
    if isinstance(report, str):
        return [report]
    reasons = []
    if not report.ok or not report.finished:
        reasons.append(f"{SMOKE_REPORT} says the benchmark did not finish correctly")
    if report.wrong_total != 0 or report.wrong():
        reasons.append(f"{SMOKE_REPORT} counts {max(report.wrong_total or 0, report.wrong())} "
                       "wrong values")
    if report.world_size != ranks:
        reasons.append(f"{SMOKE_REPORT} has {report.world_size} ranks, the verdict {ranks}")
    return reasons + run_file_reasons(folder, report, ranks)


def _rank_reasons(folder: Path, ranks: int) -> list[str]:
    """Every rank must have written its ``rank-<N>.json`` saying it finished."""
    missing = unfinished_ranks(folder, ranks)
    shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
    return [f"ranks that did not finish: {shown} (of {ranks})"] if missing else []


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
    """A job's results must hold the copy of this image's build record it made at launch."""
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
    """The run must have run in this image (its ranks' labels say so), on GPUs."""
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
    """The degraded transport the run chose, from the verdict or the job's record."""
    if said := Verdict.of(record, source=folder).degraded:
        return str(said)
    job = read_json_object(folder / JOB_RECORD)
    chosen = job and JobRecord.of(job, source=folder / JOB_RECORD).transport
    return f"--transport {chosen}" if chosen else None


def evidence_reasons(verdict: Path, record: Mapping, *, sha256: str, gpu: Gpu = Gpu.NONE,
                     labels: Mapping | None = None) -> list[str]:
    """Why the run's files (not its verdict: anyone may write one) refute a pass of ``sha256``."""
    folder = verdict.parent
    if verdict.is_symlink() or folder.is_symlink():
        return [f"{verdict} is reached through a link"]
    record = Verdict.of(record, source=verdict)
    ranks = record.ranks
    if ranks is None or not 2 <= ranks <= MOST_RANKS:
        return [f"the verdict's ranks ({ranks!r}) are not a run of 2 or more ranks"]
    if record.sha256 != sha256:
        return [f"the verdict is of sha256 {str(record.sha256)[:12]}, not {sha256[:12]}"]
    if degraded := _degraded(folder, record):
        return [f"the run chose a degraded transport ({degraded}): it proves the image over TCP "
                "sockets, not over the site's network; prove it on one node or over the site's "
                "transport"]
    return (_rank_reasons(folder, ranks) + _report_reasons(folder, ranks)
            + _log_reasons(folder) + _image_reasons(folder, ranks, sha256, gpu, labels))
