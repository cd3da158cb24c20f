"""Unit tests of the pre-publish checks: finding this image's passing verdict, and the quick check
run (through the caller's function) when there is none."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from containers.errors import PerformanceFailed, VerdictFailed
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target, load_targets
from containers.publish.checks import ensure_checks, find_verdict, skipped
from tests.fixtures import ROOT

SHA = "ab" * 32
RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


def _write_verdict(results: Path, name: str, **record) -> Path:
    path = results / "smoke" / name / "verdict.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"target": "cpu", "sha256": SHA, "passed": True, "ranks": 2,
                                "date": "2026-11-21T05:00:00Z", **record}))
    return path


@pytest.fixture
def data_target() -> Target:
    """The CPU target without a %test, so no ``apptainer test`` is started."""
    return dataclasses.replace(load_targets(ROOT)["cpu"], test=False)


def test_find_verdict_wants_this_image_passing_with_two_ranks(tmp_path: Path) -> None:
    assert find_verdict(tmp_path, "cpu", SHA) is None
    _write_verdict(tmp_path, "failed", passed=False, date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "one-rank", ranks=1, date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "other-image", sha256="cd" * 32, date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "other-target", target="gpu", date="2026-11-21T09:00:00Z")
    old = _write_verdict(tmp_path, "old", backend="gloo")
    assert find_verdict(tmp_path, "cpu", SHA)[0] == old
    new = _write_verdict(tmp_path, "new", backend="gloo", date="2026-11-21T06:00:00Z")
    (tmp_path / "smoke" / "broken").mkdir()
    (tmp_path / "smoke" / "broken" / "verdict.json").write_text("{")
    assert find_verdict(tmp_path, "cpu", SHA)[0] == new


def test_a_gpu_image_is_proven_only_by_a_run_on_gpus(tmp_path: Path) -> None:
    _write_verdict(tmp_path, "on-cpu", backend="gloo", date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "unsaid")
    assert find_verdict(tmp_path, "cpu", SHA, on_gpus=True) is None
    on_gpus = _write_verdict(tmp_path, "on-gpus", backend="nccl", date="2026-11-21T08:00:00Z")
    assert find_verdict(tmp_path, "cpu", SHA, on_gpus=True)[0] == on_gpus
    assert find_verdict(tmp_path, "cpu", SHA)[0].parent.name == "on-cpu"


def _ensure(results: Path, target: Target, quick_check, lines: list[str],
            on_gpus: bool = False) -> dict:
    return ensure_checks(RUNTIME, target=target, image=results / "cpu.sif",
                         provenance={"sha256": SHA}, results_dir=results,
                         quick_check=quick_check, say=lines.append, on_gpus=on_gpus)


def test_an_existing_verdict_is_reused_without_a_quick_check(tmp_path, data_target) -> None:
    path = _write_verdict(tmp_path, "earlier")

    def never(say) -> None:
        raise AssertionError("no quick check when a verdict exists")

    lines: list[str] = []
    checks = _ensure(tmp_path, data_target, never, lines)
    assert checks["skipped"] is False
    assert checks["apptainer_test"] == {"passed": None, "how": "the definition has no %test"}
    assert checks["smoke"]["verdict"] == str(path) and checks["smoke"]["run_now"] is False
    assert checks["smoke"]["ranks"] == 2 and checks["smoke"]["passed"] is True


def test_the_quick_check_runs_when_there_is_no_verdict(tmp_path, data_target) -> None:
    def quick(say) -> None:
        say("smoke running")
        _write_verdict(tmp_path, "now")

    lines: list[str] = []
    checks = _ensure(tmp_path, data_target, quick, lines)
    assert checks["smoke"]["run_now"] is True
    assert any("no passing smoke verdict for sha256 abababababab" in l for l in lines)
    assert "  smoke running" in lines, "the quick check's output is indented under checks"


def test_a_failing_quick_check_refuses_with_the_cause_chained(tmp_path, data_target) -> None:
    cause = VerdictFailed("smoke FAILED for cpu (2 ranks): wrong sums")

    def failing(say) -> None:
        raise cause

    with pytest.raises(VerdictFailed, match="^not publishing cpu: smoke FAILED") as refused:
        _ensure(tmp_path, data_target, failing, [])
    assert refused.value.__cause__ is cause


def test_a_slow_quick_check_is_only_a_warning(tmp_path, data_target) -> None:
    def slow(say) -> None:
        _write_verdict(tmp_path, "slow")
        raise PerformanceFailed("busbw 1.0 GB/s below the reference")

    lines: list[str] = []
    assert _ensure(tmp_path, data_target, slow, lines)["smoke"]["run_now"] is True
    assert "checks: WARNING: busbw 1.0 GB/s below the reference" in lines


def test_a_quick_check_that_writes_no_verdict_for_this_image_refuses(tmp_path,
                                                                     data_target) -> None:
    def elsewhere(say) -> None:
        _write_verdict(tmp_path, "other", sha256="cd" * 32)

    with pytest.raises(VerdictFailed, match="wrote no smoke verdict for this image's sha256"):
        _ensure(tmp_path, data_target, elsewhere, [])


def test_skipped_checks_are_loud_and_recorded() -> None:
    lines: list[str] = []
    assert skipped("cpu", lines.append) == {"skipped": True, "apptainer_test": None,
                                            "smoke": None}
    assert lines[1].startswith("WARNING: --skip-checks: cpu is published WITHOUT")
    assert lines[0] == lines[3] == "!" * 72


def test_a_cpu_run_is_no_proof_for_a_gpu_image(tmp_path, data_target) -> None:
    _write_verdict(tmp_path, "on-cpu", backend="gloo")
    ran: list[str] = []

    def quick(say) -> None:  # here on CPUs again: its verdict is no proof either
        ran.append("quick")
        _write_verdict(tmp_path, "again", backend="gloo", date="2026-11-21T07:00:00Z")

    with pytest.raises(VerdictFailed, match="wrote no smoke verdict for this image's sha256"):
        _ensure(tmp_path, data_target, quick, [], on_gpus=True)
    assert ran == ["quick"]

