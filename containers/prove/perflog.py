"""The performance history: one JSON line per smoke run and collective, one log per site,
partition and collective. Like ReFrame's perflogs, each record carries its reference and image,
so a regression shows as a step between two image versions."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Iterator, Sequence

from containers.errors import StateError, on_disk, os_failure
from containers.files import FileRefused, json_value, open_append_regular, read_regular
from containers.inputs import names
from containers.inputs.schema import check_name
from containers.locking import file_lock
from containers.prove.smoke import op_of
from containers.prove.transport import stack_diff
from containers.report import human_bytes, new_figure, save_figure

#: The one log of every collective that versions before per-op logs wrote; still read.
OLD_LOG_NAME = "allreduce.jsonl"
#: The most one log may hold (about 100,000 records): beyond it the file is not a perflog.
LOG_LIMIT = 256 << 20
#: One run on the history plot: (date, busbw at the reference size, passed).
Point = tuple[datetime.datetime, float, bool]


def log_name(op: str) -> str:
    """One collective's log (``all_reduce.jsonl``), for a collective this tool knows."""
    if op not in names.COLLECTIVES:
        raise StateError(f"perflog record of unknown collective {op!r}; one of "
                         f"{', '.join(names.COLLECTIVES)}")
    return f"{op}.jsonl"


def log_path(perflog_dir: Path, *, site: str, partition: str | None,
             op: str = "all_reduce") -> Path:
    """``<perflog_dir>/<site>/<partition>/<op>.jsonl``; both names pass the name rule."""
    check_name("site", site, key="site")
    if partition is not None:
        check_name("partition", partition, key="partition")
    return perflog_dir / site / (partition or "default") / log_name(op)


def append_line(path: Path, record: dict) -> None:
    """``record`` as one JSON line, after a newline where the last line was torn."""
    line = json.dumps(record, sort_keys=True, allow_nan=False).encode("utf-8") + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_append_regular(path) as handle:
        end = handle.seek(0, os.SEEK_END)
        if end and os.pread(handle.fileno(), 1, end - 1) != b"\n":
            line = b"\n" + line
        handle.write(line)


def append(perflog_dir: Path, record: dict) -> Path:
    """Append one record under a lock (the runs of one site may end at once)."""
    path = log_path(perflog_dir, site=record["site"], partition=record.get("partition"),
                    op=op_of(record))
    with on_disk("append to the perflog", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_name(path.name + ".lock")):
            append_line(path, record)
    return path


def parse_date(value: object) -> datetime.datetime | None:
    """A record's ``date`` (ISO 8601 with a time zone), else None: it cannot be ordered."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _records(data: bytes) -> Iterator[dict]:
    """The usable records of one log: whole lines, JSON objects with a good date."""
    for raw in data.split(b"\n")[:-1]:
        try:
            record = json_value(raw)
        except ValueError:  # not JSON, not UTF-8, or nested past reason
            continue
        if isinstance(record, dict) and parse_date(record.get("date")) is not None:
            yield record


def _log_bytes(path: Path) -> bytes:
    """One log's bytes (a regular file of at most :data:`LOG_LIMIT`), or one line."""
    try:
        return read_regular(path, limit=LOG_LIMIT)
    except FileRefused as exc:
        raise StateError(f"perflog {path} is {exc}; move it away") from exc
    except OSError as exc:
        raise StateError(f"cannot read the perflog: {os_failure(exc)}") from exc


def read(perflog_dir: Path, *, target: str | None = None,
         ops: Sequence[str] | None = None) -> list[dict]:
    """Every record, oldest first, of ``target`` and ``ops`` where given."""
    logs = [OLD_LOG_NAME, *map(log_name, ops if ops is not None else names.COLLECTIVES)]
    # log by log in the collectives' order, so one run's lines (one date) keep that order
    paths = [path for name in logs for path in sorted(perflog_dir.rglob(name))] \
        if perflog_dir.is_dir() else []
    records = [record for path in paths for record in _records(_log_bytes(path))
               if (target is None or record.get("target") == target)
               and (ops is None or op_of(record) in ops)]
    return sorted(records, key=lambda r: parse_date(r["date"]))


def headline(record: dict) -> tuple[int | None, float | None]:
    """(bytes, busbw) a record is listed by: the reference size, else the largest measured."""
    point = at_reference(record)
    if point is not None:
        return point
    rows = record.get("results") or []
    return (rows[-1]["bytes"], rows[-1]["busbw_oop"]) if rows else (None, None)


def at_reference(record: dict) -> tuple[int, float] | None:
    """(bytes, busbw) at the record's reference size, or None: what may be plotted."""
    reference = (record.get("performance") or {}).get("reference")
    if not isinstance(reference, dict) or op_of(reference) != op_of(record):
        return None  # a reference of another collective never measures this one
    for row in record.get("results") or []:
        if row.get("op", op_of(record)) == op_of(record) and \
                row.get("bytes") == reference.get("bytes") and \
                isinstance(row.get("busbw_oop"), (int, float)):
            return row["bytes"], float(row["busbw_oop"])
    return None


def image_label(record: dict) -> str:
    short = (record.get("inputs_hash") or "unknown")[:12]
    built = (record.get("build_date") or "")[:10]
    return f"{record.get('target')} {short}" + (f" ({built})" if built else "")


def stack_changes(records: Sequence[dict]) -> list[list[str]]:
    """Per record, what changed in its stack since the same image's previous run."""
    last: dict[str, dict] = {}
    found = []
    for record in records:
        image = str(record.get("sha256") or record.get("inputs_hash") or record.get("target"))
        found.append(stack_diff(last.get(image), record.get("stack")))
        if record.get("stack"):
            last[image] = record["stack"]
    return found


def history_rows(records: Sequence[dict]) -> list[list[object]]:
    rows = []
    for run in history_json(records):
        size, busbw, reference = run["bytes"], run["busbw"], run["reference"]
        rows.append([
            (run["date"] or "")[:19], run["site"], run["partition"] or "",
            image_label(run), run["ranks"], run["nodes"], run["op"],
            "" if size is None else human_bytes(size),
            "" if busbw is None else f"{busbw:.3f}",
            "" if not reference else f"{reference['value']:g} {reference['unit']} at "
                                     f"{human_bytes(reference['bytes'])}",
            run["sanity"], run["performance"] or "",
            "yes" if run["plotted"] else "no", "; ".join(run["stack_changed"]),
        ])
    return rows


HISTORY_COLUMNS = ("date", "site", "partition", "image", "ranks", "nodes", "op", "size",
                   "busbw GB/s", "reference", "sanity", "performance", "plotted",
                   "stack changed")


def history_json(records: Sequence[dict]) -> list[dict]:
    """The history as ``invoke smoke --history --json`` prints it (docs/results.md)."""
    runs = []
    for record, changed in zip(records, stack_changes(records)):
        size, busbw = headline(record)
        performance = record.get("performance") or {}
        reference = performance.get("reference")
        runs.append({
            "date": record.get("date"), "site": record.get("site"),
            "partition": record.get("partition"), "target": record.get("target"),
            "inputs_hash": record.get("inputs_hash"), "build_date": record.get("build_date"),
            "ranks": record.get("ranks"), "nodes": record.get("nodes"), "op": op_of(record),
            "bytes": size, "busbw": busbw,
            "reference": reference if isinstance(reference, dict) else None,
            "sanity": "PASS" if record.get("passed") else "FAIL",
            "performance": str(performance.get("state") or "").upper() or None,
            "plotted": at_reference(record) is not None, "stack_changed": changed,
            "out_dir": record.get("out_dir")})
    return runs


def _reference_key(record: dict) -> tuple | None:
    reference = (record.get("performance") or {}).get("reference")
    if not isinstance(reference, dict) or not isinstance(reference.get("value"), (int, float)):
        return None
    return (reference.get("bytes"), float(reference["value"]), reference.get("lower"),
            reference.get("upper"), reference.get("unit") or "GB/s",
            reference.get("source") or "source not recorded")


def plot_series(records: Sequence[dict]) -> dict[str, list[Point]]:
    """The plot's points per image version, of the runs measured at their reference size."""
    measured = [(record, point) for record in records
                if (point := at_reference(record)) is not None]
    series: dict[str, list[Point]] = {}
    several = len({op_of(record) for record, _ in measured}) > 1
    for record, point in measured:
        label = image_label(record) + (f" {op_of(record)}" if several else "")
        series.setdefault(label, []).append(
            (parse_date(record["date"]), point[1], bool(record.get("passed"))))
    return series


def _plot_references(ax, plotted: Sequence[dict], series: dict) -> None:
    """Each reference the plotted runs were judged by: a dashed line, its tolerance band."""
    for size, value, lower, upper, unit, source in sorted(
            {key for key in map(_reference_key, plotted) if key is not None}, key=str):
        line = ax.axhline(value, color="grey", linestyle="--", linewidth=1,
                          label=f"reference {value:g} {unit} at {human_bytes(size)} ({source})")
        low = value * (1 + lower) if isinstance(lower, (int, float)) else None
        high = value * (1 + upper) if isinstance(upper, (int, float)) else None
        if low is not None or high is not None:
            ax.axhspan(low if low is not None else 0.0,
                       high if high is not None else max([value, *(p[1] for s in series.values()
                                                                   for p in s)]) * 1.1,
                       color=line.get_color(), alpha=0.12, label="tolerance band")


def plot_history(records: Sequence[dict], path: Path, *, title: str) -> Path:
    """busbw at the reference size over time, one line per image version."""
    fig, ax = new_figure((9, 4.8))
    series = plot_series(records)
    for record, changed in zip(records, stack_changes(records)):
        point = at_reference(record)
        if changed and point:  # the same image on a changed stack: mark the step's cause
            when = parse_date(record["date"])
            ax.axvline(when, color="tab:purple", linestyle=":", linewidth=1)
            ax.annotate("stack: " + "; ".join(changed), (when, point[1]), fontsize=6,
                        rotation=90, va="bottom", color="tab:purple")
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=label)
        bad = [p for p in points if not p[2]]
        if bad:
            ax.plot([p[0] for p in bad], [p[1] for p in bad], "x", color="red", markersize=10)
    plotted = [record for record in records if at_reference(record) is not None]
    _plot_references(ax, plotted, series)
    left_out = len(records) - len(plotted)
    if not plotted:
        ax.text(0.5, 0.5, "no run measured its reference size", transform=ax.transAxes,
                ha="center", va="center", color="grey")
    times = [p[0] for points in series.values() for p in points]
    if times and max(times) - min(times) < datetime.timedelta(hours=1):
        # A few runs close together: show them on a readable hour scale, not years.
        middle = min(times) + (max(times) - min(times)) / 2
        half_hour = datetime.timedelta(minutes=30)
        ax.set_xlim(middle - half_hour, middle + half_hour)
    ax.set_ylabel("busbw at the reference size (GB/s)")
    ax.set_title(title + (f"\n({left_out} run{'s' if left_out != 1 else ''} without the "
                          "reference size listed, not plotted)" if left_out else ""),
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return save_figure(fig, path)
