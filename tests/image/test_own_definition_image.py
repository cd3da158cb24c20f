"""A definition of the user's own, as a site admin writes one on the tool's debian-base: built
once for the module (no torch: seconds) with a bind of the user's own (``SINGULARITY_BIND``)
that its ``%post`` reads, then read, inspected and published as the tool's own images are, and
its catalogue page opened in a real headless Chromium; rebuilt once without its ``%test``, it
publishes on a real ``invoke run`` of it. A cotainr build step (its sandbox exec, through
cotainr's own code) gets the user's bind beside the package cache's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from containers.app.build import build
from containers.app.inspecting import inspect
from containers.app.project import Project
from containers.app.publishing import publish
from containers.app.running import run_command
from containers.errors import VerdictFailed
from containers.image import provenance
from containers.image.cache import PackageCache
from containers.image.plan import plan_build
from containers.image.sitefit import NO_TORCH
from containers.publish import catalogue as cat
from tests.fixtures import ROOT
from tests.fixtures.data import load_targets
from tests.image.test_plan import data_host
from tests.publish import htmlcheck

pytestmark = pytest.mark.apptainer

#: An admin's own definition: nothing of the tool in it (no labels of its own, no build args).
DEFINITION = """Bootstrap: localimage
From: {base}

%post
    cp /mnt/channel-note /opt/note

%labels
    maintainer admin@example.org

%test
    grep -qx 'read through the bind' /opt/note
"""
#: The same image without its %test (nor the bind): its build runs none.
UNTESTED = DEFINITION.split("%test")[0].replace("cp /mnt/channel-note", "echo plain >")
MANIFEST = ("description: an admin's own image on debian-base (no torch)\n"
            "license: GPL-2.0-or-later\nsite: local-slurm\ndefinition: recipes/mine.def\n")


@pytest.fixture(scope="module")
def own(tmp_path_factory, debian_base_image: Path, real_runtime) -> SimpleNamespace:
    """The project copy with target ``mine``, built once with ``SINGULARITY_BIND`` set."""
    top = tmp_path_factory.mktemp("own")
    root = top / "project"
    for folder in ("recipes", "envs", "sites", "jobs"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    images = top / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    definition = root / "recipes" / "mine.def"
    definition.write_text(DEFINITION.format(base=images / "debian-base.sif"))
    (root / "recipes" / "mine.yaml").write_text(MANIFEST)
    channel = top / "channel"
    channel.mkdir()
    (channel / "channel-note").write_text("read through the bind\n")
    settings = {"images_dir": str(images), "tmp_dir": str(top / "work"),
                "results_dir": str(top / "results")}
    shutil.copy(ROOT / "tasks.py", root / "tasks.py")  # `invoke inspect` as a user runs it
    (root / "invoke.yaml").write_text("containers:\n" + "".join(
        f"  {key}: {value}\n" for key, value in settings.items()))
    project = Project.load(root, settings)
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as env:
        env.delenv("APPTAINER_BIND", raising=False)
        env.setenv("SINGULARITY_BIND", f"{channel}:/mnt")
        build(project, target="mine", say=lines.append)
    image = images / "mine.sif"
    assert image.is_file(), "\n".join(lines[-30:])
    return SimpleNamespace(project=project, image=image, top=top, lines=lines,
                           definition=definition, runtime=real_runtime,
                           record=provenance.read(images / "mine.sif.json"))


def test_the_image_carries_its_own_builds_labels_not_its_bases(own, debian_base_image) -> None:
    labels = provenance.labels_of(own.runtime, own.image)
    base = provenance.read(debian_base_image.with_name("debian-base.sif.json"))
    assert labels["containers.target"] == "mine" and labels["maintainer"] == "admin@example.org"
    assert labels["containers.inputs-hash"] == own.record.inputs_hash != base.inputs_hash
    assert labels["containers.build-date"] == own.record.build_date != base.build_date
    assert own.record.labels == labels | {"containers.arch": "x86_64"}
    assert own.definition.read_text() == DEFINITION.format(
        base=own.image.with_name("debian-base.sif"))  # the user's file is left as written
    assert any(NO_TORCH in line for line in own.lines)  # the build's judgement


def test_a_users_bind_reaches_an_apptainer_build_step(own) -> None:
    """``SINGULARITY_BIND=/x:/mnt`` reached %post (its %test, run at build, checked the copy)."""
    note = subprocess.run(own.runtime.exec_argv(image=own.image, command=["cat", "/opt/note"]),
                          capture_output=True, text=True, timeout=120, check=True).stdout
    assert note == "read through the bind\n" and own.record.tested is True


def test_a_users_bind_reaches_invoke_run_beside_the_runs_own(own, monkeypatch) -> None:
    """``invoke run`` binds its own folders by flag: the runtime adds them to the user's."""
    monkeypatch.delenv("APPTAINER_BIND", raising=False)
    monkeypatch.setenv("SINGULARITY_BIND", f"{own.top / 'channel'}:/mnt")
    lines: list[str] = []
    run_command(own.project, target="mine", command=["cat", "/mnt/channel-note"],
                launcher=False, say=lines.append)
    assert any("read through the bind" in line for line in lines), lines


def test_inspect_judges_it_as_the_build_did(own) -> None:
    """Exit 0, saying the fit is not judged, as the build said."""
    lines: list[str] = []
    report = inspect(own.project, target="mine", say=lines.append)
    assert report["fit"] == [{"level": "info", "rule": "torch", "message": NO_TORCH}]
    assert any(NO_TORCH in line for line in lines)
    done = subprocess.run([sys.executable, "-m", "invoke", "inspect", "--target", "mine"],
                          cwd=own.project.root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and NO_TORCH in done.stdout + done.stderr, done.stderr


def test_it_publishes_with_and_without_the_checks_and_its_page_reads_in_a_browser(
        own, tmp_path) -> None:
    skipped, checked = tmp_path / "skipped", tmp_path / "checked"
    publish(own.project, target="mine", dest=skipped, version="1.0", skip_checks=True,
            say=[].append)
    lines: list[str] = []
    entry = publish(own.project, target="mine", dest=checked, version="1.0",
                    say=lines.append)
    assert entry["checks"]["proof"] == "no collective proof: no torch"
    assert entry["checks"]["apptainer_test"]["passed"] is True
    assert entry["license"] == "GPL-2.0-or-later"
    assert "#SBATCH --nodes=1" in entry["batch_example"]
    assert cat.find(cat.load(skipped / "catalogue.json"), "mine", "1.0").checks.skipped
    page = checked / "index.html"
    assert htmlcheck.problems(page, checked) == []
    seen = htmlcheck.text_of(page.read_text())
    for said in ("License: GPL-2.0-or-later", "As a batch job at local-slurm",
                 "\n".join(entry["batch_example"]), "no collective proof: no torch",
                 f"Bootstrap: localimage\nFrom: {checked / 'mine/1.0.sif'}",
                 "mine-exec cat /etc/os-release"):
        assert said in seen, said
    assert "busbw" not in seen  # no reference section with nothing in it
    _in_chromium(page, tmp_path, entry["batch_example"])


def _in_chromium(page: Path, tmp_path: Path, batch: list[str]) -> None:
    """Debian's chromium, headless, without network: the DOM it built, and a screenshot kept
    for people to look at."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: ./setup.sh test installs it"
    browse = ["unshare", "--net", chromium, "--headless", "--no-sandbox", "--disable-gpu",
              "--no-first-run", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}",
              "--window-size=1200,1800"]
    shot = tmp_path / "own-image-page.png"
    result = subprocess.run([*browse, f"--screenshot={shot}", f"file://{page}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and shot.stat().st_size > 10_000, result.stderr[-2000:]
    dom = subprocess.run([*browse, "--dump-dom", f"file://{page}"], capture_output=True,
                         text=True, timeout=120).stdout
    assert "#SBATCH --job-name=mine" in dom and "GPL-2.0-or-later" in dom
    assert 'id="busbw-history"' not in dom
    print(f"catalogue page screenshot: {shot}")


def test_without_a_test_a_run_of_this_very_image_proves_it(own, tmp_path,
                                                           debian_base_image) -> None:
    """The admin drops the %test and rebuilds (in a copy: the module's image stays): their run
    of the image before (another sha256) is no proof, and publish says what to do; a real
    ``invoke run`` of the new image is, and the catalogue names its command."""
    root, images = tmp_path / "project", tmp_path / "images"
    shutil.copytree(own.project.root, root)
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    for name in ("mine.sif", "mine.sif.json"):  # the image as it was before the rebuild
        os.link(own.image.with_name(name), images / name)
    settings = {"images_dir": str(images), "tmp_dir": str(tmp_path / "work"),
                "results_dir": str(tmp_path / "results")}
    (root / "invoke.yaml").write_text("containers:\n" + "".join(
        f"  {key}: {value}\n" for key, value in settings.items()))
    run_command(Project.load(root, settings), target="mine", command=["true"],
                launcher=False, say=[].append)
    (root / "recipes" / "mine.def").write_text(UNTESTED.format(base=images / "debian-base.sif"))
    project = Project.load(root, settings)
    build(project, target="mine", say=[].append)
    rebuilt = provenance.read(images / "mine.sif.json")
    assert rebuilt.tested is False and rebuilt.sha256 != own.record.sha256
    with pytest.raises(VerdictFailed) as refused:
        publish(project, target="mine", dest=tmp_path / "pub", version="1.0", say=[].append)
    assert f"a run of another image (sha256 {own.record.sha256[:12]})" in str(refused.value)
    assert "run `invoke run --target mine --no-launcher -- <a command" in str(refused.value)
    check = ["grep", "-qx", "plain", "/opt/note"]
    done = subprocess.run([sys.executable, "-m", "invoke", "run", "--target", "mine",
                           "--no-launcher", "--", *check], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    entry = publish(project, target="mine", dest=tmp_path / "pub", version="1.0",
                    say=[].append)
    assert (entry["checks"]["run"]["command"], entry["checks"]["run"]["sha256"]) == \
        (check, rebuilt.sha256)
    seen = htmlcheck.text_of((tmp_path / "pub" / "index.html").read_text())
    assert "no collective proof: no torch" in seen
    assert "proof: the run of `grep -qx plain /opt/note` (exit 0)" in seen


def test_a_users_bind_reaches_a_cotainr_build_step(tmp_path, monkeypatch, data_root,
                                                   data_settings, debian_base_image,
                                                   real_runtime) -> None:
    """cotainr's own sandbox exec (how each of its build steps runs) under the planned step's
    environment, with the package cache's bind: the user's ``/mnt`` is there too."""
    from cotainr.container import SingularitySandbox

    channel = tmp_path / "channel"
    channel.mkdir()
    (channel / "note").write_text("a local conda channel\n")
    cache = PackageCache(root=tmp_path / "packages")
    host = data_host(real_runtime, package_cache=cache,
                     environ={"SINGULARITY_BIND": f"{channel}:/mnt"})
    step = plan_build(load_targets(data_root), "lumi-rocm", settings=data_settings,
                      host=host).steps[-1]
    assert step.target.builder == "cotainr"
    cache.pip.mkdir(parents=True)
    (step.workdir / "tmp").mkdir(parents=True)
    for link, target in step.links.items():  # the `singularity` that cotainr calls
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        Path(link).symlink_to(target)
    monkeypatch.setenv("SINGULARITY_BIND", f"{channel}:/mnt")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for key, value in step.env.items():
        monkeypatch.setenv(key, os.path.expandvars(value))
    monkeypatch.chdir(tmp_path)
    with SingularitySandbox(base_image=str(debian_base_image)) as sandbox:
        seen = sandbox.run_command_in_container(cmd="cat /mnt/note /proc/self/mounts")
    assert seen.stdout.startswith("a local conda channel\n")
    assert " /media " in seen.stdout  # the cache's bind, beside the user's
