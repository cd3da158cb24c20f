"""The option types: each flag value converted, or refused in one line naming the flag and what
it takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import UsageError
from containers.inputs import flags

TIME = flags.TIME


@pytest.mark.parametrize("kind, value, expected", [
    (flags.POSITIVE_INT, "2", 2), (flags.POSITIVE_INT, 3, 3), (flags.POSITIVE_INT, " 4 ", 4),
    (flags.NON_NEGATIVE_INT, "0", 0), (flags.POSITIVE_FLOAT, "1e-3", 0.001),
    (flags.SECONDS, "600", 600.0), (flags.SECONDS, 1.5, 1.5), (flags.FRACTION, "1", 1.0),
    (flags.FRACTION, "0.25", 0.25), (flags.DTYPE, "bfloat16", "bfloat16"),
    (flags.ZERO_STAGE, "3", 3), (flags.ZERO_STAGE, 2, 2), (flags.MODEL, "vit", "vit"),
    (flags.EXAMPLE, "fsdp", "fsdp"), (flags.RANK_LIST, "4,1,2,2", [1, 2, 4]),
    (TIME, "01:30:00", 5400), (TIME, "1-00", 86400), (TIME, 600, 600),
    (flags.ACCOUNT, "project_462000131", "project_462000131"), (flags.TARGET, "lumi-rocm",
                                                                "lumi-rocm"),
    (flags.POSITIVE_INT, None, None),
])
def test_good_values_are_converted(kind: flags.FlagType, value: object,
                                   expected: object) -> None:
    assert kind("--x", value) == expected


@pytest.mark.parametrize("kind, value, message", [
    (flags.POSITIVE_INT, "two", "--x takes a whole number >= 1 (got 'two')"),
    (flags.POSITIVE_INT, "1.5", "--x takes a whole number >= 1 (got '1.5')"),
    (flags.POSITIVE_INT, True, "--x takes a whole number >= 1 (got 'True')"),
    (flags.POSITIVE_INT, 0, "--x must be at least 1 (got 0)"),
    (flags.NON_NEGATIVE_INT, "-1", "--x must be at least 0 (got '-1')"),
    (flags.POSITIVE_FLOAT, "abc", "--x takes a number > 0 (got 'abc')"),
    (flags.POSITIVE_FLOAT, 0.0, "--x must be more than 0 (got 0)"),
    (flags.SECONDS, "nan", "--x must be a finite number of seconds, more than 0 (got 'nan')"),
    (flags.SECONDS, "-inf", "--x must be a finite number of seconds, more than 0 (got '-inf')"),
    (flags.SECONDS, "0", "--x must be more than 0 (got '0')"),
    (flags.FRACTION, "2", "--x must be a fraction in (0, 1] (got '2')"),
    (flags.FRACTION, "0", "--x must be a fraction in (0, 1] (got '0')"),
    (flags.DTYPE, "float64", "--x must be one of float32, float16, bfloat16 (got 'float64')"),
    (flags.ZERO_STAGE, "4", "--x must be one of 1, 2, 3 (got '4')"),
    (flags.RANK_LIST, "1,0", "--x takes a comma list of rank counts >= 1, e.g. 1,2,4 "
                             "(got '1,0')"),
    (TIME, "0", "--x must be a time above zero: HH:MM:SS, D-HH:MM:SS, MM:SS or minutes "
                      "(got '0')"),
    (TIME, "tomorrow", "--x must be a time above zero: HH:MM:SS, D-HH:MM:SS, MM:SS or "
                             "minutes (got 'tomorrow')"),
    (flags.ACCOUNT, "a;b", "--x takes an account name: 1-64 letters, digits and _ . - (not "
                           "starting with . or -) (got 'a;b')"),
    (flags.TARGET, "a\nb", "--x is not a usable target name"),
])
def test_bad_values_are_one_line_naming_flag_and_allowed(kind: flags.FlagType, value: object,
                                                         message: str) -> None:
    with pytest.raises(UsageError) as info:
        kind("--x", value)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert info.value.flag == "--x"


def test_a_bad_name_shows_the_name_rule_then_the_value() -> None:
    from containers.inputs.schema import NAME_RULE

    with pytest.raises(UsageError) as info:
        flags.SITE("--site", "../x")
    assert str(info.value) == f"--site is not a usable site name: {NAME_RULE} (got '../x')"


def test_sizes_and_model_sizes_check_against_their_partner() -> None:
    assert flags.sizes("--sizes", "2:4", "float16") == "2:4"
    with pytest.raises(UsageError, match=r"^--sizes 2:4: 2 B is less than one float32 \(4 B\); "
                                         r"it takes byte sizes"):
        flags.sizes("--sizes", "2:4", "float32")
    assert flags.model_size("--model-size", "40-2", "wideresnet") == "40-2"
    assert flags.model_size("--model-size", None, None) is None
    with pytest.raises(UsageError, match="^--model-size: unknown size 'huge' for model cnn"):
        flags.model_size("--model-size", "huge", None)


def test_paths_are_checked_by_kind_only(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    assert flags.DEST_FOLDER("--dest", str(tmp_path / "missing")) == tmp_path / "missing"
    with pytest.raises(UsageError, match="^--dest names a file; it takes a folder"):
        flags.DEST_FOLDER("--dest", str(file))
    assert flags.EXISTING_FILE("--ds-config", str(file)) == file
    with pytest.raises(UsageError, match="^--data takes an existing folder"):
        flags.EXISTING_FOLDER("--data", str(file))


@pytest.mark.parametrize("value", ["--x", "-x", "a b", "a\nb", "", "a;b"])
def test_a_qos_or_reservation_is_a_name_not_an_option(value: str) -> None:
    with pytest.raises(UsageError, match="^--qos "):
        flags.SCHEDULER_NAME("--qos", value)
    assert flags.SCHEDULER_NAME("--qos", "devel") == "devel"


def test_a_job_id_is_what_sbatch_or_qsub_print() -> None:
    for good in ("1234", "4242.desched1", "77[].pbs01", 1234):
        assert flags.JOB_ID("--job", good) == str(good)
    for bad in ("--help", "12 34", "1234;x", "", "-1", True, "1234\n5"):
        with pytest.raises(UsageError):
            flags.JOB_ID("--job", bad)


def test_check_converts_each_declared_field_under_its_flag_name_first_bad_value_first() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Options:
        batch_size: object = flags.option("global batch", flags.POSITIVE_INT, "8")
        timeout: object = flags.option("seconds", flags.SECONDS, "90")
        note: object = "left as given"

        def __post_init__(self) -> None:
            flags.check(self)

    assert (Options().batch_size, Options().timeout, Options().note) == (8, 90.0, "left as given")
    assert list(flags.declared(Options)) == ["batch_size", "timeout"]
    with pytest.raises(UsageError) as refused:
        Options(batch_size="0", timeout="soon")
    assert refused.value.flag == "--batch-size"
