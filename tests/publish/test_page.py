"""The catalogue page and the diff page, rendered from records this test writes: what a user
reads (description, module and exec lines, stack, dated verdicts, checksum and key links), that
every value is escaped by the templates, that nothing names the publisher's user or host, and
that both pages pass the well-formedness check (tests/publish/htmlcheck.py). The real publish
opens the page in Chromium: test_release_image.py."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from containers.publish import diff as diffing
from containers.publish.page import render_diff_page, render_page
from tests.fixtures import ROOT
from tests.publish import htmlcheck
from tests.publish.test_gate import smoke, summary

FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'
#: A CUDA image's stack, as a build records it (containers.image.inspect.summary's keys).
CUDA_STACK = {"arch": "x86_64", "os": "Debian GNU/Linux 12 (bookworm)", "glibc": "2.36",
              "python": "3.11.2", "torch": "2.9.0+cu128", "build": "cuda", "cuda": "12.8",
              "cudnn": "9.10.2", "hip": None, "rocm": None, "nccl": "2.27.3",
              "nccl_linkage": "shared", "gpu_arches": "sm_70 sm_80 sm_90",
              "gpu_arches_source": "torch", "deepspeed": "0.17.1"}


def _entry(version: str, **changes) -> dict:
    """A catalogue entry as publish writes one (signed, for site puhti), with the publisher's
    user and host where publish records them."""
    base = {"target": "puhti-cuda", "version": version, "description": "Puhti V100: NGC torch",
            "file": f"puhti-cuda/{version}.sif",
            "checksum_file": f"puhti-cuda/{version}.sif.sha256",
            "module": f"modules/puhti-cuda/{version}.lua", "sha256": "ab" * 32,
            "size_bytes": 9 << 30, "signed": True, "key_fingerprint": FINGERPRINT,
            "public_key": f"keys/{FINGERPRINT}.pgp", "site": "puhti",
            "site_runtime": {"runtime": "apptainer", "gpu_flag": "--nv"},
            "published": "2026-11-25T02:00:00Z", "published_by": "publisher@buildhost",
            "stack": CUDA_STACK, "driver_needed": "NVIDIA driver R525 or newer (CUDA 12.x)",
            "checks": {"skipped": False,
                       "apptainer_test": {"passed": True, "how": "run now",
                                          "date": "2026-11-24T23:10:00Z"},
                       "smoke": smoke(100.0, site="puhti", partition=None, nodes=1, ranks=4,
                                      date="2026-11-24T23:00:00Z", backend="nccl",
                                      device_kind="cuda")},
            "gate": {"against": None}}
    return {**base, **changes}


def _published(dest: Path, *entries: dict, diff: dict | None = None) -> Path:
    """``dest`` as publish leaves it for ``entries`` (the files their links name, the diff
    page of the last), with ``index.html``; the page's path."""
    target = entries[0]["target"]
    for entry in entries:
        for key in ("checksum_file", "public_key", "sbom_file", "diff_file"):
            if isinstance(entry.get(key), str):
                (dest / entry[key]).parent.mkdir(parents=True, exist_ok=True)
                (dest / entry[key]).write_text("x\n")
    if diff is not None:
        (dest / entries[-1]["diff_page"]).write_text(
            render_diff_page(diff, target=target, version=entries[-1]["version"]))
    catalogue = {"updated": "2026-11-25T02:00:00Z", "targets": {target: {
        "latest": entries[-1]["version"], "versions": list(entries)}}}
    page = dest / "index.html"
    page.write_text(render_page(catalogue, dest))
    return page


def _two_versions(dest: Path, **second) -> tuple[Path, str]:
    """Two versions of puhti-cuda, the second with a diff page against the first."""
    old = diffing.side("puhti-cuda@1.0", {"stack": CUDA_STACK, "pip_packages": [
        {"name": "numpy", "version": "2.0.0"}, {"name": "mpi4py", "version": "4.0"}]},
        size=9 << 30, smoke=summary(100.0))
    new = diffing.side("puhti-cuda@2.0", {"stack": {**CUDA_STACK, "torch": "2.9.1+cu128"},
                                          "pip_packages": [{"name": "numpy", "version": "2.1.0"},
                                                           {"name": "<evil>", "version": "1"}]},
                       size=(9 << 30) + 4096, smoke=summary(90.0))
    result = diffing.diff(old, new)
    page = _published(dest, _entry("1.0"), _entry(
        "2.0", diff_file="puhti-cuda/2.0.diff.json", diff_page="puhti-cuda/2.0.diff.html",
        sbom_file="puhti-cuda/2.0.sif.cdx.json", gate={
            "against": "1.0", "accepted": {"why": "slower <node>", "by": "publisher@buildhost",
                                           "date": "2026-11-25T01:59:00Z",
                                           "problems": ["busbw fell"]}}, **second),
        diff=result)
    return page, page.read_text()


def test_the_page_says_what_each_image_is_and_how_to_load_and_run_each_version(
        tmp_path: Path) -> None:
    page, text = _two_versions(tmp_path)
    seen = htmlcheck.text_of(text)
    assert "Puhti V100: NGC torch" in seen
    assert f"module use {tmp_path / 'modules'}" in seen
    for version in ("1.0", "2.0"):
        assert seen.count(f"module load puhti-cuda/{version}") == 1
    assert seen.count("puhti-cuda-exec python -c 'import torch; print(torch.__version__)'") == 2
    # the site's runtime and GPU flag, in the loaded module's image (its binds applied)
    assert seen.count('apptainer exec --nv "$SIF" python -c') == 2
    assert text.index('id="puhti-cuda@2.0"') < text.index('id="puhti-cuda@1.0"')  # newest first
    assert htmlcheck.problems(page, tmp_path) == []


def test_the_page_shows_the_stack_dated_verdicts_and_links_checksum_key_and_diff(
        tmp_path: Path) -> None:
    page, text = _two_versions(tmp_path)
    seen = htmlcheck.text_of(text)
    for fact in ("2.9.0+cu128 (cuda build)", "12.8", "2.27.3 (shared library)",
                 "sm_70 sm_80 sm_90", "NVIDIA driver R525 or newer (CUDA 12.x)", "9 GiB"):
        assert fact in seen, fact
    assert "apptainer test PASS, run now (2026-11-24 23:10 UTC)" in seen
    assert "smoke PASS: 4 ranks on 1 node(s), site puhti, nccl on cuda (2026-11-24 " \
           "23:00 UTC)" in seen
    assert "regression accepted: slower <node> (2026-11-25 01:59 UTC)" in seen
    links = re.findall(r'href="([^"#][^"]*)"', text)
    assert links == ["puhti-cuda/2.0.sif.sha256", f"keys/{FINGERPRINT}.pgp",
                     "puhti-cuda/2.0.sif.cdx.json", "puhti-cuda/2.0.diff.html",
                     "puhti-cuda/2.0.diff.json",
                     "puhti-cuda/1.0.sif.sha256", f"keys/{FINGERPRINT}.pgp"]
    assert f"signed by key {FINGERPRINT}" in seen and "what changed since 1.0" in seen
    assert htmlcheck.problems(page, tmp_path) == []  # every link resolves to a file


def test_the_diff_is_a_readable_page_that_links_back(tmp_path: Path) -> None:
    _two_versions(tmp_path)
    page = tmp_path / "puhti-cuda" / "2.0.diff.html"
    seen = htmlcheck.text_of(page.read_text())
    assert "puhti-cuda@2.0: changes since puhti-cuda@1.0" in seen
    assert "pip:numpy2.0.02.1.0" in seen.replace("\n", "")  # one row: name, old, new
    assert "pip:<evil>" in seen and "<evil>" not in page.read_text()
    assert "1 added, 1 removed, 1 changed" in seen
    assert "torch2.9.0+cu1282.9.1+cu128" in seen.replace("\n", "")
    assert "9 GiB → 9 GiB (+4096 B)" in seen
    assert "../index.html#puhti-cuda@2.0" in page.read_text()
    assert htmlcheck.problems(page, tmp_path) == []  # its back link's id exists
    side = diffing.side("puhti-cuda@1.0", {"stack": CUDA_STACK}, size=1, smoke=None)
    same = htmlcheck.text_of(render_diff_page(diffing.diff(side, {**side, "name": "puhti-cuda@3"}),
                                              target="puhti-cuda", version="3"))
    assert "No package was added, removed or changed." in same and "Added" not in same
    assert "No change to torch" in same and "no verdict" in same


def test_every_value_is_escaped_and_no_publisher_user_or_host_is_shown(tmp_path: Path) -> None:
    page, text = _two_versions(tmp_path, description=HOSTILE)
    assert "<script" not in text.lower() and "<b>" not in text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in text
    assert HOSTILE in htmlcheck.text_of(text)  # shown as the text it is
    assert "publisher" not in text and "buildhost" not in text
    assert "/-" not in htmlcheck.text_of(text)  # no partition: none shown, not "puhti/-"
    assert htmlcheck.problems(page, tmp_path) == []


def test_an_entry_from_before_descriptions_and_runtimes_says_so(tmp_path: Path) -> None:
    old = _entry("1.0")
    for key in ("description", "site_runtime", "driver_needed", "signed", "key_fingerprint",
                "public_key"):
        old.pop(key)
    page = _published(tmp_path, old)
    seen = htmlcheck.text_of(page.read_text())
    assert "no description recorded" in seen and "unsigned" in seen
    assert "module load puhti-cuda/1.0" in seen and "apptainer exec" not in seen
    # the driver series is derived from the recorded CUDA runtime
    assert "NVIDIA driver R525 or newer (CUDA 12.x" in seen
    assert htmlcheck.problems(page, tmp_path) == []


@pytest.mark.parametrize("bad", ["javascript:alert(7)", "JavaScript:alert(7)", " javascript:x",
                                 "data:text/html,<b>x</b>", "https://evil.example/x",
                                 "//evil.example/x", "/etc/passwd", "../../etc/passwd",
                                 "cpu/../../x", "vbscript:x"])
def test_a_link_outside_the_folder_is_shown_as_text_never_linked(tmp_path: Path, bad) -> None:
    catalogue = {"updated": "now", "targets": {"cpu": {"latest": "1", "versions": [
        {"version": "1", "sbom_file": bad, "diff_file": bad, "checksum_file": bad,
         "public_key": bad, "signed": True}]}}}
    page = render_page(catalogue, tmp_path)
    assert re.findall(r'href="([^"#][^"]*)"', page) == []
    assert page.count("not a file of this folder") == 4


def test_each_version_names_the_nvidia_driver_it_needs(tmp_path: Path) -> None:
    """Derived from the CUDA runtime the entry's stack records (jobs/cudadriver.py's table)
    when the entry records none (published before it did)."""
    def page(**stack: str) -> str:
        entry = {"version": "1", "stack": {"torch": "2.9.0", **stack}}
        return render_page({"targets": {"cpu": {"latest": "1", "versions": [entry]}}}, tmp_path)

    assert "NVIDIA driver R580 or newer (CUDA 13.x" in page(build="cuda", cuda="13.0")
    assert "NVIDIA driver R525 or newer (CUDA 12.x" in page(build="cuda", cuda="12.8")
    assert "NVIDIA driver" not in page(build="rocm", hip="6.2")


@pytest.mark.parametrize("broken, why", [
    ("<div><p>x</div>", "</div> closes <p>"), ("<ul><li>x</ul>", "</ul> closes <li>"),
    ("<p><div>x</div></p>", "<div> inside a <p>"), ("<a id=x></a><b id=x></b>", "used twice"),
    ('<a href="#nowhere">x</a>', "no element has that id"),
    ('<a href="cpu/1.sif.sha256">x</a>', "no such file"),
    ('<a href="../x">x</a>', "leaves the publish folder"),
    ('<img src="https://x/y.png" alt="">', "leaves the publish folder"),
    ("<section>", "never closed")])
def test_the_html_check_finds_what_a_browser_would_forgive(tmp_path: Path, broken: str,
                                                          why: str) -> None:
    page = tmp_path / "index.html"
    page.write_text(f"<!DOCTYPE html><html><body>{broken}</body></html>")
    found = htmlcheck.problems(page, tmp_path)
    assert any(why in problem for problem in found), found


def test_the_templates_ship_with_the_package() -> None:
    """pyproject's package data names every template, so an installed tool renders pages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["containers.publish"]
    folder = ROOT / "containers" / "publish"
    templates = sorted(p.relative_to(folder).as_posix() for p in
                       (folder / "templates").iterdir())
    assert {"catalogue.html", "diff.html"} <= {Path(t).name for t in templates}
    assert [t for t in templates if not any(fnmatch(t, p) for p in patterns)] == []


def test_each_version_says_how_to_use_it_as_a_batch_job_and_how_to_build_on_it(
        tmp_path: Path) -> None:
    """What a user pastes: the site's batch job for the version, its license, and a
    definition with the image as its base; an image without torch runs a command that needs
    none, and says it was published with no collective proof."""
    from containers.batch.frame import example_preamble
    from containers.inputs.sites import load_sites
    from containers.publish.page import batch_job

    def batch_example(site, *, target: str, **given) -> list[str] | None:
        return batch_job(example_preamble(site, target), target=target, **given)
    sites = load_sites(ROOT)
    job = batch_example(sites["puhti"], target="puhti-cuda", version="2.0", dest=tmp_path,
                        stack=CUDA_STACK)
    assert job[:2] == ["#!/bin/bash", "#SBATCH --job-name=puhti-cuda"]
    assert job[-3:] == [f"module use {tmp_path / 'modules'}", "module load puhti-cuda/2.0",
                        "puhti-cuda-exec python -c 'import torch; print(torch.__version__)'"]
    assert batch_example(sites["local"], target="x", version="1", dest=tmp_path,
                         stack={}) is None  # no scheduler: the module lines say it all
    page = _published(tmp_path, _entry("1.0", license="BSD-3-Clause AND GPL-2.0-or-later",
                                       batch_example=job))
    seen = htmlcheck.text_of(page.read_text())
    assert "License: BSD-3-Clause AND GPL-2.0-or-later" in seen
    assert "As a batch job at puhti" in seen and "\n".join(job) in seen
    assert f"Bootstrap: localimage\nFrom: {tmp_path / 'puhti-cuda/1.0.sif'}\n" in seen
    bare = dict(CUDA_STACK, torch=None, build=None)
    page = _published(tmp_path, _entry("1.0", stack=bare, checks={
        "skipped": False, "smoke": None, "proof": "no collective proof: no torch",
        "apptainer_test": {"passed": True, "how": "at build (provenance)", "date": None}}))
    seen = htmlcheck.text_of(page.read_text())
    assert "no collective proof: no torch" in seen and "License: not stated" in seen
    assert "puhti-cuda-exec cat /etc/os-release" in seen and "import torch" not in seen
    assert "none: the image holds no torch" in seen


def test_an_image_proven_by_a_run_names_its_command_and_date(tmp_path: Path) -> None:
    """Without a %test at build, the passing ``invoke run`` that proved it is on the page."""
    run = {"schema": 2, "target": "puhti-cuda", "sha256": "ab" * 32, "exit_status": 0,
           "command": ["sh", "-c", "Rscript --version"], "date": "2026-12-06T07:00:00Z",
           "file": "/x/results/run/puhti-cuda-1/status.json"}
    page = _published(tmp_path, _entry("1.0", stack=dict(CUDA_STACK, torch=None, build=None),
                                       checks={"skipped": False, "smoke": None, "run": run,
                                               "proof": "no collective proof: no torch",
                                               "apptainer_test": {
                                                   "passed": None,
                                                   "how": "its build ran no %test"}}))
    seen = htmlcheck.text_of(page.read_text())
    assert "no collective proof: no torch" in seen
    assert "apptainer test: its build ran no %test" in seen
    assert "proof: the run of `sh -c 'Rscript --version'` (exit 0)" in seen
    assert "2026-12-06 07:00 UTC" in seen


def test_a_page_without_busbw_history_has_no_such_section(tmp_path: Path) -> None:
    """A reference section with nothing in it is left out, not said to be empty."""
    cpu = _entry("1.0", checks={"skipped": True})
    text = _published(tmp_path, cpu).read_text()
    assert "busbw history" not in text and "busbw-history" not in text
    assert "busbw history" in _two_versions(tmp_path / "two")[1]
