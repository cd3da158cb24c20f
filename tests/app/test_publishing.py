"""``invoke publish``'s project side: a blank reason to accept a regression is refused before
anything runs, the quick check publishing falls back on is a short 2-rank smoke of the image, and
the release gate's verdict on what it found (the whole publish, with a real image:
tests/publish/test_release_image.py)."""

from __future__ import annotations

import getpass
import importlib
from types import SimpleNamespace

import pytest

from containers.errors import UsageError, VerdictFailed

#: The module itself (``containers.app.publishing``; the package exports its commands).
publishing = importlib.import_module("containers.app.publishing")


@pytest.mark.parametrize("why", ["", "   "])
def test_accepting_a_regression_needs_a_reason(data_project, why) -> None:
    with pytest.raises(UsageError, match="say why the regression is accepted") as refused:
        publishing.publish(data_project, target="cpu", dest="/nonexistent", accept_regression=why)
    assert refused.value.flag == "--accept-regression"


def test_the_quick_check_is_a_short_two_rank_smoke_of_the_target(data_project,
                                                                 monkeypatch) -> None:
    calls: list = []
    monkeypatch.setattr(publishing, "prove", lambda project, **kw: calls.append((project, kw)))
    lines: list[str] = []
    publishing.quick_smoke(data_project, data_project.target("cpu"))(lines.append)
    assert lines == ["quick check: a 2-rank smoke test of cpu"]
    [(project, options)] = calls
    assert project is data_project and options["target"] == "cpu"
    assert options["options"] is publishing.QUICK_SMOKE
    assert (publishing.QUICK_SMOKE.gpus, publishing.QUICK_SMOKE.iters) == (2, 3)


PLAN = SimpleNamespace(target=SimpleNamespace(name="cpu"), version="2.0")


def test_a_gate_with_no_problems_records_nothing() -> None:
    lines: list[str] = []
    assert publishing.accepted(PLAN, [], None, lines.append) == {}
    assert publishing.accepted(PLAN, [], "why not", lines.append) == {}
    assert lines == []


def test_problems_refuse_the_version_unless_accepted_and_the_acceptance_is_recorded() -> None:
    problems = ["site fit: glibc too old", "busbw fell from 100 to 90 GB/s"]
    with pytest.raises(VerdictFailed) as refused:
        publishing.accepted(PLAN, problems, None, print)
    assert str(refused.value) == (
        "not publishing cpu 2.0: site fit: glibc too old; busbw fell from 100 to 90 GB/s; "
        "publish with --accept-regression \"WHY\" to release it anyway (recorded in the "
        "catalogue)")
    lines: list[str] = []
    record = publishing.accepted(PLAN, problems, "known slow node", lines.append)["accepted"]
    assert (record["why"], record["problems"]) == ("known slow node", problems)
    assert record["by"].startswith(f"{getpass.getuser()}@") and record["date"]
    assert lines == [f"gate: ACCEPTED by {record['by']}: known slow node "
                     "(site fit: glibc too old; busbw fell from 100 to 90 GB/s)"]


def test_a_first_version_has_nothing_to_compare_with(tmp_path) -> None:
    plan = SimpleNamespace(target=PLAN.target, version="1.0", dest=tmp_path)
    lines: list[str] = []
    assert publishing._against_latest(plan, None, {}, {}, lines.append) == (
        {"against": None}, None, [])
    assert lines == ["gate: no published latest of cpu to compare with"]


def _built(tmp_path, name: str, **record):
    """A project whose ``name`` image is the stand-in, with a build record of ``record`` over a
    fresh CUDA build's (the stand-in's bytes, so no Apptainer runs)."""
    import json
    from containers import app
    from containers.image.plan import chain_hashes
    from tests.fixtures import ROOT
    from tests.publish.standin import IMAGE, SHA, STACK

    project = app.Project.load(ROOT, {"images_dir": str(tmp_path / "images"),
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
    from containers import app
    name = "puhti-cuda-pip"
    project = _built(tmp_path, name)
    lines: list[str] = []
    with pytest.raises(VerdictFailed, match=r"not publishing puhti-cuda-pip 1.0: site fit: .*"
                                            r"sm_75 sm_80 sm_90.*sm_70"):
        app.publish(project, target=name, dest=tmp_path / "pub", version="1.0",
                    skip_checks=True, say=lines.append)
    assert not (tmp_path / "pub" / name).exists()
    assert any("the site fit is judged" in line for line in lines)


def test_a_cpu_only_torch_is_never_published_for_a_cuda_site(tmp_path) -> None:
    """Not a warning, not with --skip-checks, not with --accept-regression: what the image is."""
    from containers import app
    from tests.publish.standin import STACK
    project = _built(tmp_path, "mahti-cuda-pip", stack=dict(STACK, build="cpu"))
    with pytest.raises(VerdictFailed) as refused:
        app.publish(project, target="mahti-cuda-pip", dest=tmp_path / "pub", version="1.0",
                    skip_checks=True, accept_regression="it is fine", say=[].append)
    assert str(refused.value) == (
        "not publishing mahti-cuda-pip 1.0: torch in the image is a cpu build; mahti's GPUs need "
        "a cuda build (--skip-checks skips the smoke, not what the image is)")
    assert not (tmp_path / "pub" / "mahti-cuda-pip").exists()


def test_an_image_labelled_as_another_target_is_refused(tmp_path) -> None:
    from containers import app
    from containers.errors import StateError
    project = _built(tmp_path, "mahti-cuda-pip", labels={"containers.target": "cpu"})
    with pytest.raises(StateError, match=r"its label containers.target says 'cpu', not "
                                         r"'mahti-cuda-pip': not this target's image"):
        app.publish(project, target="mahti-cuda-pip", dest=tmp_path / "pub", version="1.0",
                    skip_checks=True, say=[].append)
    assert not (tmp_path / "pub").exists()
