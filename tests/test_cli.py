"""The command line as users run it: ``invoke`` in a project folder, exit codes, clean interrupts."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from invoke import Collection

import tasks
from tests.fixtures.disks import plant_in_place
from tests.fixtures.procs import at_a_terminal
from containers.prove import registry
from containers.prove.smoke import SMOKE
from containers.prove.train import TRAINS
from tests.fixtures import ROOT
from tests.fixtures.procs import descendants


def _invoke(project: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli_project(factory_cli_project, tmp_path) -> Path:
    return factory_cli_project(images_dir=tmp_path / "images", tmp_dir=tmp_path / "work",
                               results_dir=tmp_path / "results")


TASKS = ("check", "targets", "build", "smoke", "train", "job", "publish", "verify",
         "verdict", "inspect", "diff", "run", "shell", "jobs", "cache", "local-slurm")
#: Box-drawing characters: a table piped or logged has none.
BOX = re.compile("[\u2500-\u257f]")


def _one_line_error(result: subprocess.CompletedProcess, code: int = 1) -> str:
    """The single error line of a refused command (and that it is all there is)."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_every_task_flag_has_help() -> None:
    collection = Collection.from_module(tasks)
    assert set(collection.tasks) == set(TASKS)  # a new task is added to TASKS, so -h is tried
    for name, task in collection.tasks.items():
        # invoke pops each help entry as it builds the arguments: ask a copy.
        params = list(copy.deepcopy(task).get_arguments())
        assert task.__doc__ and task.__doc__.strip(), name
        for param in params:
            assert param.help, f"invoke {name} --{param.name} has no help text"
            # Its type and default, and no short flag: -h is help on every task.
            assert re.search(r"\[.+\]$", param.help), (name, param.help)
            assert all(len(nick) > 1 for nick in param.nicknames), (name, param.nicknames)


@pytest.mark.parametrize("name", TASKS)
def test_dash_h_is_help_on_every_task(cli_project: Path, name: str) -> None:
    result = _invoke(cli_project, name, "-h")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: inv[oke] [--core-opts] {name}")
    assert "error" not in result.stderr


SIZES = "byte sizes MIN:MAX or A,B,C (K/M/G suffixes)"


@pytest.mark.parametrize("args, message", [
    (["smoke", "--sizes", "nonsense"], "--sizes nonsense: not a byte size: 'nonsense' (use e.g. "
                                       "1024, 1K, 128M, 1G); it takes " + SIZES),
    (["smoke", "--sizes", "16M:1M"], "--sizes 16M:1M: size range start 16777216 is above its "
                                     "end 1048576; it takes " + SIZES),
    (["smoke", "--sizes", "0"], "--sizes 0: byte size must be positive: '0'; it takes " + SIZES),
    (["smoke", "--sizes", "1G:1K"], "--sizes 1G:1K: size range start 1073741824 is above its "
                                    "end 1024; it takes " + SIZES),
    (["smoke", "--dtype", "float64"], "--dtype must be one of float32, float16, bfloat16 (got "
                                      "'float64')"),
    (["smoke", "--dtype", "int8"], "--dtype must be one of float32, float16, bfloat16 (got "
                                   "'int8')"),
    (["train", "--model-size", "huge"], "--model-size: unknown size 'huge' for model cnn: use "
                                        "one of tiny, small, base"),
    (["train", "--target-accuracy", "2"], "--target-accuracy must be a fraction in (0, 1] (got "
                                          "'2')"),
    (["smoke", "--gpus", "two"], "--gpus takes a whole number >= 1 (got 'two')"),
    (["smoke", "--gpus", "abc"], "--gpus takes a whole number >= 1 (got 'abc')"),
    (["train", "--gpus", "abc"], "--gpus takes a whole number >= 1 (got 'abc')"),
    (["smoke", "--nodes", "abc"], "--nodes takes a whole number >= 1 (got 'abc')"),
    (["smoke", "--timeout", "nan"], "--timeout must be a finite number of seconds, more than 0 "
                                    "(got 'nan')"),
    (["smoke", "--timeout", "0"], "--timeout must be more than 0 (got '0')"),
    (["train", "--lr", "abc"], "--lr takes a number > 0 (got 'abc')"),
    (["train", "--scaling", "1,two"], "--scaling takes a comma list of rank counts >= 1, e.g. "
                                      "1,2,4 (got '1,two')"),
    (["smoke", "--target", "../x"], "--target is not a usable target name: 1-64 letters, digits "
                                    "and . _ + -, not starting with - or ., not ending in "
                                    ".partial or .tmp, and not bin, catalogue.json, default, "
                                    "keys, latest, modules (got '../x')"),
])
def test_bad_flag_values_are_one_line_before_anything_runs(cli_project: Path, tmp_path: Path,
                                                           args: list[str],
                                                           message: str) -> None:
    """Refused on the host with the flag and what it takes: exit 1, no traceback, and nothing
    run or recorded (no results folder, no perflog)."""
    assert _one_line_error(_invoke(cli_project, *args)) == f"error: {message}"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("args, message", [
    (["--sizes", "nonsense"], "--sizes nonsense: not a byte size"),
    (["--gpus-per-node", "abc"], "--gpus-per-node takes a whole number >= 1 (got 'abc')"),
    (["--nodes", "abc"], "--nodes takes a whole number >= 1 (got 'abc')"),
    (["--time", "0"], "--time must be a time above zero: HH:MM:SS, D-HH:MM:SS, MM:SS or minutes "
                      "(got '0')"),
    (["--account", "a b"], "--account takes an account name"),
    (["--workload", "ddp", "--model-size", "huge"], "--model-size: unknown size 'huge'"),
    (["--workload", "ddp", "--samples", "x"], "--samples takes a whole number >= 1 (got 'x')"),
    (["--transport", "tcp"], "--transport must be one of socket (got 'tcp')"),
])
def test_job_writes_no_script_for_a_bad_value(cli_project: Path, tmp_path: Path,
                                              args: list[str], message: str) -> None:
    script = tmp_path / "F.sh"
    line = _one_line_error(_invoke(cli_project, "job", "--out", str(script), *args))
    assert line.startswith(f"error: {message}")
    assert not script.exists() and not (tmp_path / "results").exists()


def test_out_folder_and_dest_file_are_refused_by_kind(cli_project: Path, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    assert _one_line_error(_invoke(cli_project, "job", "--out", str(folder))) == \
        f"error: --out {folder} is a folder; name the script file to write (e.g. " \
        f"{folder / 'job.sh'})"
    file = tmp_path / "file"
    file.write_text("x")
    for task in ("publish", "verify"):
        assert _one_line_error(_invoke(cli_project, task, "--target", "cpu", "--dest",
                                       str(file))) == \
            f"error: --dest names a file; it takes a folder (got '{file}')"
    dest = tmp_path / "dest"
    assert _one_line_error(_invoke(cli_project, "publish", "--target", "cpu", "--dest", str(dest),
                                   "--keep", "abc")) == \
        "error: --keep takes a whole number >= 0 (got 'abc')"
    assert not dest.exists()


def test_invoke_dry_never_acts(cli_project: Path, tmp_path: Path) -> None:
    dest = tmp_path / "D"
    refused = _invoke(cli_project, "--dry", "publish", "--target", "cpu", "--dest", str(dest),
                      "--skip-checks")
    assert _one_line_error(refused).startswith("error: invoke --dry: publish has no dry run")
    assert not dest.exists()
    script = tmp_path / "job.sh"
    assert _one_line_error(_invoke(cli_project, "--dry", "job", "--out", str(script))) \
        .startswith("error: invoke --dry: invoke job prints the script under --dry")
    assert not script.exists()
    build = _invoke(cli_project, "--dry", "build", "--target", "cpu")
    assert build.returncode == 0, build.stderr
    assert any(line.startswith("step 2/2: cpu [build]") for line in build.stdout.splitlines())
    smoke = _invoke(cli_project, "--dry", "smoke", "--gpus", "1")
    assert smoke.returncode == 0, smoke.stderr
    assert "\n# run\n" in smoke.stdout and "allreduce.py" in smoke.stdout
    assert not (tmp_path / "images").exists() and not (tmp_path / "work").exists()
    assert not (tmp_path / "results").exists()


def test_a_bad_setting_is_reported_in_the_file_that_has_it(cli_project: Path,
                                                           tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("containers:\n  results_dir: /tmp\n  imags_dir: x\n")
    line = _one_line_error(_invoke(cli_project, "-f", str(other), "targets"))
    assert line == (f"error: {other}:3: containers.imags_dir: unknown key in containers "
                    "settings (did you mean 'images_dir'?)")
    other.write_text("containers:\n  imags_dir: x\n  tmp_dri: y\n")  # every bad key, its file
    several = _invoke(cli_project, "-f", str(other), "targets")
    assert several.returncode == 1 and "Traceback" not in several.stderr
    assert several.stderr.splitlines() == [
        f"error: {other}:2: containers.imags_dir: unknown key in containers settings (did you "
        "mean 'images_dir'?)",
        f"error: {other}:3: containers.tmp_dri: unknown key in containers settings (did you "
        "mean 'tmp_dir'?)", "error: 2 problems found"]
    with open(cli_project / "invoke.yaml", "a") as config:  # invoke reads INVOKE_* for known keys
        config.write("  runtime: auto\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INVOKE_CONTAINERS_RUNTIME": "nowhere"}
    result = subprocess.run([sys.executable, "-m", "invoke", "targets"], cwd=cli_project,
                            env=env, capture_output=True, text=True, timeout=120)
    assert _one_line_error(result) == (
        "error: environment variable INVOKE_CONTAINERS_RUNTIME: containers.runtime: must be "
        "auto, apptainer, singularity or an absolute path")
    with open(cli_project / "invoke.yaml", "a") as config:
        config.write("  account: ''\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INVOKE_CONTAINERS_ACCOUNT": "bad name;x",
           "INVOKE_CONTAINERS_IMAGE_DIR": "/x"}
    result = subprocess.run([sys.executable, "-m", "invoke", "targets"], cwd=cli_project,
                            env=env, capture_output=True, text=True, timeout=120)
    assert "INVOKE_CONTAINERS_IMAGE_DIR: names no setting" in result.stderr, result.stderr
    del env["INVOKE_CONTAINERS_IMAGE_DIR"]
    result = subprocess.run([sys.executable, "-m", "invoke", "targets"], cwd=cli_project,
                            env=env, capture_output=True, text=True, timeout=120)
    assert _one_line_error(result).startswith(  # named where it is set, not as --account
        "error: environment variable INVOKE_CONTAINERS_ACCOUNT: containers.account: 'bad name;x'")


@pytest.mark.parametrize("variable, line", [
    ("INVOKE_CONTAINERS_SQUASHFS=lz4", "error: environment variable INVOKE_CONTAINERS_SQUASHFS: "
     "containers.squashfs: must be one of auto, zstd, gzip, got 'lz4'"),
    ("INVOKE_CONTAINERS_SQUASHFS_LEVEL=abc", "error: environment variable "
     "INVOKE_CONTAINERS_SQUASHFS_LEVEL: containers.squashfs_level: 'abc' is not a whole number"),
])
def test_every_settings_variable_is_read_and_a_bad_one_is_one_line(cli_project: Path, variable,
                                                                   line) -> None:
    """``squashfs`` is not declared in this project's invoke.yaml, so invoke never read its
    variable (ignored without a word); ``squashfs_level`` is, and invoke's own cast of ``abc``
    was a traceback before any task ran."""
    assert "squashfs:" not in (cli_project / "invoke.yaml").read_text()
    name, _, value = variable.partition("=")
    env = {**os.environ, "PYTHONPATH": str(ROOT), name: value}
    with open(cli_project / "invoke.yaml", "a") as config:
        config.write("  squashfs_level: 9\n")
    result = subprocess.run([sys.executable, "-m", "invoke", "targets"], cwd=cli_project,
                            env=env, capture_output=True, text=True, timeout=120)
    assert _one_line_error(result) == line


def test_json_documents_parse_and_tables_are_plain_when_piped(cli_project: Path,
                                                             tmp_path: Path) -> None:
    targets = _invoke(cli_project, "targets", "--json")
    assert targets.returncode == 0, targets.stderr
    rows = json.loads(targets.stdout)
    assert {"target", "site", "arch", "gpu", "builder", "image", "state", "inputs_hash"} <= \
        set(rows[0]) and "cpu" in {row["target"] for row in rows}
    check = _invoke(cli_project, "check", "--json")
    assert check.returncode == 0, check.stderr
    assert {"ok", "errors", "warnings", "targets", "sites"} <= set(json.loads(check.stdout))
    dest = tmp_path / "dest"
    dest.mkdir()
    verify = _invoke(cli_project, "verify", "--dest", str(dest), "--json")
    assert verify.returncode != 0 and "Traceback" not in verify.stderr
    assert {"dest", "ok", "images", "problems"} <= set(json.loads(verify.stdout))
    table = _invoke(cli_project, "targets")
    assert table.returncode == 0 and "cpu" in table.stdout
    assert not BOX.search(table.stdout), table.stdout


def test_smoke_history_json_and_table(cli_project: Path, tmp_path: Path) -> None:
    from containers.prove import perflog

    empty = _invoke(cli_project, "smoke", "--history")  # nothing yet: an answer, not an error
    assert empty.returncode == 0 and empty.stderr == "", empty.stderr
    assert empty.stdout.startswith("no smoke runs recorded yet in "), empty.stdout
    reference = {"bytes": 128 << 20, "value": 1.2, "lower": -0.7, "upper": None,
                 "unit": "GB/s", "source": "measured here"}
    base = {"site": "local", "partition": None, "target": "cpu", "inputs_hash": "a" * 64,
            "ranks": 2, "nodes": 1, "passed": True}
    perflog.append(cli_project / "results" / "perflog", {
        **base, "date": "2026-11-01T10:00:00Z",
        "results": [{"bytes": 128 << 20, "busbw_oop": 1.5}],
        "performance": {"state": "pass", "reference": reference}})
    perflog.append(cli_project / "results" / "perflog", {
        **base, "date": "2026-11-02T10:00:00Z", "results": [{"bytes": 256 << 10,
                                                             "busbw_oop": 0.127}],
        "performance": {"state": "not-measured", "reference": reference}})
    result = _invoke(cli_project, "smoke", "--history", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {"target", "perflog_dir", "plot", "runs"} <= set(document)
    assert [(run["bytes"], run["sanity"], run["performance"], run["plotted"])
            for run in document["runs"]] == [(128 << 20, "PASS", "PASS", True),
                                             (256 << 10, "PASS", "NOT-MEASURED", False)]
    table = _invoke(cli_project, "smoke", "--history")
    assert table.returncode == 0, table.stderr
    assert "256 KiB" in table.stdout and "262144 B" not in table.stdout
    assert not BOX.search(table.stdout)
    assert _one_line_error(_invoke(cli_project, "smoke", "--json")).startswith(
        "error: --json goes with --history")


def test_a_run_this_machine_cannot_hold_is_refused_unless_forced(cli_project: Path) -> None:
    from containers.host.facts import this_machine

    cases = [("--gpus", "100000"), ("--sizes", "4096G")]
    if (this_machine("none").memory or 0) < 61 << 30:  # the case, where it cannot fit
        cases.append(("--sizes", "10G"))
    for flag, value in cases:
        line = _one_line_error(_invoke(cli_project, "smoke", "--dry-run", flag, value))
        assert line.startswith(f"error: {flag} ") and line.endswith("; --force runs it anyway")
    forced = _invoke(cli_project, "smoke", "--dry-run", "--sizes", "4096G", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "warning: --sizes up to 4096 GiB" in forced.stdout


def test_dry_run_lines_paste_into_a_shell(cli_project: Path) -> None:
    """$SLURM_JOB_ID and $PATH expand where the line is pasted, as they would at run time."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "USER")}
    env["PYTHONPATH"] = str(ROOT)
    shown = subprocess.run([sys.executable, "-m", "invoke", "smoke", "--target", "lumi-rocm",
                            "--dry-run"], cwd=cli_project, env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    shown_lines = shown.stdout.splitlines()
    line = shown_lines[shown_lines.index("# run") + 1]
    assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0
    # A stand-in for singularity prints its arguments as the shell passes them.
    pasted = subprocess.run(
        ["bash", "-c", "singularity() { printf '%s\\n' \"$@\"; }; " + line],
        env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "4242", "USER": "alice"},
        capture_output=True, text=True)
    assert "MIOPEN_USER_DB_PATH=/tmp/alice-miopen-cache-4242" in pasted.stdout.splitlines()
    build = _invoke(cli_project, "build", "--target", "lumi-rocm", "--dry-run")
    assert build.returncode == 0, build.stderr
    first = next(ln.strip()[len("run"):].strip() for ln in build.stdout.splitlines()
                 if ln.strip().startswith("run") and "cotainr" in ln)
    assert "PATH='" not in first and ":${PATH}\"" in first
    shim = re.search(r'PATH="([^"]*):\$\{PATH\}"', first).group(1)
    assert subprocess.run(["bash", "-n", "-c", first]).returncode == 0
    cotainr = _command_word(first)
    pasted = subprocess.run(["bash", "-c", first.replace(cotainr, "printenv PATH #", 1)],
                            env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert pasted.stdout.strip() == f"{shim}:/usr/bin:/bin", pasted.stderr


def _command_word(line: str) -> str:
    """The command word of a shown line (the first word that is not NAME=value)."""
    return next(word for word in shlex.split(line) if not re.match(r"[A-Za-z_]\w*=", word))


def test_check_ok_and_bad_manifest_is_one_line(cli_project: Path) -> None:
    ok = _invoke(cli_project, "check")
    assert ok.returncode == 0, ok.stderr
    assert "ok  target cpu" in ok.stdout and "ok  site   local" in ok.stdout
    manifest = cli_project / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("definition:", "defintion:"))
    bad = _invoke(cli_project, "check")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (f"error: {manifest}:6: defintion: unknown key in target "
                                  "manifest (did you mean 'definition'?)")
    assert "Traceback" not in bad.stderr + bad.stdout


def _typo(name: str) -> str:
    """A one-key slip of ``name``: its last letter typed twice."""
    return name + name[-1]


def test_every_task_and_flag_typo_gets_the_likely_name() -> None:
    """For every task and every flag of it, invoke's "No idea what ... is!" names the one meant."""
    from invoke import Program
    from invoke.parser import ParseError, Parser, ParserContext

    contexts = copy.deepcopy(Collection.from_module(tasks)).to_contexts()
    parser = Parser(initial=ParserContext(args=Program().core_args()), contexts=contexts)

    def error(*argv: str) -> str:
        with pytest.raises(ParseError) as caught:
            parser.parse_argv(list(argv))
        return str(tasks.did_you_mean(caught.value, parser))

    for context in contexts:
        assert error(_typo(context.name)) == (f"No idea what '{_typo(context.name)}' is! "
                                              f"(did you mean '{context.name}'?)")
        for flag in context.flags:
            assert error(context.name, _typo(flag)).endswith(f"(did you mean '{flag}'?)"), flag
    assert error("smoke", "--zzzzzz") == ("No idea what '--zzzzzz' is! "
                                          "(invoke smoke -h lists its flags)")
    assert error("qqqqq") == "No idea what 'qqqqq' is! (invoke --list shows the tasks)"


@pytest.mark.parametrize("args, meant", [(["smok"], "'smoke'"),
                                         (["smoke", "--opp", "all"], "'--op'"),
                                         (["--dryy", "smoke"], "'--dry'")])
def test_a_mistyped_task_or_flag_is_one_line_naming_the_likely_one(cli_project: Path, args,
                                                                    meant) -> None:
    result = _invoke(cli_project, *args)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert result.stderr.strip().splitlines() == [
        f"No idea what '{args[-2] if len(args) > 2 else args[0]}' is! (did you mean {meant}?)"]


def test_a_120_kb_word_is_echoed_cut_to_a_readable_line(cli_project: Path) -> None:
    """A task name or a flag value of 120 KB: the one line says it, showing both ends of the
    word and how much was cut, whether invoke's parser or the tool refuses it."""
    word = "a" * 120_000
    cut = f"{'a' * 149}…[119702 characters cut]…{'a' * 149}"
    unknown = _invoke(cli_project, word)
    assert unknown.returncode == 1 and unknown.stdout == "", unknown.stdout
    assert unknown.stderr.strip().splitlines() == [
        f"No idea what '{cut}' is! (invoke --list shows the tasks)"]
    refused = _one_line_error(_invoke(cli_project, "build", "--target", word, "--dry-run"))
    assert len(refused) < 600
    assert refused.endswith(f"(got '{'a' * 149}…[119703 characters cut]…{'a' * 148}')")


def test_json_nested_past_reason_is_one_line_naming_the_file(cli_project: Path,
                                                             tmp_path: Path) -> None:
    """A 5,000-deep line of the jobs index, a 900-deep key in a catalogue entry: one line
    naming the file (and the line), not a RecursionError traceback."""
    index = tmp_path / "results" / "jobs" / "index.jsonl"
    index.parent.mkdir(parents=True)
    index.write_text('{"job_id": "12", "a": ' + "[" * 5000 + "]" * 5000 + "}\n")
    assert _one_line_error(_invoke(cli_project, "jobs")) == (
        f"error: {index}:1: nested deeper than 100 levels; the tool writes no such line: "
        "remove it or move the index away")
    entry = {"target": "cpu", "version": "2026.01.01-abcdef12", "sha256": "0" * 64,
             "size_bytes": 1, "checks": {}, "published": "2026-01-01", "signed": False,
             "file": "cpu/2026.01.01-abcdef12.sif", "module": "modules/cpu/2026.01.01-abcdef12.lua",
             "checksum_file": "cpu/2026.01.01-abcdef12.sif.sha256", "deep": 0}
    text = json.dumps({"format": 1, "updated": None, "targets": {"cpu": {"versions": [entry]}}})
    catalogue = tmp_path / "dest" / "catalogue.json"
    catalogue.parent.mkdir()
    catalogue.write_text(text.replace('"deep": 0', '"deep": ' + '{"k": ' * 900 + "1" + "}" * 900))
    verify = _invoke(cli_project, "verify", "--dest", str(catalogue.parent))
    assert _one_line_error(verify, code=2) == (
        f"error: {catalogue}: catalogue is not valid JSON (nested deeper than 100 levels); fix "
        "or restore it before publishing")


def test_op_takes_the_names_the_tools_files_use(cli_project: Path) -> None:
    """``--op allreduce`` (allreduce.py, allreduce.json) runs all_reduce, by its canonical name."""
    result = _invoke(cli_project, "smoke", "--op", "allreduce,allgather", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert " --op all_reduce,all_gather " in result.stdout
    result = _invoke(cli_project, "smoke", "--op", "alreduce", "--dry-run")
    assert _one_line_error(result).startswith("error: --op unknown collective 'alreduce' (did "
                                              "you mean 'all_reduce'?)")


def test_unknown_target_and_bad_build_arg(cli_project: Path) -> None:
    result = _invoke(cli_project, "build", "--target", "cpuu", "--dry-run")
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: --target: unknown target 'cpuu' (did you mean 'cpu'?)")
    result = _invoke(cli_project, "build", "--target", "cpu", "--dry-run", "--build-arg", "NOEQ")
    assert result.returncode == 1 and "'NOEQ' is not KEY=VALUE" in result.stderr


def test_dry_run_prints_exact_plan_and_runs_nothing(cli_project: Path, tmp_path: Path) -> None:
    result = _invoke(cli_project, "build", "--target", "cpu", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(l.startswith("step 1/2: debian-base [build]") for l in lines)
    assert any(l.startswith("step 2/2: cpu [build]") for l in lines)
    assert sum(" build --force --notest --fakeroot " in l for l in lines) == 2
    assert not (tmp_path / "images").exists() and not (tmp_path / "work").exists()


def test_dry_run_says_the_examples_check_says(cli_project: Path) -> None:
    """One judgement, printed by both: the info line naming the examples the target's
    environment can run; a --build-arg NGC_TAG makes the declared torch unknown, in a warning
    naming the flag."""
    def info(result: subprocess.CompletedProcess) -> list[str]:
        assert result.returncode == 0, result.stderr
        return [line for line in result.stdout.splitlines() if line.startswith("info: ")]

    checked = info(_invoke(cli_project, "check", "--target", "cpu"))
    assert checked == ["info: target cpu: examples ddp, deepspeed, fsdp"]
    assert info(_invoke(cli_project, "build", "--target", "cpu", "--dry-run")) == checked
    tagged = _invoke(cli_project, "build", "--target", "olivia-cuda", "--dry-run",
                     "--build-arg", "NGC_TAG=24.10-py3")
    assert info(tagged) == ["info: target olivia-cuda: examples ddp, deepspeed, fsdp"]
    assert [line for line in tagged.stdout.splitlines() if line.startswith("warning: ")] == [
        f"warning: {cli_project / 'recipes' / 'olivia-cuda.yaml'}: torch: torch version unknown "
        "(--build-arg NGC_TAG=24.10-py3 builds on another base than the one whose torch "
        "olivia-cuda.yaml declares ('torch: 2.8.0a0')): cannot check the examples' needs (ddp "
        ">= 2.0, deepspeed >= 2.0, fsdp >= 2.6)"]


SLOW_DEF = """Bootstrap: localimage
From: {{ BASE_IMAGE }}

%post
    echo slow-post-started
    sleep 300
"""


@pytest.mark.apptainer
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_build_leaves_nothing(cli_project: Path, tmp_path: Path, cpu_image: Path,
                                          sig: signal.Signals) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name in ("debian-base.sif", "debian-base.sif.json"):  # reuse the session's base image
        os.link(cpu_image.with_name(name), images / name)
    (cli_project / "recipes" / "slow.def").write_text(SLOW_DEF)
    (cli_project / "recipes" / "slow.yaml").write_text(
        "description: a build that is interrupted\nbase: debian-base\n"
        "definition: recipes/slow.def\n")
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "build", "--target", "slow"],
                            cwd=cli_project, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=at_a_terminal)
    seen: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "slow-post-started" in line:
            break
    else:
        pytest.fail("the build never reached %post:\n" + "".join(seen[-30:]))
    assert "debian-base: up-to-date" in "".join(seen) or "[not-needed]" in "".join(seen)
    tree = descendants(proc.pid)
    assert tree, "the build should have child processes"
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, rest
    time.sleep(1)
    assert not [p for p in tree if Path(f"/proc/{p}").exists()], "build processes left behind"
    assert sorted(p.name for p in images.iterdir()) == [".slow.lock", "debian-base.sif",
                                                         "debian-base.sif.json"]
    work = tmp_path / "work"
    assert not work.exists() or list(work.iterdir()) == []


def test_verdict_of_a_folder_no_job_wrote_fails_closed(cli_project: Path, tmp_path: Path) -> None:
    """``invoke verdict`` (what batch jobs end with) on a folder without a job's record: a
    sanity FAIL (exit 2) naming it, never a pass; without --results, a usage error."""
    folder = tmp_path / "not-a-job"
    folder.mkdir()
    line = _one_line_error(_invoke(cli_project, "verdict", "--results", str(folder)), code=2)
    assert line.startswith(f"error: verdict FAILED: {folder / 'job.json'} is missing")
    assert not (folder / "verdict.json").exists()
    os.mkfifo(folder / "job.json")  # read as a regular file only: it never hangs
    line = _one_line_error(_invoke(cli_project, "verdict", "--results", str(folder),
                                   timeout=30), code=2)
    assert "job.json is missing or unreadable (not a regular file (a FIFO))" in line
    assert _one_line_error(_invoke(cli_project, "verdict")) == \
        "error: --results: name the results folder of a batch job"
    assert _one_line_error(_invoke(cli_project, "--dry", "verdict", "--results", str(folder))) \
        == "error: invoke --dry: verdict writes verdict.json and has no dry run"


@pytest.mark.parametrize("args", [("smoke", "-h"), ("--list",)])
def test_help_into_a_closed_pipe_ends_quietly(cli_project: Path, args) -> None:
    """``invoke smoke -h | head``: invoke prints help itself; a reader that went away ends it
    with 141 and no traceback, as cat does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "invoke", *args], cwd=cli_project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the help is written
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_verify_dest_help_promises_nothing_verify_does_not_do(cli_project: Path) -> None:
    """verify only reads DEST: its help must not say the folder is made if missing."""
    result = _invoke(cli_project, "verify", "-h")
    assert result.returncode == 0 and "made if missing" not in " ".join(result.stdout.split())
    assert "made if missing" in " ".join(_invoke(cli_project, "publish", "-h").stdout.split())


def test_invoke_job_takes_every_run_option_of_smoke_and_train() -> None:
    """Every flag of invoke smoke / invoke train that changes the run is declared once, on its
    kind's options type, and invoke job takes it too, with the same help and type."""
    collection = Collection.from_module(tasks)
    launch_only = {"target", "gpus", "nodes", "dry_run", "force", "history", "json", "example",
                   "scaling"}

    def flags_of(name: str) -> dict:
        return {p.name.replace("-", "_"): p for p in copy.deepcopy(collection.tasks[name])
                .get_arguments()}

    job = flags_of("job")
    for kind in (SMOKE, TRAINS["ddp"]):
        own = flags_of(kind.name)
        assert {name for name in own if name not in launch_only} == set(kind.run_options)
        for name, (option, _) in kind.run_options.items():
            assert own[name].help.startswith(option.help), name
            assert job[name].help.startswith(f"{'/'.join(registry.applies_to(name))}: "
                                              f"{option.help}"), name
            assert job[name].default in (None, False), name  # left out: the kind's own


def test_job_refuses_a_command_word_that_is_not_utf8(cli_project: Path, tmp_path: Path) -> None:
    """A batch script is UTF-8 text: a byte that is not is refused in one line (it was a
    UnicodeEncodeError from the script writer), and no script is written."""
    script = tmp_path / "F.sh"
    result = subprocess.run([os.fsencode(sys.executable), b"-m", b"invoke", b"job",
                             b"--site", b"local-slurm", b"--workload", b"run", b"--out",
                             os.fsencode(script), b"--",
                             b"echo", b"caf\xe9"], cwd=cli_project, capture_output=True,
                            text=True, errors="replace", timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert _one_line_error(result) == (
        "error: 'caf\\xe9' holds bytes that are not UTF-8, and a job script is UTF-8 text: "
        "pass such a value through a file or an environment variable")
    assert not script.exists()


#: What ``invoke --list``, ``-h`` and the flags' help must not load: the pydantic models of the
#: inputs, the planners and every command's module (each task imports its own when it runs).
#: The job request is loaded: it declares invoke job's flags (it reads records only on use).
HEAVY = ("pydantic", "rich", "containers.inputs.schema", "containers.inputs.sites",
         "containers.inputs.settings", "containers.inputs.recipes", "containers.inputs.envspec",
         "containers.inputs.compat", "containers.inputs.validate", "containers.inputs.references",
         "containers.image.", "containers.run.workload", "containers.prove.verdict",
         "containers.batch.", "containers.publish.", "containers.app.")
LIGHT = ("containers.batch.request",)


def _loaded_by(code: str) -> list[str]:
    """The modules a fresh Python holds after running ``code`` in the checkout."""
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()


def test_importing_tasks_loads_no_models_and_no_command_modules() -> None:
    """invoke --list and -h import tasks.py and run no task: they pay only for the flags."""
    heavy = [name for name in _loaded_by("import tasks") if name not in LIGHT
             and (name.startswith(HEAVY) or name in ("pydantic", "containers.image"))]
    assert heavy == []
    # the check can fail: running a command's code loads them
    assert "pydantic" in _loaded_by("import tasks\nimport containers.app.project")


def test_a_second_listing_is_the_kept_one_until_an_input_changes(
        cli_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = json.loads(_invoke(cli_project, "targets", "--json").stdout)
    (store,) = (tmp_path / "xdg" / "hpc-containers").glob("targets-*.json")
    kept = json.loads(store.read_text())
    kept["listing"]["rows"][0]["state"] = "as kept"  # marks what a kept listing shows
    store.write_text(json.dumps(kept))
    second = json.loads(_invoke(cli_project, "targets", "--json").stdout)
    assert second[0]["state"] == "as kept" and second[1:] == first[1:]
    env_spec = cli_project / "envs" / "cpu.yml"
    env_spec.write_text(env_spec.read_text() + "# edited\n")
    third = {row["target"]: row for row in
             json.loads(_invoke(cli_project, "targets", "--json").stdout)}
    assert "as kept" not in {row["state"] for row in third.values()}
    before = {row["target"]: row for row in first}
    assert third["cpu"]["inputs_hash"] != before["cpu"]["inputs_hash"]
    assert third["debian-base"] == before["debian-base"]


@pytest.mark.parametrize("store_is", ["another user's", "link", "FIFO", "huge"])
def test_a_kept_listing_not_the_users_alone_is_neither_trusted_nor_a_failure(
        cli_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        store_is: str) -> None:
    """Issue 48, part 4: another user's listing was shown; a link, a FIFO or another user's
    file to be rewritten made ``invoke targets`` fail (rc 1); a 250 MB one was read whole."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = json.loads(_invoke(cli_project, "targets", "--json").stdout)
    (store,) = (tmp_path / "xdg" / "hpc-containers").glob("targets-*.json")
    kept = json.loads(store.read_text())
    kept["listing"]["rows"][0]["state"] = "as kept"
    store.write_text(json.dumps(kept))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(store.read_text())
    plant_in_place(store, store_is, elsewhere)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "invoke",
                             "targets", "--json"], cwd=cli_project, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == first
    assert int(listed.stderr.splitlines()[-1]) < 200_000  # KB at most: nothing read whole
    assert "as kept" in elsewhere.read_text()  # the link's target is not written


@pytest.fixture
def fake_sbatch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH finds an ``sbatch`` that only records that it was called."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {folder}/called\necho 7\n')
    (folder / "sbatch").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{folder}:{os.environ['PATH']}"}
    return env, folder / "called"


def _job(cli_project: Path, env: dict[str, str], *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "job", "--site", "local-slurm",
                           "--workload", "build", *words], cwd=cli_project, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_fake_sbatch_sees_a_submitted_job(cli_project: Path, fake_sbatch) -> None:
    env, called = fake_sbatch
    assert _job(cli_project, env, "--submit").returncode == 0 and called.exists()


@pytest.mark.parametrize("words, flag", [
    (["--directive=--submit"], "--directive"), (["--directive", "--submit"], "--directive"),
    (["--directive=--constraint=x", "--directive", "--submit"], "--directive"),
    (["--qos=--submit"], "--qos"), (["--account", "--submit"], "--account")])
def test_a_value_spelled_like_a_flag_of_the_task_is_never_that_flag(
        cli_project: Path, fake_sbatch, words: list[str], flag: str) -> None:
    """Issue 48, part 7: ``--directive=--submit`` was invoke's ``--submit`` and ran sbatch; a
    flag that waits for its value takes the next word as it, whatever it is spelled like."""
    env, called = fake_sbatch
    result = _job(cli_project, env, *words)
    said = result.stdout + result.stderr
    assert "Traceback" not in said and not called.exists(), said
    # refused as that flag's value, or (a scheduler option the tool takes) in the script
    assert re.search(rf"^error: {flag}\b.*--submit|^#SBATCH .*--submit", said, re.M), said


def test_only_this_programs_parser_takes_a_value_first() -> None:
    """The value-first parse is the invoke program's parser for these tasks alone: invoke's
    own parser (any other program in the process) still reads ``--submit`` as the flag (a
    patch of invoke's ParseMachine changed every parser in the process)."""
    from invoke import Parser, ParserContext

    def parser() -> Parser:
        contexts = copy.deepcopy(Collection.from_module(tasks)).to_contexts()  # invoke pops help
        return Parser(initial=ParserContext(), contexts=contexts)

    words = ["job", "--directive", "--submit"]
    _, job = tasks._value_first(parser)().parse_argv(words)  # the core flags' context, the task
    assert job.args["directive"].value == ["--submit"] and not job.args["submit"].value
    _, stock = parser().parse_argv(words)
    assert stock.args["submit"].value  # invoke's own reading, left as it is


def test_a_build_arg_spelled_like_a_flag_is_a_build_arg(cli_project: Path) -> None:
    """``--build-arg --dry-run`` was a dry run; it is a build argument, refused in one line."""
    assert _one_line_error(_invoke(cli_project, "build", "--build-arg", "--dry-run")) == \
        "error: --build-arg: '--dry-run' is not KEY=VALUE"
