"""Wall-clock time limits as batch schedulers write them, read into seconds and back.

One parser for every time rule, in Slurm's forms (PBS's is one of them). Zero is refused:
schedulers read it as "no limit" or refuse it, and neither is what a user meant."""

from __future__ import annotations

import re

_CLOCK = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")


def parse(text: str) -> int:
    """``text`` in seconds; a ValueError's short reason is shown as is."""
    value = str(text).strip()
    match = _CLOCK.match(value)
    if not match:
        raise ValueError(f"'{text}' is not a time (HH:MM:SS, D-HH:MM:SS or MM:SS)")
    days, first, second, third = match.groups()
    clock = days is not None or third is not None  # D-HH[:MM[:SS]] or HH:MM:SS, else [MM:]SS
    hours, minutes, seconds = ((int(first), int(second or 0), int(third or 0)) if clock
                               else (0, int(first), int(second or 0)))
    if days is not None and hours > 23:
        raise ValueError(f"'{text}': hours after a day count must be 0-23")
    if (clock and minutes > 59) or seconds > 59:
        raise ValueError(f"'{text}': minutes and seconds must be 0-59")
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"'{text}' is zero: a job needs some time")
    return total


def format(seconds: int) -> str:  # noqa: A001 - the name the brief and the CLI use
    """``seconds`` as ``HH:MM:SS`` (hours may exceed 24: both Slurm and PBS read that)."""
    if seconds <= 0:
        raise ValueError(f"{seconds} seconds is not a time limit")
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
