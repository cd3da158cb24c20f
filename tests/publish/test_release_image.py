"""Integration: ``invoke inspect`` and ``invoke diff`` on real images, the build's SBOM and site
fit, the release gate of ``invoke publish`` and the catalogue page in a real headless browser.

Images: the session's CPU image and, for the diff, a small ``Bootstrap: localimage`` layer on it
that pip-installs one wheel made here (built with apptainer directly, uncompressed squashfs so it
takes ~20 s instead of ~60). Smoke verdicts are written as the smoke run writes them (the keys
publish reads), with busbw figures chosen so the second is a regression.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from containers.app.inspecting import diff, inspect
from containers.app.project import Project
from containers.app.publishing import publish
from containers.app.workloads import prove
from containers.app.inspecting import examine_built
from containers.errors import CommandFailed, VerdictFailed
from containers.image import inspect as probing, provenance, sbom
from containers.prove.smoke import SmokeOptions
from containers.publish import catalogue as cat
from tests.publish import htmlcheck
from tests.publish.standin import smoke_run
from tests.fixtures import ROOT
from tests.publish.test_publish_image import _make_project

pytestmark = [pytest.mark.apptainer]
WHEEL = ("tiny_marker", "1.0")
LAYER_SHA = "layer-image-of-this-session"
REFERENCE = {"op": "all_reduce", "bytes": 134217728, "value": 1.2, "lower": -0.3, "upper": None,
             "unit": "GB/s", "source": "test"}


def _wheel(folder: Path) -> Path:
    """A real (pure-Python) wheel of one tiny package, made without any index."""
    name, version = WHEEL
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"MARK = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 .encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(data)},{len(data)}\n"
                     for path, data in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, data in files.items():
            archive.writestr(name_in, data)
        archive.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def layer_image(tmp_path_factory, cpu_image, real_runtime) -> Path:
    """The CPU image plus one pip package, as a localimage layer."""
    folder = tmp_path_factory.mktemp("layer")
    wheel = _wheel(folder)
    definition = folder / "layer.def"
    definition.write_text(
        f"Bootstrap: localimage\nFrom: {cpu_image}\n\n%files\n    {wheel} /opt/{wheel.name}\n\n"
        f"%post\n    /opt/venv/bin/pip install --no-index --no-deps /opt/{wheel.name}\n"
        f"    rm /opt/{wheel.name}\n")
    image = folder / "cpu-plus.sif"
    # its record names its target, and a stand-in sha256 under which the one probe of it
    # (in the diff) is reused by the examine test
    (folder / "cpu-plus.sif.json").write_text(json.dumps({"target": "cpu",
                                                          "sha256": LAYER_SHA}))
    result = subprocess.run([real_runtime.binary, "build", "--fakeroot", "--mksquashfs-args",
                             "-noI -noD -noF -noX", str(image), str(definition)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return image


def _torch_pin() -> str:
    spec = yaml.safe_load((ROOT / "envs" / "cpu.yml").read_text())
    pips = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
    return next(p.split("==")[1] for p in pips if p.startswith("torch=="))


def test_inspect_reads_the_cpu_image_itself(real_project, cpu_image, capsys) -> None:
    """``invoke inspect --target cpu --json`` (in-process: its probe is then reused by the
    tests below): one probe of the image; it fits its (local) site."""
    inspect(real_project, target="cpu", as_json=True)
    report = json.loads(capsys.readouterr().out)
    stack = report["stack"]
    assert stack["arch"] == "x86_64" and stack["build"] == "cpu"
    assert re.fullmatch(r"2\.\d+", stack["glibc"]) and stack["os"].startswith("Debian")
    assert stack["python"].startswith("3.11.")
    assert stack["torch"] == f"{_torch_pin()}+cpu"
    assert stack["nccl"] is None and stack["nccl_linkage"] is None and stack["cuda"] is None
    assert report["size_bytes"] == cpu_image.stat().st_size
    assert report["labels"]["containers.target"] == "cpu"
    assert report["packages"]["debian"] > 50 and report["packages"]["pip"] > 5
    assert report["site"] == "local" and not [f for f in report["fit"] if f["level"] == "error"]
    if "stack" in provenance.read(cpu_image.with_name("cpu.sif.json")):
        # built by this tool (CI builds it fresh): the build wrote its SBOM beside the record
        sbom_file = probing.sbom_path(cpu_image)
        assert sbom.validate(sbom_file.read_text()) is None
        assert report["sbom"]["counts"]["pypi"] == report["packages"]["pip"]
        assert report["sbom"]["counts"]["deb"] == report["packages"]["debian"]


def test_diff_lists_exactly_the_added_package(real_project, cpu_image, layer_image) -> None:
    lines: list[str] = []
    result = diff(real_project, old="cpu", new=str(layer_image), say=lines.append)
    assert result["packages"] == {"added": {"pip:tiny_marker": "1.0"}, "removed": {},
                                  "changed": {}}
    assert result["stack"] == {}
    assert "  + pip:tiny_marker 1.0" in lines


def test_build_examine_writes_a_valid_sbom_with_torch(real_project, real_runtime,
                                                      layer_image) -> None:
    """The builder's last step on a real image: SBOM (schema-valid, torch with its purl, the
    added package, the inputs hash) and the stack it records for publish."""
    record = {"target": "cpu", "inputs_hash": "f" * 64, "sha256": LAYER_SHA}
    lines: list[str] = []
    files = examine_built(real_project)(SimpleNamespace(partial=layer_image, image=layer_image,
                                                        target=real_project.target("cpu")),
                                        real_runtime, record, lines.append)
    text = files[probing.SBOM_SUFFIX]
    assert sbom.validate(text) is None
    data = json.loads(text)
    purls = {c["name"]: c.get("purl") for c in data["components"]}
    assert purls["torch"] == f"pkg:pypi/torch@{_torch_pin()}%2Bcpu"
    assert purls["tiny_marker"] == "pkg:pypi/tiny-marker@1.0"
    assert purls["libc6"].startswith("pkg:deb/debian/libc6@")
    assert record["stack"]["torch"] == f"{_torch_pin()}+cpu"
    assert record["fit"]["site"] == "local" and not [
        f for f in record["fit"]["findings"] if f["level"] == "error"]
    assert not any("ERROR" in line for line in lines), lines
    # the same image for Olivia's aarch64 GPU nodes: the build fails, naming why
    with pytest.raises(CommandFailed) as refused:
        examine_built(real_project)(SimpleNamespace(partial=layer_image, image=layer_image,
                                                    target=real_project.target("olivia-cuda")),
                                    real_runtime, dict(record), lines.append)
    assert "does not fit site olivia: the image is x86_64; olivia's nodes run aarch64" in \
        str(refused.value) and "the image is not kept" in str(refused.value)


def _verdict(project: Project, name: str, sha: str, busbw: float, date: str) -> None:
    """A passing 2-rank smoke verdict of the image, as `invoke smoke` writes it (its ranks'
    device reports carry the labels they read inside the image, its build record's)."""
    labels = provenance.read(project.settings.provenance_path("cpu")).labels
    smoke_run(project.settings.results_dir / "smoke" / name, sha256=sha, labels=labels,
              kind="smoke", site="local", partition=None, nodes=1, backend="gloo",
              device_kind="cpu", wrong_total=0, cycles=1, date=date,
              performance={"state": "pass", "failed": False, "measured": busbw,
                           "message": f"busbw {busbw} GB/s", "reference": REFERENCE})


def test_publish_gate_refuses_a_slower_version_and_records_acceptance(
        tmp_path, real_project, real_runtime, cpu_image) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for suffix in ("", ".json"):  # the built image and record, linked (no copy)
        os.link(cpu_image.with_name(cpu_image.name + suffix), images / f"cpu.sif{suffix}")
    project = _make_project(tmp_path / "project", images)
    record = dict(provenance.read(images / "cpu.sif.json"))  # as the builder holds it
    record.pop("stack", None)
    files = examine_built(project)(SimpleNamespace(partial=images / "cpu.sif",
                                                   image=images / "cpu.sif",
                                                   target=project.target("cpu")),
                                   real_runtime, record, lambda line: None)
    (images / "cpu.sif.cdx.json").write_text(files[probing.SBOM_SUFFIX])  # as a build does
    os.unlink(images / "cpu.sif.json")
    (images / "cpu.sif.json").write_text(json.dumps(record))
    sha = record["sha256"]
    dest = tmp_path / "pub"
    _verdict(project, "first", sha, 1.2, "2026-11-25T01:00:00Z")
    first = publish(project, target="cpu", dest=dest, version="1.0", say=lambda l: None)
    assert first["gate"] == {"against": None} and first["sbom_file"] == "cpu/1.0.sif.cdx.json"
    assert sbom.validate((dest / first["sbom_file"]).read_text()) is None

    _verdict(project, "second", sha, 0.5, "2026-11-25T02:00:00Z")  # slower
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as refused:
        publish(project, target="cpu", dest=dest, version="2.0", say=lines.append)
    assert "busbw fell from 1.2 to 0.5 GB/s at 134217728 B (58% lower; the reference " \
           "allows 30%)" in str(refused.value)
    assert "--accept-regression" in str(refused.value)
    assert any(line.startswith("gate: diff cpu@1.0 -> cpu@2.0") for line in lines), lines
    assert [e.version for e in cat.entries(cat.load(dest / "catalogue.json"), "cpu")] == \
        ["1.0"] and not (dest / "cpu" / "2.0.sif").exists()

    second = publish(project, target="cpu", dest=dest, version="2.0",
                     accept_regression="CI runner is slower; checked by hand",
                     say=lambda l: None)
    accepted = second["gate"]["accepted"]
    assert accepted["why"] == "CI runner is slower; checked by hand" and "@" in accepted["by"]
    kept = cat.find(cat.load(dest / "catalogue.json"), "cpu", "2.0").gate
    assert kept.model_dump(exclude_unset=True) == second["gate"]
    assert json.loads((dest / second["diff_file"]).read_text())["packages"] == \
        {"added": {}, "removed": {}, "changed": {}}
    # published versions by name: the same build, so no package changes; busbw side by side
    compared = diff(project, old=f"{dest}:cpu@1.0", new=f"{dest}:cpu@latest",
                    say=lambda l: None)
    assert compared["old"] == "cpu@1.0" and compared["new"] == "cpu@2.0"
    assert not any(compared["packages"].values())
    assert [side["busbw"] for side in compared["smoke"]] == [1.2, 0.5]
    _page_in_a_real_browser(dest, tmp_path)


def _page_in_a_real_browser(dest: Path, tmp_path: Path) -> None:
    """The page as publish wrote it: well formed (every link resolving to a file publish
    wrote: the checksums, the diff page), saying what the image is and how to load each
    version, naming no publisher user or host; then in Debian's chromium (./setup.sh test
    installs it), headless, in a network namespace of its own with only loopback: it must
    render from the file alone. Its screenshot stays in the test's tmp folder when it fails."""
    page = (dest / "index.html").read_text()
    for written in (dest / "index.html", dest / "cpu" / "2.0.diff.html"):
        assert htmlcheck.problems(written, dest) == []
    seen = htmlcheck.text_of(page)
    assert cat.find(cat.load(dest / "catalogue.json"), "cpu", "2.0").description in seen
    assert "module load cpu/2.0" in seen and "module load cpu/1.0" in seen
    assert 'href="cpu/2.0.sif.sha256"' in page and 'href="cpu/2.0.diff.html"' in page
    assert f"{getpass.getuser()}@" not in page and socket.gethostname() not in seen.split()
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: ./setup.sh test installs it"
    shot = tmp_path / "catalogue-page.png"
    browse = ["unshare", "--net", chromium, "--headless", "--no-sandbox", "--disable-gpu",
              "--window-size=1200,1600", f"file://{dest / 'index.html'}"]
    result = subprocess.run(browse[:-1] + [f"--screenshot={shot}", browse[-1]],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and shot.stat().st_size > 10_000, result.stderr[-2000:]
    dom = subprocess.run(browse[:-1] + ["--dump-dom", browse[-1]], capture_output=True,
                         text=True, timeout=120)
    assert 'id="cpu@2.0"' in dom.stdout and 'id="cpu@1.0"' in dom.stdout
    assert dom.stdout.index('id="cpu@2.0"') < dom.stdout.index('id="cpu@1.0"')
    assert "regression accepted: CI runner is slower" in dom.stdout
    print(f"catalogue page screenshot: {shot}")


def test_a_hand_edited_verdict_of_a_timed_out_smoke_is_refused(tmp_path, cpu_image) -> None:
    """The real thing: a smoke that times out (no rank files, no results JSON), its verdict
    edited to pass; publish re-derives it from the run's files and refuses, publishing nothing;
    then a real passing smoke, and a newer failure of the same image outvotes it."""
    images = tmp_path / "images"
    images.mkdir()
    for suffix in ("", ".json"):
        os.link(cpu_image.with_name(cpu_image.name + suffix), images / f"cpu.sif{suffix}")
    project = _make_project(tmp_path / "project", images)
    with pytest.raises(VerdictFailed):
        prove(project, target="cpu", options=SmokeOptions(
            gpus=2, sizes="1M:4M", iters=3, timeout=2), say=lambda line: None)
    (verdict,) = (project.settings.results_dir / "smoke").glob("*/verdict.json")
    record = json.loads(verdict.read_text())
    verdict.write_text(json.dumps({**record, "passed": True, "reasons": []}))
    dest = tmp_path / "pub"
    with pytest.raises(VerdictFailed) as refused:
        publish(project, target="cpu", dest=dest, version="1.0", say=lambda line: None)
    assert str(refused.value).startswith(f"not publishing cpu: {verdict} says passed but its "
                                         "run's own files do not: ranks that did not finish: ")
    assert not (dest / "cpu" / "1.0.sif").exists()

    prove(project, target="cpu", options=SmokeOptions(gpus=2, sizes="4K:64K", iters=3,
                                                      warmup=1, timeout=300),
          say=lambda line: None)
    passed = max((project.settings.results_dir / "smoke").glob("*/verdict.json"),
                 key=lambda p: json.loads(p.read_text())["date"])
    assert json.loads(passed.read_text())["passed"] is True
    failed = passed.parent.with_name(passed.parent.name + "-later")
    shutil.copytree(passed.parent, failed)
    later = {**json.loads(passed.read_text()), "passed": False, "reasons": ["3 wrong values"],
             "date": "2999-01-01T00:00:00Z"}
    (failed / "verdict.json").write_text(json.dumps(later))
    with pytest.raises(VerdictFailed, match="the newest smoke of this image .* FAILED"):
        publish(project, target="cpu", dest=dest, version="1.0", say=lambda line: None)
    shutil.rmtree(failed)
    entry = publish(project, target="cpu", dest=dest, version="1.0", say=lambda line: None)
    assert entry["checks"]["smoke"]["verdict"] == str(passed)
