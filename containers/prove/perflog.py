"""The performance history: one JSON line per smoke run, per site and partition.

Like ReFrame's perflogs, each record carries what it was judged against (the reference and its
tolerances) and the image it ran (inputs hash, build date), so a verdict can be rebuilt from the log
alone and a regression after an image update shows as a step between two image versions.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

from containers.inputs.schema import check_name
from containers.locking import file_lock
from containers.prove import stack

LOG_NAME = "allreduce.jsonl"
#: Performance states of runs that measured their reference's message size.
JUDGED = ("pass", "fail", "xfail", "xpass")


def log_path(perflog_dir: Path, *, site: str, partition: str | None) -> Path:
    """``<perflog_dir>/<site>/<partition>/allreduce.jsonl``; both names pass the name rule (a
    partition comes from ``SLURM_JOB_PARTITION``: ``../..`` in it must not write elsewhere)."""
    check_name("site", site, key="site")
    if partition is not None:
        check_name("partition", partition, key="partition")
    return perflog_dir / site / (partition or "default") / LOG_NAME


def _ends_a_line(handle: BinaryIO) -> bool:
    """Whether the open log is empty or ends with a newline (its last line is whole)."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return True
    handle.seek(end - 1)
    return handle.read(1) == b"\n"


def append(perflog_dir: Path, record: dict) -> Path:
    """Append one record under a lock, so concurrent runs never interleave a line. A file whose
    last line was torn (a run killed mid-write, a full disk) gets its newline first, so the new
    record starts a line of its own instead of being glued to the torn one and lost with it."""
    path = log_path(perflog_dir, site=record["site"], partition=record.get("partition"))
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True).encode("utf-8") + b"\n"
    with file_lock(path.with_name(path.name + ".lock")):
        with open(path, "a+b") as handle:
            if not _ends_a_line(handle):
                line = b"\n" + line
            handle.write(line)
    return path


def parse_date(value: object) -> datetime.datetime | None:
    """A record's ``date`` (ISO 8601 with a time zone, as every record is written), else None:
    records without one cannot be ordered or plotted beside the others."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _records(data: bytes) -> Iterator[dict]:
    """The usable records of one log's bytes: whole lines only (what follows the last newline is
    a torn tail), each a JSON object with a good date; anything else is skipped."""
    for raw in data.split(b"\n")[:-1]:
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past reason
            continue
        if isinstance(record, dict) and parse_date(record.get("date")) is not None:
            yield record


def read(perflog_dir: Path, *, target: str | None = None) -> list[dict]:
    """Every record (oldest first), optionally of one target; unreadable lines are skipped."""
    records = []
    for path in sorted(perflog_dir.rglob(LOG_NAME)) if perflog_dir.is_dir() else []:
        for record in _records(path.read_bytes()):
            if target is None or record.get("target") == target:
                records.append(record)
    return sorted(records, key=lambda r: parse_date(r["date"]))


def headline(record: dict) -> tuple[int | None, float | None]:
    """(bytes, busbw) a record is compared by: the reference size, else the largest measured."""
    reference = (record.get("performance") or {}).get("reference")
    rows = record.get("results") or []
    if reference:
        row = next((r for r in rows if r["bytes"] == reference["bytes"]), None)
        if row:
            return row["bytes"], row["busbw_oop"]
    return (rows[-1]["bytes"], rows[-1]["busbw_oop"]) if rows else (None, None)


def image_label(record: dict) -> str:
    short = (record.get("inputs_hash") or "unknown")[:12]
    built = (record.get("build_date") or "")[:10]
    return f"{record.get('target')} {short}" + (f" ({built})" if built else "")


def stack_changes(records: Sequence[dict]) -> list[list[str]]:
    """Per record (oldest first), what changed in its stack since the previous run of the same
    image: a driver or plugin upgrade under one image shows as a step with its cause."""
    last: dict[str, dict] = {}
    found = []
    for record in records:
        image = str(record.get("sha256") or record.get("inputs_hash") or record.get("target"))
        found.append(stack.changes(last.get(image), record.get("stack")))
        if record.get("stack"):
            last[image] = record["stack"]
    return found


def history_rows(records: Sequence[dict]) -> list[list[object]]:
    rows = []
    for record, changed in zip(records, stack_changes(records)):
        size, busbw = headline(record)
        performance = record.get("performance") or {}
        reference = performance.get("reference")
        rows.append([
            record.get("date", "")[:19], record.get("site"), record.get("partition") or "",
            image_label(record), record.get("ranks"), record.get("nodes"),
            "" if size is None else f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B",
            "" if busbw is None else f"{busbw:.3f}",
            "" if not reference else f"{reference['value']:g} {reference['unit']}",
            "PASS" if record.get("passed") else "FAIL", performance.get("state", ""),
            "; ".join(changed),
        ])
    return rows


HISTORY_COLUMNS = ("date", "site", "partition", "image", "ranks", "nodes", "size", "busbw GB/s",
                   "reference", "sanity", "performance", "stack changed")


def plot_history(records: Sequence[dict], path: Path, *, title: str) -> Path:
    """busbw at the reference size over time, one line per image version."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Only runs judged at their reference size are comparable; others (a quick run with small
    # sizes) are in the table but would put a 64 KiB figure next to 128 MiB ones here.
    judged = [r for r in records if (r.get("performance") or {}).get("state") in JUDGED]
    changed = {id(r): c for r, c in zip(records, stack_changes(records)) if c}
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    series: dict[str, list[tuple[datetime.datetime, float, bool]]] = {}
    for record in judged or records:
        _, busbw = headline(record)
        if busbw is None:
            continue
        when = parse_date(record["date"])
        series.setdefault(image_label(record), []).append((when, busbw, bool(record.get("passed"))))
        if id(record) in changed:  # the same image on a changed stack: mark the step's cause
            ax.axvline(when, color="tab:purple", linestyle=":", linewidth=1)
            ax.annotate("stack: " + "; ".join(changed[id(record)]), (when, busbw), fontsize=6,
                        rotation=90, va="bottom", color="tab:purple")
    for label, points in series.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        line, = ax.plot(xs, ys, "o-", label=label)
        bad = [(x, y) for x, y, ok in points if not ok]
        if bad:
            ax.plot([b[0] for b in bad], [b[1] for b in bad], "x", color="red", markersize=10)
    references = {((r.get("performance") or {}).get("reference") or {}).get("value")
                  for r in records} - {None}
    for value in sorted(references):
        ax.axhline(value, color="grey", linestyle="--", linewidth=1)
    times = [p[0] for points in series.values() for p in points]
    if times and max(times) - min(times) < datetime.timedelta(hours=1):
        # A few runs close together: show them on a readable hour scale, not years.
        middle = min(times) + (max(times) - min(times)) / 2
        half_hour = datetime.timedelta(minutes=30)
        ax.set_xlim(middle - half_hour, middle + half_hour)
    ax.set_ylabel("busbw at reference size (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
