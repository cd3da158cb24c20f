"""Unit tests of the pre-publish checks: finding this image's passing verdict, and the quick check
run (through the caller's function) when there is none."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from containers.errors import PerformanceFailed, VerdictFailed
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from tests.fixtures.data import load_targets
from containers.publish.checks import ensure_checks, find_run, find_verdict, skipped
from containers.records import Checks
from tests.fixtures import ROOT
from tests.publish.standin import LABELS, smoke_report, smoke_run

SHA = "ab" * 32
RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


def _write_verdict(results: Path, name: str, **record) -> Path:
    """A smoke run's verdict of the image and the files of the run behind it."""
    assert not (results / "smoke" / name).exists()
    return smoke_run(results / "smoke" / name, sha256=record.pop("sha256", SHA), **record)


@pytest.fixture
def data_target() -> Target:
    """The CPU target without a %test, so no ``apptainer test`` is started."""
    return load_targets(ROOT)["cpu"].model_copy(update={"test": False})


def test_find_verdict_wants_this_image_passing_with_two_ranks(tmp_path: Path) -> None:
    assert find_verdict(tmp_path, "cpu", SHA) is None
    _write_verdict(tmp_path, "failed", passed=False, date="2026-11-21T04:00:00Z")
    _write_verdict(tmp_path, "one-rank", ranks=1, date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "other-image", sha256="cd" * 32, date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "other-target", target="gpu", date="2026-11-21T09:00:00Z")
    old = _write_verdict(tmp_path, "old", backend="gloo")
    assert find_verdict(tmp_path, "cpu", SHA)[0] == old
    new = _write_verdict(tmp_path, "new", backend="gloo", date="2026-11-21T06:00:00Z")
    (tmp_path / "smoke" / "broken").mkdir()
    (tmp_path / "smoke" / "broken" / "verdict.json").write_text("{")
    assert find_verdict(tmp_path, "cpu", SHA)[0] == new


def test_a_gpu_image_is_proven_only_by_a_run_on_its_kind_of_gpu(tmp_path: Path) -> None:
    _write_verdict(tmp_path, "on-cpu", backend="gloo", device_kind="cpu",
                   date="2026-11-21T09:00:00Z")
    _write_verdict(tmp_path, "unsaid")
    # nccl but no device reports: written before ranks reported what they ran on
    _write_verdict(tmp_path, "nccl-unsaid", backend="nccl", date="2026-11-21T09:30:00Z")
    _write_verdict(tmp_path, "other-vendor", backend="nccl", device_kind="rocm",
                   date="2026-11-21T09:40:00Z")
    assert find_verdict(tmp_path, "cpu", SHA, gpu="cuda") is None
    on_gpus = _write_verdict(tmp_path, "on-gpus", backend="nccl", device_kind="cuda",
                             date="2026-11-21T08:00:00Z")
    assert find_verdict(tmp_path, "cpu", SHA, gpu="cuda")[0] == on_gpus
    assert find_verdict(tmp_path, "cpu", SHA, gpu="rocm")[0].parent.name == "other-vendor"
    assert find_verdict(tmp_path, "cpu", SHA)[0].parent.name == "other-vendor"


def _ensure(results: Path, target: Target, quick_check, lines: list[str],
            gpu: str = "none", gpus_here: tuple[str, ...] = ()) -> dict:
    return ensure_checks(RUNTIME, target=target, image=results / "cpu.sif",
                         provenance={"sha256": SHA, "labels": LABELS}, results_dir=results,
                         quick_check=quick_check, say=lines.append, gpu=gpu,
                         gpus_here=gpus_here)


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


def test_a_build_that_ran_no_test_is_no_test_pass(tmp_path) -> None:
    """``apptainer test`` of an image with no %test exits 0: the build's own word that it ran
    none (``tested: false``) is recorded, and no test is started to "pass" now."""
    _write_verdict(tmp_path, "earlier")
    target = load_targets(ROOT)["cpu"]  # its manifest asks for the test
    checks = ensure_checks(
        Runtime(binary=str(tmp_path / "no-such-apptainer"), flavour="apptainer",
                version="1.4.5"), target=target, image=tmp_path / "cpu.sif",
        provenance={"sha256": SHA, "labels": LABELS, "tested": False}, results_dir=tmp_path,
        quick_check=lambda say: None, say=lambda line: None)
    assert checks["apptainer_test"] == {"passed": None, "how": "its build ran no %test"}


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
    _write_verdict(tmp_path, "on-cpu", backend="gloo", device_kind="cpu")
    ran: list[str] = []

    def quick(say) -> None:  # the GPUs are here, but the run fell back to the CPU
        ran.append("quick")
        _write_verdict(tmp_path, "again", backend="gloo", device_kind="cpu",
                       date="2026-11-21T07:00:00Z")

    with pytest.raises(VerdictFailed, match="wrote no smoke verdict for this image's sha256 "
                                            r"whose ranks ran on NVIDIA \(CUDA\) GPUs"):
        _ensure(tmp_path, data_target, quick, [], gpu="cuda", gpus_here=("cuda",))
    assert ran == ["quick"]


def test_without_the_targets_gpus_here_publish_refuses_before_any_quick_check(
        tmp_path, data_target) -> None:
    _write_verdict(tmp_path, "on-cpu", backend="gloo", device_kind="cpu")

    def never(say) -> None:
        raise AssertionError("no quick check on a machine without the target's GPUs")

    with pytest.raises(VerdictFailed) as refused:
        _ensure(tmp_path, data_target, never, [], gpu="rocm", gpus_here=("cuda",))
    message = str(refused.value)
    assert "no passing smoke verdict of this image (sha256 abababababab) on AMD (ROCm) GPUs" \
        in message
    assert "this machine has no AMD (ROCm) GPUs to run one" in message
    assert "--workload smoke --submit" in message and "--skip-checks" in message


def test_a_performance_fail_is_shown_in_the_catalogue_summary(tmp_path, data_target) -> None:
    _write_verdict(tmp_path, "slow", performance={"state": "fail", "failed": True,
                                                  "message": "busbw 1 GB/s below 100"})
    checks = _ensure(tmp_path, data_target, lambda say: None, [])
    assert checks["smoke"]["performance_failed"] is True
    assert checks["smoke"]["performance"]["state"] == "fail"



def test_the_catalogue_names_every_collective_the_verdict_proved(tmp_path, data_target) -> None:
    collectives = {op: {"op": op, "passed": True, "wrong_total": 0}
                   for op in ("all_reduce", "all_gather")}
    _write_verdict(tmp_path, "ops", ops=["all_reduce", "all_gather"], collectives=collectives)

    def never(say) -> None:
        raise AssertionError("no quick check when a verdict exists")

    smoke = _ensure(tmp_path, data_target, never, [])["smoke"]
    assert smoke["ops"] == ["all_reduce", "all_gather"] and smoke["collectives"] == collectives


# -------------------------------------------------------------- the verdict is re-derived
def test_a_newer_failure_of_the_same_image_outvotes_an_older_pass(tmp_path, data_target) -> None:
    _write_verdict(tmp_path, "passed", date="2026-11-21T05:00:00Z")
    failed = _write_verdict(tmp_path, "failed", passed=False, date="2026-11-21T06:00:00Z",
                            reasons=["3 wrong values"])
    assert find_verdict(tmp_path, "cpu", SHA)[0] == failed

    def never(say) -> None:
        raise AssertionError("a newer failure refuses; it is not run over")

    with pytest.raises(VerdictFailed) as refused:
        _ensure(tmp_path, data_target, never, [])
    message = str(refused.value)
    assert message.startswith("not publishing cpu: the newest smoke of this image "
                              "(sha256 abababababab) FAILED")
    assert str(failed) in message and "3 wrong values" in message and "\n" not in message


def test_a_hand_edited_pass_without_its_run_files_refuses(tmp_path, data_target) -> None:
    """A smoke that timed out left no rank files and no results JSON; its verdict edited to
    pass is refused, naming what the run's files say."""
    path = _write_verdict(tmp_path, "timed-out", evidence=False)
    (path.parent / "run.log").write_text("starting\n")

    def never(say) -> None:
        raise AssertionError("no quick check: the newest verdict is refused")

    with pytest.raises(VerdictFailed) as refused:
        _ensure(tmp_path, data_target, never, [])
    message = str(refused.value)
    assert message.startswith(f"not publishing cpu: {path} says passed but its run's own files "
                              "do not: ranks that did not finish: 0, 1 (of 2); no readable "
                              "allreduce.json")
    assert "\n" not in message


@pytest.mark.parametrize("spoil, why", [
    (lambda f: (f / "rank-1.json").unlink(), "ranks that did not finish: 1 (of 2)"),
    (lambda f: (f / "allreduce.json").write_text('{"world_size": 2, "ok": true, '
                                                 '"wrong_total": 3, "finished": "x"}'),
     "allreduce.json counts 3 wrong values"),
    (lambda f: (f / "allreduce.json").write_text('{"world_size": 4, "ok": true, '
                                                 '"wrong_total": 0, "finished": "x"}'),
     "allreduce.json has 4 ranks, the verdict 2"),
    (lambda f: (f / "run.log").unlink(), "no readable run.log"),
    (lambda f: (f / "run.log").write_text("Root Cause (first observed failure):\n"
                                          "  rank      : 1\n  exitcode  : 7\n"),
     "run.log shows rank 1 failed (exit code 7)"),
    (lambda f: (f / "image.json").write_text('{"sha256": "' + "cd" * 32 + '"}'),
     "its image.json is not of this image"),
    (lambda f: os.mkfifo(f / "allreduce.json.fifo") or (f / "allreduce.json").unlink()
     or os.rename(f / "allreduce.json.fifo", f / "allreduce.json"),
     "no readable allreduce.json"),
])
def test_each_file_of_the_run_is_checked(tmp_path, data_target, spoil, why) -> None:
    path = _write_verdict(tmp_path, "run")
    spoil(path.parent)
    with pytest.raises(VerdictFailed, match=re.escape(why)):
        _ensure(tmp_path, data_target, lambda say: None, [])


def test_a_gpu_verdict_needs_device_reports_on_that_gpu(tmp_path, data_target) -> None:
    path = _write_verdict(tmp_path, "gpus", backend="nccl", device_kind="cuda")
    with pytest.raises(VerdictFailed, match="device reports do not show every rank on a cuda"):
        _ensure(tmp_path, data_target, lambda say: None, [], gpu="cuda", gpus_here=("cuda",))
    for rank in (0, 1):
        (path.parent / f"device-{rank}.json").write_text(json.dumps(
            {"rank": rank, "device": "cuda", "build": "cuda", "image": LABELS}))
    assert _ensure(tmp_path, data_target, lambda say: None, [], gpu="cuda")["smoke"]["passed"]


def test_long_verdict_reasons_are_cut_at_a_word_and_say_so() -> None:
    """A verdict's reasons are shown on one line of at most ~400 characters, cut between words
    (never mid-word) and saying where the rest is."""
    from containers.publish.checks import _one_line
    assert _one_line(["short reason", "another"]) == "short reason; another"
    line = _one_line(["word " * 200])
    assert line.endswith(" ... (the rest in the verdict file)")
    assert line.split(" ... ")[0].endswith("word") and len(line) < 450


# ------------------------------------------- the run is bound to the image by its own files
def _refused(results: Path, target: Target, gpu: str = "none") -> str:
    with pytest.raises(VerdictFailed) as refused:
        _ensure(results, target, lambda say: None, [], gpu=gpu)
    assert "\n" not in str(refused.value)
    return str(refused.value)


def test_another_images_pass_with_its_sha256_edited_refuses(tmp_path, data_target) -> None:
    """Image A's real run, its verdict's sha256 made B's: its ranks read A's labels inside A."""
    other = {**LABELS, "containers.build-date": "2026-11-20T01:00:00Z",
             "org.label-schema.build-date": "Friday_20_November_2026_01:00:09_UTC"}
    _write_verdict(tmp_path, "image-a", labels=other)
    assert "ranks 0, 1 did not record running in this image" in _refused(tmp_path, data_target)


@pytest.mark.parametrize("labels", [{}, {"containers.target": "cpu"}])
def test_a_run_whose_ranks_did_not_record_the_image_refuses(tmp_path, data_target,
                                                            labels) -> None:
    _write_verdict(tmp_path, "unsaid", labels=labels)
    assert "did not record running in this image" in _refused(tmp_path, data_target)


def test_an_image_whose_record_has_no_labels_proves_nothing(tmp_path, data_target) -> None:
    _write_verdict(tmp_path, "run")
    with pytest.raises(VerdictFailed, match="has no labels to tie a run to"):
        ensure_checks(RUNTIME, target=data_target, image=tmp_path / "cpu.sif",
                      provenance={"sha256": SHA}, results_dir=tmp_path,
                      quick_check=lambda say: None, say=[].append)


@pytest.mark.parametrize("date", [None, "", "yesterday"])
def test_a_verdict_without_a_date_is_refused_not_ranked_newest(tmp_path, data_target,
                                                               date) -> None:
    _write_verdict(tmp_path, "failed", passed=False, date="2026-11-21T06:00:00Z")
    path = _write_verdict(tmp_path, "undated", date=date)
    message = _refused(tmp_path, data_target)
    assert f"{path} has no date" in message


@pytest.mark.parametrize("report, why", [
    ({"wrong_total": False}, "allreduce.json: key 'wrong_total': Input should be a valid "
                             "integer (got False)"),
    ({"ok": 1}, "allreduce.json: key 'ok': Input should be a valid boolean (got 1)"),
    ({"world_size": 2.0}, "allreduce.json: key 'world_size': Input should be a valid integer"),
    ({"results": [{"bytes": 8, "oop": {"wrong": 5}, "ip": {"wrong": 0}}]},
     "counts 5 wrong values"),
    ({"results": [{"bytes": 8, "oop": {"wrong": "0"}}]},
     "allreduce.json: key 'results.0.oop.wrong': Input should be a valid integer"),
])
def test_the_results_json_is_read_as_a_typed_record(tmp_path, data_target, report, why) -> None:
    path = _write_verdict(tmp_path, "run")
    (path.parent / "allreduce.json").write_text(json.dumps(smoke_report(2, **report)))
    assert why in _refused(tmp_path, data_target)


#: A batch job's ``job.json`` (containers/batch/job.py writes it).
JOB = {"target": "cpu", "site": "local-slurm", "workload": "smoke", "nodes": 1,
       "gpus_per_node": 2}


def test_a_batch_run_without_its_image_record_refuses(tmp_path, data_target) -> None:
    path = _write_verdict(tmp_path, "job")
    (path.parent / "job.json").write_text(json.dumps(JOB))
    assert "the batch job left no image.json" in _refused(tmp_path, data_target)
    (path.parent / "image.json").write_text(json.dumps({"sha256": SHA}))
    assert _ensure(tmp_path, data_target, lambda say: None, [])["smoke"]["passed"]


def test_a_run_over_a_degraded_transport_is_no_proof(tmp_path, data_target) -> None:
    """``invoke job --transport socket`` proves the image over TCP, not over the site's
    network: neither its verdict's word nor its job record may let it publish the image."""
    _write_verdict(tmp_path, "said", degraded="TCP sockets instead of Slingshot")
    assert "chose a degraded transport (TCP sockets instead of Slingshot)" in \
        _refused(tmp_path, data_target)
    quiet = tmp_path / "quiet"
    path = _write_verdict(quiet, "unsaid")
    (path.parent / "job.json").write_text(json.dumps({**JOB, "transport": "socket"}))
    (path.parent / "image.json").write_text(json.dumps({"sha256": SHA}))
    assert "chose a degraded transport (--transport socket)" in _refused(quiet, data_target)


#: The build record of an image without torch (its build ran no %test unless said).
BARE = {"sha256": SHA, "stack": {"build": None, "torch": None}, "tested": False,
        "probe_errors": {"torch": "ModuleNotFoundError: No module named 'torch'"},
        "build_date": "2026-12-06T06:00:00Z"}


def _no_smoke(say) -> None:
    raise AssertionError("a smoke was tried in an image without torch")


def _bare_checks(tmp_path: Path, target: Target, lines: list[str] | None = None,
                 **provenance) -> dict:
    return ensure_checks(RUNTIME, target=target, image=tmp_path / "x.sif",
                         provenance={**BARE, **provenance}, results_dir=tmp_path,
                         quick_check=_no_smoke, say=[].append if lines is None else lines.append)


def _write_run(results: Path, name: str, *, mode: int = 0o644, **fields) -> Path:
    """An ``invoke run``'s status.json in ``results/run/cpu-<name>/``, as the run writes it
    (these fields over a passing run of ``true`` on this image)."""
    path = results / "run" / f"cpu-{name}" / "status.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": 2, "kind": "run", "target": "cpu", "sha256": SHA,
                                "command": ["true"], "exit_status": 0, "interrupted": False,
                                "device_gate": None, "seconds": 0.1,
                                "date": "2026-12-06T07:00:00Z", **fields}))
    path.chmod(mode)
    return path


def test_an_image_without_torch_is_proven_by_its_own_test_at_build(tmp_path,
                                                                   data_target) -> None:
    """No smoke can run in it (its collectives need torch), so no quick check is tried."""
    checks = _bare_checks(tmp_path, data_target, tested=True)
    assert checks == {"skipped": False, "smoke": None, "proof": "no collective proof: no torch",
                      "apptainer_test": {"passed": True, "how": "at build (provenance)",
                                         "date": "2026-12-06T06:00:00Z"}}


def test_without_a_test_at_build_only_a_passing_run_of_this_very_image_proves_it(
        tmp_path, data_target) -> None:
    with pytest.raises(VerdictFailed) as refused:
        _bare_checks(tmp_path, data_target)
    said = str(refused.value)
    assert "holds no torch, so no smoke can prove it; its build ran no %test" in said
    assert "run `invoke run --target cpu --no-launcher -- <a command that checks" in said
    assert "found, not counted" not in said
    nothing = {
        "other-image": _write_run(tmp_path, "other-image", sha256="cd" * 32),
        "old": _write_run(tmp_path, "old", sha256=None, target=None),
        "failed": _write_run(tmp_path, "failed", exit_status=1),
        "gate": _write_run(tmp_path, "gate", exit_status=None, device_gate="fail"),
        "stopped": _write_run(tmp_path, "stopped", exit_status=130, interrupted=True),
        "undated": _write_run(tmp_path, "undated", command=["x"], date=None),
        "invalid": _write_run(tmp_path, "invalid", exit_status="0"),
        "others": _write_run(tmp_path, "others", mode=0o664),
    }
    (tmp_path / "run" / "cpu-link").mkdir()
    (tmp_path / "run" / "cpu-link" / "status.json").symlink_to(nothing["others"])
    (tmp_path / "run" / "cpu-broken").mkdir()
    (tmp_path / "run" / "cpu-broken" / "status.json").write_text("{")
    assert find_run(tmp_path, "cpu", SHA)[0] is None
    reasons = dict(line.split(": ", 1) for line in find_run(tmp_path, "cpu", SHA)[1])
    for name, why in [("other-image", "a run of another image (sha256 cdcdcdcdcdcd)"),
                      ("old", "it names no image"), ("failed", "it ended with exit 1"),
                      ("gate", "its device gate failed: the command never started"),
                      ("stopped", "it ended with exit 130 (interrupted)"),
                      ("undated", "it has no date (None)"),
                      ("invalid", "it does not validate: key 'exit_status': Input should be a "
                                  "valid integer"),
                      ("others", "it is writable by its group or others (mode 664)"),
                      ("link", "it is a link"), ("broken", "it is unreadable")]:
        assert reasons[str(tmp_path / "run" / f"cpu-{name}" / "status.json")].startswith(why)
    with pytest.raises(VerdictFailed, match=r"found, not counted: .*cpu-broken.*; and 5 more$"):
        _bare_checks(tmp_path, data_target)


def test_the_newest_run_of_a_command_decides_and_the_catalogue_names_it(tmp_path,
                                                                        data_target) -> None:
    """A command whose newest run failed proves nothing (an older pass of it is outvoted);
    another command's passing run does, and the checks record names it and its date."""
    _write_run(tmp_path, "a", date="2026-12-06T07:00:00Z")
    newer = _write_run(tmp_path, "b", date="2026-12-06T08:00:00Z", exit_status=1)
    assert f"the same command's newer run ({newer}) is no proof" in "\n".join(
        find_run(tmp_path, "cpu", SHA)[1])
    proof = _write_run(tmp_path, "c", command=["check", "it"], date="2026-12-06T06:00:00Z")
    lines: list[str] = []
    checks = _bare_checks(tmp_path, data_target, lines)
    assert checks["proof"] == "no collective proof: no torch" and checks["smoke"] is None
    assert checks["apptainer_test"] == {"passed": None, "how": "its build ran no %test"}
    assert (checks["run"]["command"], checks["run"]["date"], checks["run"]["file"]) == \
        (["check", "it"], "2026-12-06T06:00:00Z", str(proof))
    assert lines[-1].endswith("proof: the run of `check it` (exit 0) on 2026-12-06T06:00:00Z "
                              f"({proof})")
    assert Checks.model_validate(checks).run.command == ["check", "it"]
