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
record a batch job copied) and the image's sha256, so a verdict edited by hand, or one whose run
timed out or lost a rank, proves nothing.

Pure apart from reading the run's folder: plain summaries in, reasons out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from containers.files import read_json_object, read_regular_text
from containers.prove.devices import kind_of
from containers.publish.diff import shown
from containers.run.workload import first_failure, read_device_reports

#: What a smoke run leaves beside its verdict: the benchmark's results JSON, and its log.
SMOKE_REPORT = "allreduce.json"
RUN_LOG = "run.log"
#: A batch job's copy of the image's build record at launch.
IMAGE_RECORD = "image.json"
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
            f"{shown((new or {}).get('site'))}/{shown((new or {}).get('partition'))}, "
            f"{shown((new or {}).get('ranks'))} ranks")}
    return {**figures, "note": None, "regression": None}


# ------------------------------------------------------------------- the verdict's evidence
def _report_reasons(folder: Path, ranks: int) -> list[str]:
    """What the benchmark's own results JSON says against a pass."""
    report = read_json_object(folder / SMOKE_REPORT)
    if report is None:
        return [f"no readable {SMOKE_REPORT} (the benchmark's results)"]
    reasons = []
    if report.get("ok") is not True or not report.get("finished"):
        reasons.append(f"{SMOKE_REPORT} says the benchmark did not finish correctly")
    if report.get("wrong_total") != 0:
        reasons.append(f"{SMOKE_REPORT} counts {report.get('wrong_total')} wrong values")
    if report.get("world_size") != ranks:
        reasons.append(f"{SMOKE_REPORT} has {report.get('world_size')} ranks, the verdict "
                       f"{ranks}")
    return reasons


def _rank_reasons(folder: Path, ranks: int) -> list[str]:
    """Every rank must have written its ``rank-<N>.json`` saying it finished."""
    missing = []
    for rank in range(ranks):
        record = read_json_object(folder / f"rank-{rank}.json")
        if not (record and record.get("rank") == rank and record.get("finished")):
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


def _image_reasons(folder: Path, sha256: str, gpu: str) -> list[str]:
    """The run's image record (a batch job's copy) and its devices must be this image's."""
    reasons = []
    if (folder / IMAGE_RECORD).exists():
        ran = read_json_object(folder / IMAGE_RECORD)
        if not ran or ran.get("sha256") != sha256:
            reasons.append(f"its {IMAGE_RECORD} is not of this image (sha256 {sha256[:12]})")
    if gpu != "none" and kind_of(read_device_reports(folder)) != gpu:
        reasons.append(f"its device reports do not show every rank on a {gpu} GPU")
    return reasons


def evidence_reasons(verdict: Path, record: Mapping, *, sha256: str,
                     gpu: str = "none") -> list[str]:
    """Why the run beside ``verdict`` does not bear out a pass of the image ``sha256`` (empty:
    it does). Read from the run's own files, never from the verdict's claims: a results folder
    is writable by whoever runs smokes, and a verdict is only as good as the run behind it."""
    folder = verdict.parent
    if verdict.is_symlink() or folder.is_symlink():
        return [f"{verdict} is reached through a link"]
    ranks = record.get("ranks")
    if not isinstance(ranks, int) or isinstance(ranks, bool) or not 2 <= ranks <= MOST_RANKS:
        return [f"the verdict's ranks ({ranks!r}) are not a run of 2 or more ranks"]
    if record.get("sha256") != sha256:
        return [f"the verdict is of sha256 {str(record.get('sha256'))[:12]}, not {sha256[:12]}"]
    return (_rank_reasons(folder, ranks) + _report_reasons(folder, ranks)
            + _log_reasons(folder) + _image_reasons(folder, sha256, gpu))
