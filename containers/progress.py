"""Progress of long operations, for people at a terminal only: a job's log, CI or a pipe gets
the plain lines the operation says anyway, not a stream of redraws."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from rich.progress import (BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)

from containers.report import is_terminal

Advance = Callable[[int], None]
Show = Callable[[str], None]


@contextmanager
def byte_progress(description: str, total: int) -> Iterator[Advance]:
    """An ``advance(nbytes)`` for ``total`` bytes: a bar on a terminal, a no-op elsewhere."""
    if not is_terminal():
        yield lambda count: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                  TransferSpeedColumn(), TimeRemainingColumn(), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda count: progress.advance(task, count)


@contextmanager
def phase_line(description: str) -> Iterator[Show]:
    """A ``show(phase)``: a live line ``<description>: <phase>`` on a terminal, else a no-op."""
    if not is_terminal():
        yield lambda phase: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda phase: progress.update(task, description=f"{description}: {phase}")
