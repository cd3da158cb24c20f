"""Version strings as the tool compares them, read by ``packaging`` (PEP 440) in one place. By
release numbers (NGC's ``2.6.0a0+ecf3bae`` has 2.6's APIs), else leading (``550.54 (beta)``)."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

_LEADING = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def release(text: object) -> tuple[int, ...] | None:
    """The release numbers of ``text`` (``2.7.1+rocm6.3`` -> (2, 7, 1)), None without one."""
    value = str(text if text is not None else "").strip()
    try:
        return Version(value).release
    except InvalidVersion:
        match = _LEADING.match(value)
        return tuple(int(part) for part in match.group(1).split(".")) if match else None


def major_minor(text: object) -> tuple[int, int] | None:
    """``(major, minor)`` of ``text``, None unless it starts with both (``2.*`` has none)."""
    found = release(text)
    return (found[0], found[1]) if found is not None and len(found) > 1 else None


def compare_at(value: tuple[int, ...], bound: tuple[int, ...]) -> int:
    """-1, 0 or 1: ``value`` against ``bound`` at the bound's precision (6.2.4 within 6.2)."""
    cut = value[:len(bound)] + (0,) * max(0, len(bound) - len(value))
    return (cut > bound) - (cut < bound)
