"""Results for people: terminal tables (rich) and PNG plots (matplotlib, headless)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable, Mapping, Sequence

from rich.console import Console
from rich.table import Table


def console() -> Console:
    # Wide enough for paths in CI logs, where there is no terminal to measure.
    return Console(width=None if Console().is_terminal else 160, highlight=False)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    result = Table(title=title, title_justify="left")
    for column in columns:
        result.add_column(column, overflow="fold")
    for row in rows:
        result.add_row(*("" if cell is None else str(cell) for cell in row))
    return result


def human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.4g} {unit}"
        count /= 1024
    return f"{count} B"


def plot_busbw(report: dict, path: Path, *, title: str) -> Path:
    """busbw (and algbw) against message size, out-of-place and in-place, log-2 x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.get("results", [])
    sizes = [r["bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for key, label, style in (("oop", "out-of-place", "o-"), ("ip", "in-place", "s--")):
        ax.plot(sizes, [r[key]["busbw"] for r in rows], style, label=f"busbw {label}")
    ax.plot(sizes, [r["oop"]["algbw"] for r in rows], ":", color="grey", label="algbw out-of-place")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ticks = sizes[:: max(1, len(sizes) // 8)]
    ax.set_xticks(ticks, [human_bytes(s) for s in ticks], rotation=30)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_scaling(rows: Sequence[dict], path: Path, *, title: str) -> Path:
    """Throughput against ranks with the ideal line, and efficiency on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = [r["ranks"] for r in rows]
    rates = [r["throughput"] or 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.plot(ranks, rates, "o-", label="measured samples/s")
    if rates and rates[0]:
        ax.plot(ranks, [rates[0] * n / ranks[0] for n in ranks], "--", color="grey",
                label="ideal (linear)")
    ax.set_xlabel("ranks")
    ax.set_ylabel("samples/s (global)")
    ax.set_xticks(ranks)
    ax.grid(True, alpha=0.3)
    right = ax.twinx()
    right.plot(ranks, [(r["efficiency"] or 0) * 100 for r in rows], "s:", color="tab:orange",
               label="efficiency")
    right.set_ylabel("scaling efficiency (%)")
    right.set_ylim(0, 110)
    lines = ax.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    ax.legend(lines[0] + extra[0], lines[1] + extra[1], loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


Say = Callable[[str], None]


def say_line(line: str) -> None:
    """The default ``say``: one line to stdout, flushed (progress must show as it happens)."""
    print(line, flush=True)


def show_command(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shlex.join(argv)
