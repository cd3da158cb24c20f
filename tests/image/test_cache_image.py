"""The package cache with the real Apptainer: on a site whose index has no uv, pip installs and a
cached download that went bad is refused by the index's hash and fetched again; uv installs
elsewhere, and a rebuild from a kept root file system holds exactly what a clean build holds.

The ``cpu`` recipe with a one-package env spec (no torch: seconds, not minutes) on the session's
debian-base, linked into a folder of the test's own, with a cache of the test's own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from containers.app.build import build
from containers.app.project import Project
from tests.fixtures import ROOT

pytestmark = pytest.mark.apptainer


def cpu_pip_list(root: Path, packages: list[str]) -> None:
    """The project copy's ``cpu`` env spec with only ``packages`` in its pip list."""
    spec = {"name": "cpu", "channels": ["conda-forge"],
            "dependencies": ["python=3.11", "pip", {"pip": packages}]}
    (root / "envs" / "cpu.yml").write_text(yaml.safe_dump(spec, sort_keys=False))


def tiny_cpu_project(root: Path, packages: list[str]) -> Path:
    """The project copy's ``cpu`` target with only ``packages`` in its pip list and no %test
    (cpu.def's imports torch)."""
    cpu_pip_list(root, packages)
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text() + "test: false\n")
    return root


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


def load_benchmark():
    """benchmarks/build_cache.py, whose reading of an image's content this test shares."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("build_cache")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory, debian_base_image: Path,
            real_runtime) -> dict:
    """One build pair for the module: ``idna`` built in full, then ``idna`` + ``six`` rebuilt
    from the root the first build kept, then the same inputs built clean (--no-cache)."""
    tmp = tmp_path_factory.mktemp("rebuilt")
    root = tmp / "project"
    for folder in ("recipes", "envs", "sites", "jobs"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    tiny_cpu_project(root, ["idna"])
    images = tmp / "images"
    images.mkdir()
    (images / "debian-base.sif").symlink_to(debian_base_image)
    shutil.copy(debian_base_image.with_name("debian-base.sif.json"), images)
    config = {"images_dir": str(images), "cache_dir": str(tmp / "cache"),
              "tmp_dir": str(tmp / "work")}
    bench = load_benchmark()
    found: dict = {"roots": tmp / "cache" / "packages" / "roots"}
    with pytest.MonkeyPatch.context() as patch:
        # no certificate in pip's config: the host's extra CA certificates (on this machine the
        # TLS-intercepting egress proxy's, without which uv cannot reach the index) are all
        # the installers get
        patch.setenv("PIP_CERT", "")
        for name, packages, options in (("full", ["idna"], {}),
                                        ("rebuilt", ["idna", "six"], {}),
                                        ("clean", ["idna", "six"], {"force": True,
                                                                    "no_cache": True})):
            found[name] = _built(root, config, packages, options, bench, real_runtime)
    found["compared"] = bench.compared
    return found


def _built(root: Path, config: dict, packages: list[str], options: dict, bench,
           runtime) -> dict:
    cpu_pip_list(root, packages)
    images = Path(config["images_dir"])
    log: list[str] = []
    build(Project.load(root, config), target="cpu", say=log.append, **options)
    return {"log": "\n".join(log), "record": json.loads((images / "cpu.sif.json").read_text()),
            "content": bench.content(images / "cpu.sif", runtime),
            "trusts": subprocess.run(runtime.exec_argv(image=images / "cpu.sif", command=[
                "cat", "/etc/ssl/certs/ca-certificates.crt"]), capture_output=True, text=True,
                timeout=120, check=True).stdout}


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
    labels but dates, the definition but its work folder."""
    again, clean = rebuilt["rebuilt"], rebuilt["clean"]
    assert again["record"]["made_from"] == rebuilt["full"]["record"]["sha256"], again["log"][-3000:]
    assert "installer: uv 0.13.9" in rebuilt["full"]["log"], rebuilt["full"]["log"][-3000:]
    assert "Installed 1 package" in again["log"] and " + six==" in again["log"], again["log"]
    assert clean["record"]["made_from"] == "full"
    assert any(line.startswith("six==") for line in again["content"]["pip_freeze"])
    assert len(clean["content"]["files"]) > 1000
    assert rebuilt["compared"](again["content"], clean["content"]) == []
    assert again["record"]["labels"]["containers.pip-freeze"].split() == \
        clean["record"]["pip_freeze"]
