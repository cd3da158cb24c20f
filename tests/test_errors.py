"""The one error family: each kind's message and exit code, made in one place."""

from __future__ import annotations

import pytest

from containers.errors import (CommandFailed, ConfigError, ContainersError, ImageMissing,
                               PerformanceFailed, Problems, StateError, UsageError, VerdictFailed,
                               describe, raise_all, readable)


def test_exit_codes_per_kind() -> None:
    assert [describe(e)[1] for e in (UsageError("x"), ConfigError("x"), StateError("x"),
                                     ImageMissing("i.sif", "cpu"), CommandFailed("x"),
                                     VerdictFailed("x"), PerformanceFailed("x"))] == \
        [1, 1, 1, 1, 1, 2, 3]
    assert all(issubclass(kind, ContainersError) for kind in (UsageError, VerdictFailed))


def test_messages_name_where_and_what() -> None:
    assert describe(UsageError("must be at least 1", flag="--gpus")) == \
        ("error: --gpus: must be at least 1", 1)
    assert str(UsageError("--gpus must be at least 1", flag="--gpus")) == \
        "--gpus must be at least 1"
    assert str(ConfigError("unknown key", path="sites/x.yaml", line=3, key="gpu")) == \
        "sites/x.yaml:3: gpu: unknown key"
    assert str(ImageMissing("images/cpu.sif", "cpu")) == \
        "image images/cpu.sif is not built; run: invoke build --target cpu"


def test_command_failed_keeps_argv_code_and_the_lines_worth_reading() -> None:
    output = ["step 1", "step 2", "FATAL: no space left on device", "cleanup"]
    error = CommandFailed("apptainer build of cpu", argv=["apptainer", "build", "a b.sif"],
                          returncode=255, output=output)
    assert error.argv == ["apptainer", "build", "a b.sif"] and error.returncode == 255
    assert error.output == output
    assert str(error) == ("apptainer build of cpu failed (exit 255): FATAL: no space left on "
                          "device")
    quiet = CommandFailed("scontrol show node", returncode=1, output=["a", "", "b"])
    assert str(quiet) == "scontrol show node failed (exit 1): a | b"


def test_problems_one_line_each_then_the_count() -> None:
    first = ConfigError("unknown key", path="recipes/a.yaml", line=2, key="defintion")
    second = ConfigError("must be an integer, got str", path="sites/x.yaml", line=5, key="nodes")
    third = UsageError("bad", flag="--target")
    nested = Problems([first, Problems([second, third])])
    assert nested.problems == [first, second, third]  # flattened, in order
    assert str(nested).splitlines() == [str(first), str(second), str(third), "3 problems found"]
    assert describe(nested) == ("error: recipes/a.yaml:2: defintion: unknown key\n"
                                "error: sites/x.yaml:5: nodes: must be an integer, got str\n"
                                "error: --target: bad\nerror: 3 problems found", 1)
    assert isinstance(nested, ConfigError)  # callers that catch a config error still do
    raise_all([])  # nothing to raise
    with pytest.raises(ConfigError) as one:
        raise_all([first])
    assert one.value is first  # a single problem stays itself: its one line is unchanged
    with pytest.raises(Problems):
        raise_all([first, second])


def test_a_build_failing_in_post_quotes_the_tools_own_error_not_only_the_exit_status() -> None:
    """Apptainer's FATAL after a failed %post says only the exit status; pip's ERROR before it
    says why (no matching distribution), and both are quoted."""
    output = ["Collecting nosuchpkg==9.9",
              "ERROR: Could not find a version that satisfies the requirement nosuchpkg==9.9 "
              "(from versions: none)",
              "ERROR: No matching distribution found for nosuchpkg==9.9",
              "FATAL:   While performing build: while running engine: exit status 1"]
    error = CommandFailed("apptainer build of cpu", returncode=255, output=output)
    assert str(error) == (
        "apptainer build of cpu failed (exit 255): ERROR: Could not find a version that "
        "satisfies the requirement nosuchpkg==9.9 (from versions: none) | ERROR: No matching "
        "distribution found for nosuchpkg==9.9 | FATAL:   While performing build: while running "
        "engine: exit status 1")


def test_an_echoed_value_is_cut_to_a_readable_length() -> None:
    """A 120 KB name given as a flag is echoed by its refusal: the line shows both ends of it
    and how much was cut, and every other word whole."""
    name = "a" * 60_000 + "b" * 60_000
    line, code = describe(UsageError(f"is not a usable target name (got {name!r})",
                                     flag="--target"))
    assert code == 1 and len(line) < 500 and "\n" not in line
    assert line.startswith("error: --target: is not a usable target name (got 'aaaa")
    assert line.endswith("bbbb')") and "…[119703 characters cut]…" in line
    many, _ = describe(Problems([ConfigError("x " * 5000, path="a.yaml"),
                                 ConfigError("bad key", path="b.yaml", key="k" * 300)]))
    assert [len(text) < 2100 for text in many.splitlines()] == [True, True, True]
    assert many.splitlines()[1].startswith("error: b.yaml: kkk") and "characters cut" in many
    short = "error: recipes/a.yaml:2: defintion: unknown key"
    assert readable(short) == short and readable("a\nb") == "a\nb"
