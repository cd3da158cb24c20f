"""Results for people: sizes, pasteable commands, tables."""

from __future__ import annotations

import re
import shlex
import subprocess

from containers.report import comment, deferred, human_bytes, show_command, show_table


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (512, 1024, 128 << 20, 3 << 30)] == \
        ["512 B", "1 KiB", "128 MiB", "3 GiB"]


def test_show_command_is_one_shell_line_that_splits_back() -> None:
    argv = ["apptainer", "exec", "--bind", "/a b:/c", "img.sif", "echo", "$HOME"]
    line = show_command(argv, {"APPTAINER_TMPDIR": "/var/tmp/x y"})
    assert line.startswith("APPTAINER_TMPDIR='/var/tmp/x y' ")
    assert shlex.split(line)[1:] == argv


def test_a_piped_table_is_plain_aligned_columns(capsys) -> None:
    show_table("t", ("a", "bee"), [(1, None), ("xyz", 2.5)])
    assert capsys.readouterr().out == "t\na    bee\n1\nxyz  2.5\n"


def test_a_terminal_table_has_rich_box_lines(capsys, monkeypatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    show_table("t", ("a", "b"), [("x", 1)])
    text = capsys.readouterr().out
    assert re.search("[\u2500-\u257f]", text) and "x" in text, text


def test_env_values_and_deferred_variables_expand_where_the_line_is_pasted() -> None:
    """``PATH=<shim>:$PATH`` and a dry run's ``$SLURM_JOB_ID`` expand in the shell the line is
    pasted into; a literal ``$`` meant for the container stays literal."""
    argv = ["show", f"--env=DB=/tmp/{deferred('SLURM_JOB_ID')}-\"!`x", "L=/a:$LD_LIBRARY_PATH"]
    line = show_command(argv, {"PATH": "/shim dir:$PATH", "T": "/tmp/x y"})
    assert line.startswith('PATH="/shim dir:${PATH}" ')
    assert "PATH='" not in line
    assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0
    stand_in = "show() { printenv PATH; printf '%s\\n' \"$@\"; }; "
    pasted = subprocess.run(["bash", "-c", stand_in + line], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77"})
    assert pasted.stdout.splitlines() == [
        "/shim dir:/usr/bin:/bin", '--env=DB=/tmp/77-"!`x', "L=/a:$LD_LIBRARY_PATH"]


def test_a_dry_runs_prose_is_shell_comments() -> None:
    """Every line of it, so an output with a line of prose pastes as a whole."""
    text = comment("run: cpu on site local\n  no device gate: it's missing $(rm -rf x)\n")
    assert text == "# run: cpu on site local\n# no device gate: it's missing $(rm -rf x)"
    assert comment("") == "#"
    assert subprocess.run(["bash", "-c", text + "\nexit 3"]).returncode == 3
