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


@pytest.mark.parametrize("text, ops", [
    ("allreduce", ["all_reduce"]), ("all-reduce", ["all_reduce"]), ("All_Reduce", ["all_reduce"]),
    ("allgather,reducescatter", ["all_gather", "reduce_scatter"]),
    ("sendrecv, all-to-all", ["alltoall", "sendrecv"]), ("ALL", list(choices.COLLECTIVES)),
])
def test_op_names_as_the_tools_own_files_spell_them(text, ops) -> None:
    """allreduce.py, allreduce.json and nccl-tests' all_reduce_perf name one collective: each
    spelling is taken and becomes the canonical name the results are filed under."""
    assert choices.parse_ops(text) == ops


def test_an_unknown_op_gets_the_likely_one() -> None:
    with pytest.raises(ValueError, match="unknown collective 'alreduce' \\(did you mean "
                                         "'all_reduce'\\?\\), 'bogus': use a comma list of "):
        choices.parse_ops("alreduce,bogus")


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
    assert imported <= {"__future__", "difflib", "re", "typing"}


@pytest.mark.parametrize("text, cores", [
    ("0", {0}), ("0-3,8", {0, 1, 2, 3, 8}), ("49-55", set(range(49, 56))),
    ("8,0-3", {0, 1, 2, 3, 8}), ("1,1", {1}), ("2-2", {2}),
])
def test_parse_cpulist(text, cores):
    assert choices.parse_cpulist(text) == frozenset(cores)


@pytest.mark.parametrize("cores, text", [
    ({0}, "0"), ({0, 1, 2, 3, 8}, "0-3,8"), (range(49, 56), "49-55"), ({1, 3, 5}, "1,3,5"),
    ({5, 4, 0, 1}, "0-1,4-5"), ((), ""),
])
def test_format_cpulist(cores, text):
    assert choices.format_cpulist(cores) == text


@pytest.mark.parametrize("text", ["0", "0-3,8", "49-55", "0-1,4-5,7", "1,3,5"])
def test_cpulist_round_trip(text):
    assert choices.format_cpulist(choices.parse_cpulist(text)) == text


@pytest.mark.parametrize("text", ["", "a", "-1", "3-1", "0,,1", "0-", "0-3,", "1.5", "0-7/2"])
def test_parse_cpulist_rejects(text):
    with pytest.raises(ValueError):
        choices.parse_cpulist(text)


@pytest.mark.parametrize("text, ranks", [
    ("49-55:57-63:17-23", [range(49, 56), range(57, 64), range(17, 24)]),
    ("0:1", [{0}, {1}]),
    ("0-1,4:2-3,5", [{0, 1, 4}, {2, 3, 5}]),
])
def test_parse_rank_cores(text, ranks):
    parsed = choices.parse_rank_cores(text)
    assert parsed == [frozenset(cores) for cores in ranks]
    assert ":".join(choices.format_cpulist(cores) for cores in parsed) == text


@pytest.mark.parametrize("text", ["", ":", "0:", ":1", "0::1", "0;1", "0:x"])
def test_parse_rank_cores_rejects(text):
    with pytest.raises(ValueError):
        choices.parse_rank_cores(text)
