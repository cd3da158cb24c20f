"""jobs/choices.py: the names and the size syntax the host and the workload scripts share."""

from __future__ import annotations

import ast

import pytest

from tests.jobs.scripts import JOBS, sibling

choices = sibling("choices")


@pytest.mark.parametrize("text, expected", [
    ("1024", 1024), ("1K", 1024), ("1k", 1024), ("128M", 128 * 2**20), ("1G", 2**30),
    ("4KiB", 4096), ("2MB", 2 * 2**20), (" 8 ", 8),
])
def test_parse_size(text, expected):
    assert choices.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "0", "0K", "-1K", "1T", "1.5M", "K"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        choices.parse_size(text)


@pytest.mark.parametrize("spec, factor, expected", [
    ("1K:8K", 2, [1024, 2048, 4096, 8192]),
    ("1K:64K", 4, [1024, 4096, 16384, 65536]),
    ("1K:5K", 2, [1024, 2048, 4096]),  # the end is an upper bound, not always hit
    ("128M:128M", 2, [128 * 2**20]),
    ("1K,4K,128M", 2, [1024, 4096, 128 * 2**20]),
    ("128M", 2, [128 * 2**20]),
    ("3K,1K", 2, [3072, 1024]),  # a list keeps its order
])
def test_parse_sizes(spec, factor, expected):
    assert choices.parse_sizes(spec, factor) == expected


@pytest.mark.parametrize("spec, factor", [
    ("8K:1K", 2), ("1K:2K:4K", 2), ("", 2), (",", 2), ("1K:8K", 1), ("1K:x", 2),
])
def test_parse_sizes_rejects(spec, factor):
    with pytest.raises(ValueError):
        choices.parse_sizes(spec, factor)


def test_check_sizes_needs_one_element() -> None:
    assert choices.check_sizes("2:4", "float16") == [2, 4]
    with pytest.raises(ValueError, match="2 B is less than one float32 \\(4 B\\)"):
        choices.check_sizes("2:4", "float32")


def test_check_model_size() -> None:
    assert choices.check_model_size("cnn", "tiny") == "tiny"
    assert choices.check_model_size("wideresnet", "40-2") == "40-2"
    with pytest.raises(ValueError, match="unknown size '40-2' for model cnn: use one of tiny, "
                                         "small, base$"):
        choices.check_model_size("cnn", "40-2")
    with pytest.raises(ValueError, match="or DEPTH-WIDTH such as 16-4"):
        choices.check_model_size("wideresnet", "huge")


def test_standard_library_only() -> None:
    """The host loads this file too: it must not need torch (or anything outside the stdlib)."""
    tree = ast.parse((JOBS / "choices.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "re"}
