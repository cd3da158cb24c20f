"""Results for people: terminal tables (rich) and PNG plots (matplotlib, headless)."""

from __future__ import annotations

import io
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from containers.files import atomic_write_bytes

T = TypeVar("T")


def is_terminal() -> bool:
    """Whether stdout is a terminal, by rich's rules (``TTY_COMPATIBLE``, ``FORCE_COLOR``, then
    ``isatty``) without importing rich (~40 ms of a listing's start)."""
    tty = os.environ.get("TTY_COMPATIBLE", "")
    if tty in ("0", "1"):
        return tty == "1"
    force = os.environ.get("FORCE_COLOR")
    return force != "" if force is not None else sys.stdout.isatty()


def show_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A table on stdout: rich's box lines on a terminal; piped or logged, plain columns
    (rich's layout of a piped table cost ~50 ms of ``invoke targets``' 0.29 s)."""
    cells = [list(columns), *[["" if cell is None else str(cell) for cell in row] for row in rows]]
    if not is_terminal():
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        print(title)
        for row in cells:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SQUARE)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in cells[1:]:
        table.add_row(*row)
    Console(highlight=False).print(table)


def human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.4g} {unit}"
        count /= 1024
    return f"{count:.4g} GiB"


def new_figure(size: tuple[float, float], *, dpi: int = 110) -> tuple[Any, Any]:
    """A figure and its axes, drawn without a display (Agg): plots are made on compute nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size, dpi=dpi)


def save_figure(fig: Any, into: T) -> T:
    """``fig`` laid out, written as PNG into ``into`` (a path or a buffer), and closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    if isinstance(into, Path):  # through the one write path: never into a link or a device
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        atomic_write_bytes(into, buffer.getvalue())
    else:
        fig.savefig(into, format="png")
    plt.close(fig)
    return into


def plot_busbw(report: dict, path: Path, *, title: str) -> Path:
    """busbw (and algbw) against message size, out-of-place and in-place, log-2 x axis."""
    rows = report.get("results", [])
    sizes = [r["bytes"] for r in rows]
    fig, ax = new_figure((8, 4.5))
    for key, label, style in (("oop", "out-of-place", "o-"), ("ip", "in-place", "s--")):
        if all(r.get(key) for r in rows):  # alltoall and sendrecv have no in-place form
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
    return save_figure(fig, path)


def plot_scaling(rows: Sequence[dict], path: Path, *, title: str) -> Path:
    """Throughput against ranks with the ideal line, and efficiency on a second axis."""
    ranks = [r["ranks"] for r in rows]
    rates = [r["throughput"] or 0.0 for r in rows]
    fig, ax = new_figure((7, 4.5))
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
    return save_figure(fig, path)


Say = Callable[[str], None]


def say_line(line: str) -> None:
    """The default ``say``: one line to stdout, flushed (progress must show as it happens)."""
    print(line, flush=True)


#: A host variable a shown command leaves for the shell to expand (``$PATH``, ``${SLURM_JOB_ID}``).
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
#: How an argv word marks a host variable left unexpanded for the shell (see :func:`deferred`).
_MARK = re.compile("\ue000([A-Za-z_][A-Za-z0-9_]*)\ue001")


def deferred(name: str) -> str:
    """A marker for host variable ``name`` in an argv word, shown as ``"${name}"``."""
    return f"\ue000{name}\ue001"


def _literal(text: str) -> str:
    """``text`` literal inside double quotes (``!`` leaves them: history expansion)."""
    parts = text.split("!")
    escaped = [re.sub(r'([\\"$`])', r"\\\1", part) for part in parts]
    return "\"'!'\"".join(escaped)


def shell_word(word: str) -> str:
    """One argv word as a shell reads it back, :func:`deferred` markers as ``${NAME}``."""
    if not _MARK.search(word):
        return shlex.quote(word)
    pieces = _MARK.split(word)  # literal text at even places, variable names at odd ones
    return '"' + "".join("${%s}" % piece if place % 2 else _literal(piece)
                         for place, piece in enumerate(pieces)) + '"'


def comment(text: str) -> str:
    """Prose in what a dry run prints, as shell comments, so all of it pastes."""
    return "\n".join(f"# {line.strip()}".rstrip() for line in str(text).splitlines() or [""])


def commenting(say: Say) -> Say:
    return lambda line: say(comment(line))


def show_command(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    """The exact command as one line to paste, ``env`` its prefix (``PATH="<shim>:${PATH}"``)."""
    prefix = " ".join(
        f"{key}={shell_word(_VAR.sub(lambda m: deferred(m.group(1) or m.group(2)), value))}"
        for key, value in (env or {}).items())
    return (prefix + " " if prefix else "") + " ".join(shell_word(str(word)) for word in argv)
