"""Integration: the real CPU image, built by the real Apptainer through the tool (once per run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from containers.app.build import build
from containers.files import sha256_file
from containers.host.facts import host_arch
from containers.host.sources import PipConfig
from containers.image import builder, provenance
from containers.image.identity import chain_hashes
from containers.image.plan import HostFacts, plan_build
from containers.inputs.definition import read_definition
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from tests.fixtures import ROOT
from tests.fixtures.procs import descendants

pytestmark = pytest.mark.apptainer


def test_exec_torch_and_deepspeed_in_image(cpu_image: Path, real_runtime) -> None:
    argv = real_runtime.exec_argv(image=cpu_image, command=[
        "python", "-c", "import torch, deepspeed, numpy; print(torch.__version__, "
        "deepspeed.__version__, torch.distributed.is_gloo_available())"])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.split()[-3:] == ["2.13.0+cpu", "0.19.8", "True"]


def test_provenance_beside_and_inside_image(cpu_image: Path, real_project, real_runtime) -> None:
    record = json.loads(cpu_image.with_name("cpu.sif.json").read_text())
    assert record["inputs_hash"] == chain_hashes(real_project.targets, "cpu")["cpu"]
    assert record["sha256"] == sha256_file(cpu_image)
    assert record["size_bytes"] == cpu_image.stat().st_size
    assert record["runtime"] == {"flavour": real_runtime.flavour, "version": real_runtime.version}
    assert "torch==2.13.0+cpu" in record["pip_freeze"]
    assert record["inputs"]["base"] == chain_hashes(real_project.targets, "cpu")["debian-base"]
    inspected = subprocess.run(real_runtime.inspect_argv(cpu_image), capture_output=True,
                               text=True, check=True).stdout
    labels = json.loads(inspected)["data"]["attributes"]["labels"]
    # The image's own labels, not the ones inherited from debian-base.
    assert labels["containers.target"] == "cpu"
    assert labels["containers.inputs-hash"] == record["inputs_hash"]
    assert labels["containers.git-revision"] == record["git_revision"] != ""


def test_unchanged_inputs_rebuild_nothing(cpu_image: Path, real_project) -> None:
    before = cpu_image.stat().st_mtime_ns
    lines: list[str] = []
    started = time.monotonic()
    plan = build(real_project, target="cpu", say=lines.append)
    assert plan.pending == ()
    assert [s.action for s in plan.steps] == ["not-needed", "up-to-date"]
    assert "cpu is up to date: nothing to build" in lines
    assert cpu_image.stat().st_mtime_ns == before
    assert time.monotonic() - started < 30


def test_apptainer_test_passes_on_image(cpu_image: Path, real_runtime) -> None:
    result = subprocess.run(real_runtime.test_argv(cpu_image), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "gloo all_reduce in one process: ok" in result.stdout


# A %post that reads what the build was lent: each bound host folder (HOST_PATHS, the same here-doc
# as cpu.def's %setup) and the staged build context; the image keeps what it read.
TINY_POST = """%post
    set -eu
    tr ':' '\\n' <<'HOST_PATHS' | while IFS= read -r dir; do
{{ HOST_PATHS }}
HOST_PATHS
        [ -z "$dir" ] || cat "$dir/marker.txt" >> /proof-bind
    done
    cp /opt/build-context/pip.conf /proof-context
"""


def test_spaces_in_context_base_image_and_bound_host_path(
        tmp_path: Path, factory_project, cpu_image: Path, real_project, real_runtime) -> None:
    """A real build whose build context, base image and bound host folder all have spaces in
    their paths: cpu.def's own %setup and %files lines, Bootstrap: localimage from debian-base."""
    root = factory_project()
    cpu_def = read_definition(root / "recipes" / "cpu.def")
    setup, files = cpu_def.section("setup"), cpu_def.section("files")
    assert setup is not None and files is not None
    (root / "recipes" / "tiny.def").write_text(
        "Bootstrap: localimage\nFrom: {{ BASE_IMAGE }}\n\n%arguments\n    HOST_PATHS=\n\n"
        + setup.header_line + setup.body + files.header_line + files.body + TINY_POST)
    (root / "recipes" / "tiny.yaml").write_text(
        f"description: paths with spaces\narch: {host_arch()}\nbuilder: apptainer\n"
        "definition: recipes/tiny.def\nbase: debian-base\ntest: false\n")
    images = tmp_path / "my images"
    images.mkdir()
    built = real_project.settings.images_dir
    (images / "debian-base.sif").symlink_to(built / "debian-base.sif")
    shutil.copy(built / "debian-base.sif.json", images)
    wheels = tmp_path / "host wheels it's \"local\" $HOME"
    wheels.mkdir()
    (wheels / "marker.txt").write_text("bound ok\n")
    settings = load_settings(root, {"images_dir": str(images),
                                    "tmp_dir": str(tmp_path / "build tmp")})
    targets = load_targets(root)
    # pip.conf cannot hold a space in a path: the host's pip config has it as a file:// URL.
    pip = PipConfig(find_links=(wheels.as_uri(),))
    assert pip.local_paths() == [str(wheels)]
    host = HostFacts(runtime=real_runtime, pip=pip, host_paths=tuple(pip.local_paths()),
                     git_revision="test", build_date="now",
                     mirror="http://unused.example/debian",  # debian-base is not rebuilt
                     built_hashes=provenance.built_hashes(images, list(targets)))
    plan = plan_build(targets, "tiny", settings=settings, host=host)
    assert [s.action for s in plan.steps] == ["up-to-date", "build"]
    lines: list[str] = []
    builder.execute(plan, runtime=real_runtime, say=lines.append)
    image = images / "tiny.sif"
    assert image.is_file(), "\n".join(lines[-30:])
    out = subprocess.run(real_runtime.exec_argv(image=image, command=[
        "cat", "/proof-bind", "/proof-context"]), capture_output=True, text=True, timeout=120,
        check=True).stdout
    assert out.splitlines()[0] == "bound ok"
    assert f"find-links = {wheels.as_uri()}" in out
    assert not (tmp_path / "build tmp" / f"tiny-{plan.steps[1].short_hash}").exists()


def _processes_using(folder: Path) -> list[psutil.Process]:
    """Live processes whose command line or working folder names ``folder``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        info = proc.info
        text = " ".join(info["cmdline"] or []) + " " + (info["cwd"] or "")
        if str(folder) in text and info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def test_nothing_of_a_build_survives_a_sigkill_of_the_tool(factory_project, tmp_path: Path) -> None:
    """``kill -KILL`` of ``invoke build``'s process group mid-debootstrap: apptainer runs in a
    session of its own, with its fakeroot helper and debootstrap below it; 5 s after the kill
    none of them may still run, and the work folder is reported as a leftover."""
    root = factory_project()
    shutil.copy(ROOT / "tasks.py", root / "tasks.py")
    work = tmp_path / "work"
    (root / "invoke.yaml").write_text(
        f"containers:\n  images_dir: {tmp_path / 'images'}\n  tmp_dir: {work}\n"
        f"  results_dir: {tmp_path / 'results'}\n")
    tool = subprocess.Popen([sys.executable, "-m", "invoke", "build", "--target", "debian-base"],
                            cwd=root, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen: list[str] = []
    tree: list[psutil.Process] = []
    try:
        assert tool.stdout is not None
        deadline = time.monotonic() + 300
        for line in tool.stdout:
            seen.append(line)
            if " debootstrap " in line or time.monotonic() > deadline:
                break
        assert any(" debootstrap " in line for line in seen), "".join(seen[-30:])
        # The plan's cache line names debootstrap, and the build starts only after the package
        # cache was measured (seconds when it is big): wait for apptainer and its helpers.
        while True:
            tree = [psutil.Process(pid) for pid in descendants(tool.pid)]
            if len(tree) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(2)  # well inside debootstrap: its helpers run
        tree = [psutil.Process(pid) for pid in descendants(tool.pid)]
        assert len(tree) >= 3, [p.name() for p in tree]  # supervisor, apptainer and below
        os.killpg(tool.pid, signal.SIGKILL)
        tool.wait(timeout=30)
        time.sleep(5)
        survivors = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        survivors += [p for p in _processes_using(work) if p not in survivors]
        assert not survivors, [(p.pid, p.name()) for p in survivors]
    finally:
        for proc in [*tree, *_processes_using(work)]:  # only ours: the tree we started
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    settings = load_settings(root, {"images_dir": str(tmp_path / "images"), "tmp_dir": str(work)})
    found = builder.leftovers(settings)
    assert [f.kind for f in found] == ["work folder"], found
    assert found[0].path.parent == work and found[0].path.name.startswith("debian-base-")
