"""The command line as users run it: ``invoke`` in a project folder, exit codes, clean interrupts."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from invoke import Collection

import tasks
from containers.host.process import descendants
from tests.fixtures import ROOT


def _invoke(project: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli_project(factory_project, tmp_path) -> Path:
    root = factory_project()
    shutil.copy(ROOT / "tasks.py", root / "tasks.py")
    (root / "invoke.yaml").write_text(
        f"containers:\n  images_dir: {tmp_path / 'images'}\n  tmp_dir: {tmp_path / 'work'}\n"
        f"  results_dir: {tmp_path / 'results'}\n")
    return root


def test_every_task_flag_has_help() -> None:
    collection = Collection.from_module(tasks)
    assert {"check", "targets", "build", "smoke", "train", "publish", "verify"} <= \
        set(collection.tasks)
    for name, task in collection.tasks.items():
        # invoke pops each help entry as it builds the arguments: ask a copy.
        params = list(copy.deepcopy(task).get_arguments())
        assert task.__doc__ and task.__doc__.strip(), name
        for param in params:
            assert param.help, f"invoke {name} --{param.name} has no help text"


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
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
