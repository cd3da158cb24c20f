"""The release decision (:mod:`containers.publish.decision`): the gate's verdict on what it
found, refused unless accepted with a reason, and the acceptance recorded."""

from __future__ import annotations

import json
import getpass
from types import SimpleNamespace

import pytest

from containers.errors import VerdictFailed
from containers.image.sitefit import Finding
from containers.publish import decision


PLAN = SimpleNamespace(target=SimpleNamespace(name="cpu"), version="2.0")


def test_a_gate_with_no_problems_records_nothing() -> None:
    lines: list[str] = []
    assert decision.accepted(PLAN, [], None, lines.append) == {}
    assert decision.accepted(PLAN, [], "why not", lines.append) == {}
    assert lines == []


def test_problems_refuse_the_version_unless_accepted_and_the_acceptance_is_recorded() -> None:
    problems = ["site fit: glibc too old", "busbw fell from 100 to 90 GB/s"]
    with pytest.raises(VerdictFailed) as refused:
        decision.accepted(PLAN, problems, None, print)
    assert str(refused.value) == (
        "not publishing cpu 2.0: site fit: glibc too old; busbw fell from 100 to 90 GB/s; "
        "publish with --accept-regression \"WHY\" to release it anyway (recorded in the "
        "catalogue)")
    lines: list[str] = []
    record = decision.accepted(PLAN, problems, "known slow node", lines.append)["accepted"]
    assert (record["why"], record["problems"]) == ("known slow node", problems)
    assert record["by"].startswith(f"{getpass.getuser()}@") and record["date"]
    assert lines == [f"gate: ACCEPTED by {record['by']}: known slow node "
                     "(site fit: glibc too old; busbw fell from 100 to 90 GB/s)"]


def test_a_first_version_has_nothing_to_compare_with(tmp_path) -> None:
    plan = SimpleNamespace(target=PLAN.target, version="1.0", dest=tmp_path)
    lines: list[str] = []
    assert decision.against_latest(plan, None, {}, {}, lines.append) == (
        {"against": None}, None, [])
    assert lines == ["gate: no published latest of cpu to compare with"]


def _built(tmp_path, name: str, **record):
    """A project whose ``name`` image is the stand-in, with a build record of ``record`` over a
    fresh CUDA build's (the stand-in's bytes, so no Apptainer runs)."""
    from containers.app.project import Project
    from containers.image.identity import chain_hashes
    from tests.fixtures import ROOT
    from tests.publish.standin import IMAGE, SHA, STACK

    project = Project.load(ROOT, {"images_dir": str(tmp_path / "images"),
                                  "results_dir": str(tmp_path / "results")})
    images = project.settings.images_dir
    images.mkdir()
    project.settings.image_path(name).write_bytes(IMAGE)
    stack = dict(STACK, torch="2.14.1+cu130", build="cuda", cuda="13.0", nccl="2.30.7",
                 nccl_linkage="dynamic", gpu_arches="sm_75 sm_80 sm_90",
                 gpu_arches_source="fatbinary of libtorch_cuda.so")
    project.settings.provenance_path(name).write_text(json.dumps({
        "target": name, "sha256": SHA, "arch": "x86_64", "squashfs": "gzip",
        "inputs_hash": chain_hashes(project.targets, name)[name], "stack": stack, **record}))
    (images / f"{name}.sif.cdx.json").write_text('{"components": []}\n')
    return project


def test_skip_checks_still_judges_the_gpu_architecture(tmp_path) -> None:
    """--skip-checks skips the smoke (it needs the site's GPUs), never the site fit, which reads
    the image's record: a CUDA 13 build without sm_70 is not published for Puhti's V100s."""
    from containers.app.publishing import publish
    name = "puhti-cuda-pip"
    project = _built(tmp_path, name)
    lines: list[str] = []
    with pytest.raises(VerdictFailed, match=r"not publishing puhti-cuda-pip 1.0: site fit: .*"
                                            r"sm_75 sm_80 sm_90.*sm_70"):
        publish(project, target=name, dest=tmp_path / "pub", version="1.0",
                skip_checks=True, say=lines.append)
    assert not (tmp_path / "pub" / name).exists()
    assert any("the site fit is judged" in line for line in lines)


def test_a_cpu_only_torch_is_never_published_for_a_cuda_site(tmp_path) -> None:
    """Not a warning, not with --skip-checks, not with --accept-regression: what the image is."""
    from containers.app.publishing import publish
    from tests.publish.standin import STACK
    project = _built(tmp_path, "mahti-cuda-pip", stack=dict(STACK, build="cpu"))
    with pytest.raises(VerdictFailed) as refused:
        publish(project, target="mahti-cuda-pip", dest=tmp_path / "pub", version="1.0",
                skip_checks=True, accept_regression="it is fine", say=[].append)
    assert str(refused.value) == (
        "not publishing mahti-cuda-pip 1.0: torch in the image is a cpu build; mahti's GPUs need "
        "a cuda build (--skip-checks skips the smoke, not what the image is)")
    assert not (tmp_path / "pub" / "mahti-cuda-pip").exists()


def test_an_image_without_torch_is_published_for_a_gpu_site(tmp_path) -> None:
    """Not "torch in the image is a missing build": an R image for LUMI holds no torch at all,
    and is judged as its build judged it (site fit not judged)."""
    from containers.app.publishing import publish
    from containers.image.sitefit import NO_TORCH
    from tests.publish.standin import STACK
    name = "mahti-cuda-pip"
    project = _built(tmp_path, name, stack=dict(STACK, build=None, torch=None),
                     probe_errors={"torch": "ModuleNotFoundError: No module named 'torch'"})
    lines: list[str] = []
    entry = publish(project, target=name, dest=tmp_path / "pub", version="1.0",
                    skip_checks=True, say=lines.append)
    assert entry["fit"] == [{"level": "info", "rule": "torch", "message": NO_TORCH}]


def test_an_image_labelled_by_its_build_as_another_target_is_refused(tmp_path) -> None:
    """Its labels are its own build's (their inputs hash is the record's): the record was
    edited to another target's name."""
    from containers.app.publishing import publish
    from containers.errors import StateError
    name = "mahti-cuda-pip"
    project = _built(tmp_path, name)
    record = json.loads(project.settings.provenance_path(name).read_text())
    record["labels"] = {"containers.target": "cpu",
                        "containers.inputs-hash": record["inputs_hash"]}
    project.settings.provenance_path(name).write_text(json.dumps(record))
    with pytest.raises(StateError, match=r"its label containers.target says 'cpu', not "
                                         r"'mahti-cuda-pip', and its build record was edited"):
        publish(project, target=name, dest=tmp_path / "pub", version="1.0",
                skip_checks=True, say=[].append)
    assert not (tmp_path / "pub").exists()


def test_labels_a_base_passed_on_do_not_name_the_image(tmp_path) -> None:
    """An image built on another (its own definition on debian-base, a cotainr image) carries
    the base's labels: its record, the tool's own, says what it is, and it is published."""
    from containers.app.publishing import publish
    project = _built(tmp_path, "mahti-cuda-pip", labels={
        "containers.target": "debian-base", "containers.inputs-hash": "0" * 64})
    publish(project, target="mahti-cuda-pip", dest=tmp_path / "pub", version="1.0",
            skip_checks=True, say=[].append)
    assert (tmp_path / "pub" / "mahti-cuda-pip").is_dir()


def _review(monkeypatch, accept: str | None, lines: list[str]) -> dict:
    """The review of a skip-checks plan whose site fit finds one error (the image's facts are
    its record's: nothing probed)."""
    monkeypatch.setattr(decision.probing, "known_facts", lambda image, record: {"errors": None})
    monkeypatch.setattr(decision.probing, "summary", lambda facts: {"build": "cpu"})
    plan = SimpleNamespace(target=PLAN.target, version="2.0", provenance={}, image=None,
                           gpu="none", site=SimpleNamespace(name="local"), skip_checks=True)
    review = decision.release_review(None, accept, fit=lambda stack, site, errors: [
        Finding("error", "glibc", "glibc too old")])
    return review(plan, {}, lines.append)


def test_the_site_fit_decides_even_when_the_checks_are_skipped(monkeypatch) -> None:
    lines: list[str] = []
    with pytest.raises(VerdictFailed, match="^not publishing cpu 2.0: site fit: glibc too old; "):
        _review(monkeypatch, None, lines)
    assert lines[0] == "site fit (local): ERROR glibc: glibc too old"
    result = _review(monkeypatch, "known", [])
    assert result["gate"]["skipped"] and result["gate"]["accepted"]["why"] == "known"
    assert result["fit"] == [{"level": "error", "rule": "glibc", "message": "glibc too old"}]
