"""The performance history: one JSON line per smoke run, per site and partition.

Like ReFrame's perflogs, each record carries what it was judged against (the reference and its
tolerances) and the image it ran (inputs hash, build date), so a verdict can be rebuilt from the log
alone and a regression after an image update shows as a step between two image versions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from containers.locking import file_lock
from containers.prove import stack

LOG_NAME = "allreduce.jsonl"
#: Performance states of runs that measured their reference's message size.
JUDGED = ("pass", "fail", "xfail", "xpass")


def log_path(perflog_dir: Path, *, site: str, partition: str | None) -> Path:
    return perflog_dir / site / (partition or "default") / LOG_NAME


def append(perflog_dir: Path, record: dict) -> Path:
    """Append one record under a lock, so concurrent runs never interleave a line."""
    path = log_path(perflog_dir, site=record["site"], partition=record.get("partition"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(path.name + ".lock")):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    return path


def read(perflog_dir: Path, *, target: str | None = None) -> list[dict]:
    """Every record (oldest first), optionally of one target; unreadable lines are skipped."""
    records = []
    for path in sorted(perflog_dir.rglob(LOG_NAME)) if perflog_dir.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if target is None or record.get("target") == target:
                records.append(record)
    return sorted(records, key=lambda r: r.get("date", ""))


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
    import datetime

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
        when = datetime.datetime.fromisoformat(record["date"].replace("Z", "+00:00"))
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
