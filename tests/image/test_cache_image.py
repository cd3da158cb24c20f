"""The package cache with the real Apptainer: on a site whose index has no uv, pip installs and a
cached download that went bad is refused by the index's hash and fetched again; uv installs
elsewhere, and a rebuild from a kept root file system holds exactly what a clean build holds.

The ``cpu`` recipe with a one-package env spec (no torch: seconds, not minutes) on the session's
debian-base, linked into a folder of the test's own, with a cache of the test's own; the rebuild's
builds are the session's run of benchmarks/build_cache.py (``build_cache_run``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers.app.build import build
from containers.app.project import Project
from tests.fixtures.images import tiny_cpu_project

pytestmark = pytest.mark.apptainer


def site_index_without_uv(folder: Path) -> str:
    """A site's own package index (PEP 503, sha256 in each link) holding ``idna`` alone: no
    uv there, so the install script falls back to pip."""
    wheels = folder / "files"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d",
                    str(wheels), "idna"], check=True, timeout=300)
    (wheel,) = wheels.glob("idna-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (folder / "simple" / "idna").mkdir(parents=True)
    (folder / "simple" / "idna" / "index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    return (folder / "simple").as_uri()


def test_pip_serves_a_site_without_uv_and_refetches_a_corrupt_download(
        tmp_path: Path, factory_project, debian_base_image: Path, real_runtime,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The site's index, as the build host's pip config names it, has no uv: pip installs,
    and its cached download that went bad is refused by the index's hash and fetched again."""
    monkeypatch.setenv("PIP_INDEX_URL", site_index_without_uv(tmp_path / "site"))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    root = tiny_cpu_project(factory_project(), ["idna"])
    images = tmp_path / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    project = Project.load(root, {"images_dir": str(images),
                                      "cache_dir": str(tmp_path / "cache"),
                                      "tmp_dir": str(tmp_path / "work")})
    first: list[str] = []
    build(project, target="cpu", say=first.append)
    assert "installer: pip (uv 0.13.9 is not on this site's package index)" in "\n".join(first)
    downloads = tmp_path / "cache" / "packages" / "pip" / "downloads"
    (wheel,) = downloads.glob("idna-*.whl")
    good = wheel.read_bytes()
    wheel.write_bytes(good[: len(good) // 2])  # a download cut short, or a disk that lost it

    again: list[str] = []
    build(project, target="cpu", force=True, say=again.append)
    log = "\n".join(again)
    assert "has bad hash" in log, log[-3000:]
    assert wheel.read_bytes() == good  # fetched again, the cache mended
    freeze = subprocess.run(real_runtime.exec_argv(image=images / "cpu.sif", command=[
        "python", "-m", "pip", "freeze"]), capture_output=True, text=True, timeout=120,
        check=True).stdout
    assert freeze.startswith("idna==") and len(freeze.splitlines()) == 1


@pytest.fixture(scope="module")
def rebuilt(build_cache_run: dict, real_runtime) -> dict:
    """The session's build chain (benchmarks/build_cache.py, tests/fixtures/images.py): ``idna``
    built in full, then ``idna`` + ``six`` rebuilt from the root the first build kept, then the
    same inputs built clean (--no-cache); each build's log, record and trusted certificates."""
    done, keep = build_cache_run["done"], build_cache_run["keep"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found: dict = {"roots": keep / "cache-1" / "packages" / "roots", "stdout": done.stdout,
                   "run": json.loads(build_cache_run["out"].read_text())["runs"][0]}
    for name, phase in (("full", "cold"), ("rebuilt", "warm"), ("clean", "no_cache")):
        prefix = f"[{phase.replace('_', ' ')} 1/1] "
        image = keep / f"{phase}-1.sif"
        found[name] = {
            "log": "\n".join(line.removeprefix(prefix) for line in done.stdout.splitlines()
                             if line.startswith(prefix)),
            "record": json.loads(image.with_name(image.name + ".json").read_text()),
            "trusts": subprocess.run(real_runtime.exec_argv(image=image, command=[
                "cat", "/etc/ssl/certs/ca-certificates.crt"]), capture_output=True, text=True,
                timeout=120, check=True).stdout}
    return found


def test_the_build_hosts_certificates_stay_out_of_the_image(rebuilt: dict) -> None:
    """They reached the installers (the builds passed through the proxy), not the image."""
    extra = sorted(Path("/usr/local/share/ca-certificates").rglob("*.crt"))
    bodies = ["".join(crt.read_text().split("-----")[2].split()) for crt in extra]
    for name in ("full", "rebuilt", "clean"):
        trusted = "".join(rebuilt[name]["trusts"].split())
        assert "BEGIN CERTIFICATE" in rebuilt[name]["trusts"]
        assert not [body for body in bodies if body in trusted], name


def test_a_full_build_keeps_its_root(rebuilt: dict) -> None:
    full = rebuilt["full"]
    assert "kept root: none for these inputs yet: full build" in full["log"], full["log"][-3000:]
    assert full["record"]["made_from"] == "full"
    [kept] = rebuilt["roots"].glob("*/root")
    assert (kept / "opt" / "venv" / "bin" / "python").exists()
    assert not list(rebuilt["roots"].glob("*/work-*"))  # nothing left of the builds' work


def test_a_rebuild_is_made_from_the_kept_root_and_equals_a_clean_build(rebuilt: dict) -> None:
    """The env spec gains a package: the image is rebuilt from the kept root (uv installs
    only ``six``), its record names the image it came from, and it holds exactly what a clean
    build of the same inputs holds: every entry of the root file system, ``pip freeze``,
    labels but dates, the definition but its work folder (benchmarks/build_cache.py's
    ``compared``: the run fails on any difference)."""
    again, clean = rebuilt["rebuilt"], rebuilt["clean"]
    assert again["record"]["made_from"] == rebuilt["full"]["record"]["sha256"], again["log"][-3000:]
    assert "installer: uv 0.13.9" in rebuilt["full"]["log"], rebuilt["full"]["log"][-3000:]
    assert "Installed 1 package" in again["log"] and " + six==" in again["log"], again["log"]
    assert clean["record"]["made_from"] == "full"
    assert any(line.startswith("six==") for line in rebuilt["run"]["pip_freeze"])
    assert rebuilt["run"]["files_compared"] > 1000
    assert f"identical ({rebuilt['run']['files_compared']} entries)" in rebuilt["stdout"]
    assert again["record"]["labels"]["containers.pip-freeze"].split() == \
        clean["record"]["pip_freeze"]
