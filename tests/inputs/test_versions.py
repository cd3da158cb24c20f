"""Version strings read once, by packaging (:mod:`containers.inputs.versions`), with the edge
cases the hand-made readers it replaced handled."""

from __future__ import annotations

import pytest

from containers.inputs.versions import compare_at, major_minor, release


@pytest.mark.parametrize("text, expected", [
    ("2.7.1+rocm6.3", (2, 7, 1)),          # torch's local versions
    ("2.6.0a0+ecf3bae40a", (2, 6, 0)),     # NGC's pre-release torch carries 2.6's APIs
    ("2.6rc1", (2, 6)),                    # the old reader made this 2.61
    ("2.10.0.dev20250101", (2, 10, 0)),
    ("v2.1", (2, 1)),
    ("2.7.*", (2, 7)),                     # a wildcard pin
    ("6.2.41133-dd7f95766", (6, 2, 41133)),  # ROCm's version: no PEP 440 version
    ("550.54.15 (beta)", (550, 54, 15)),
    (" 2.35", (2, 35)),
    (2.4, (2, 4)),
    ("none", None), ("", None), (None, None),
])
def test_release_reads_what_each_tool_prints(text, expected) -> None:
    assert release(text) == expected


def test_major_minor() -> None:
    assert major_minor("2.7.1+rocm6.3") == (2, 7)
    assert major_minor("3") is None and major_minor("2.*") is None
    assert major_minor("torch") is None


def test_versions_compare_at_the_bounds_precision() -> None:
    assert compare_at((7, 0, 2), (7, 0)) == 0 and compare_at((7, 1), (7, 0)) == 1
    assert compare_at((6,), (6, 0)) == 0 and compare_at((5, 9), (6,)) == -1
