"""Results for people: sizes, pasteable commands, tables."""

from __future__ import annotations

import shlex

from containers.report import console, human_bytes, show_command, table


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (512, 1024, 128 << 20, 3 << 30)] == \
        ["512 B", "1 KiB", "128 MiB", "3 GiB"]


def test_show_command_is_one_shell_line_that_splits_back() -> None:
    argv = ["apptainer", "exec", "--bind", "/a b:/c", "img.sif", "echo", "$HOME"]
    line = show_command(argv, {"APPTAINER_TMPDIR": "/var/tmp/x y"})
    assert line.startswith("APPTAINER_TMPDIR='/var/tmp/x y' ")
    assert shlex.split(line)[1:] == argv


def test_table_renders_every_cell() -> None:
    out = console()
    with out.capture() as captured:
        out.print(table("t", ("a", "b"), [(1, None), ("x", 2.5)]))
    text = captured.get()
    assert "1" in text and "x" in text and "2.5" in text
