"""Integration: ``invoke smoke`` inside the real CPU image, passing and failing for real."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from containers.app.project import Project
from containers.app.publishing import publish
from containers.app.workloads import prove, smoke_history, train
from containers.errors import PerformanceFailed, VerdictFailed
from containers.inputs.references import Reference
from containers.prove import perflog
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from tests.fixtures.images import results_project
from tests.fixtures.procs import descendants

pytestmark = [pytest.mark.apptainer, pytest.mark.distributed]


@pytest.fixture
def smoke_project(real_project, tmp_path) -> Project:
    """The real project and image, with results going to this test's temp folder."""
    return results_project(real_project.root, tmp_path)


def _no_leftovers() -> None:
    deadline = time.monotonic() + 10
    while descendants(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert descendants(os.getpid()) == [], "processes of the smoke run were left behind"


@pytest.mark.parametrize("ranks", [2, 4])
def test_smoke_passes(cpu_image, smoke_project, ranks) -> None:
    lines: list[str] = []
    result = prove(smoke_project, target="cpu", say=lines.append,
                   options=SmokeOptions(gpus=ranks, sizes="4K:4M", iters=3, warmup=1,
                                            timeout=300))
    assert result.ok, "\n".join(lines[-30:])
    report = result.outcome.report
    assert report["world_size"] == ranks and report["backend"] == "gloo"
    assert report["wrong_total"] == 0 and report["ok"] is True
    assert [r["bytes"] for r in report["results"]] == [4096 << i for i in range(11)]
    # measured at every size (JSON keeps 3 decimals: a small size on a loaded machine reads 0.0)
    assert all(r["oop"]["busbw"] is not None and r["ip"]["busbw"] is not None
               for r in report["results"])
    assert report["results"][-1]["oop"]["busbw"] > 0 and report["results"][-1]["ip"]["busbw"] > 0
    out = result.plan.out_dir
    assert (out / "all_reduce.png").stat().st_size > 10_000
    assert sorted(p.name for p in out.glob("rank-*.json")) == [f"rank-{i}.json"
                                                                for i in range(ranks)]
    assert any(line.startswith("# Out of bounds values : 0") for line in lines)
    assert "sanity:      PASS" in lines
    record = json.loads((out / "verdict.json").read_text())
    provenance = json.loads(cpu_image.with_name("cpu.sif.json").read_text())
    assert record["passed"] is True and record["reasons"] == [] and record["ranks"] == ranks
    # What the run ran on, rank by rank, and its stack.
    assert record["device_kind"] == "cpu" and len(record["devices"]) == ranks
    assert record["stack"]["build"] == "cpu" and record["stack"]["torch"] == report["torch_version"]
    assert record["stack"]["runtime"].startswith(("apptainer ", "singularity "))
    logged = perflog.read(smoke_project.settings.perflog_dir, target="cpu")[-1]
    assert logged["stack"] == record["stack"]
    assert (record["inputs_hash"], record["sha256"]) == (provenance["inputs_hash"],
                                                         provenance["sha256"])
    assert record["largest"]["bytes"] == 4 << 20
    # The local site's reference is at 16 MiB: this run did not measure it, and says so.
    assert record["performance"]["state"] == "not-measured"
    assert record["transport"] is None  # gloo: no NCCL transport to prove
    (logged,) = perflog.read(smoke_project.settings.perflog_dir)
    assert logged["inputs_hash"] == provenance["inputs_hash"] and logged["ranks"] == ranks
    busbw_factor = 2 * (ranks - 1) / ranks
    last = report["results"][-1]["oop"]
    assert last["busbw"] == pytest.approx(last["algbw"] * busbw_factor, rel=0.01, abs=0.002)
    _no_leftovers()


@pytest.mark.parametrize("fault, timeout, expected", [
    ("die@1", 240, "first failure: rank 1 (exit code 17)"),
    ("corrupt@1", 240, "wrong values (all_reduce results differ from the exact sum)"),
    ("hang@1", 25, "timed out after 25 s"),
])
def test_smoke_fails_on_faults(cpu_image, smoke_project, fault, timeout, expected) -> None:
    started = time.monotonic()
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as info:
        prove(smoke_project, target="cpu", say=lines.append,
              options=SmokeOptions(gpus=2, sizes="4K:64K", iters=2, warmup=1,
                                       timeout=timeout, fault=fault))
    message = str(info.value)
    assert expected in message, "\n".join(lines[-30:])
    assert message.startswith("smoke FAILED for cpu (2 ranks)")
    assert time.monotonic() - started < timeout + 30
    if fault == "hang@1":
        assert "ranks that did not finish: 0, 1 (of 2)" in message  # rank 0 waits on rank 1
    verdict = json.loads(next(Path(smoke_project.settings.results_dir).rglob(
        "verdict.json")).read_text())
    assert verdict["passed"] is False and any(expected in r for r in verdict["reasons"])
    if fault == "corrupt@1":
        report = json.loads(next(Path(smoke_project.settings.results_dir).rglob(
            "allreduce.json")).read_text())
        assert report["wrong_total"] > 0 and report["ok"] is False
    _no_leftovers()


def _with_local_reference(project: Project, value: float) -> Project:
    local = project.sites["local"]
    reference = Reference(partition="*", nodes=1, ranks_per_node=2, bytes=16 << 20,
                          value=value, lower=-0.7, upper=None, unit="GB/s", source="test")
    project.__dict__["sites"] = {**project.sites,
                                 "local": local.model_copy(update={"references": (reference,)})}
    return project


def test_reference_gates_pass_and_fail_on_performance_only(cpu_image, smoke_project) -> None:
    """Against a reference it meets: PASS. Against an impossible one: correct but too slow, so
    the performance gate fails (exit 3), the sanity gate does not, and both runs are logged."""
    options = SmokeOptions(gpus=2, sizes="4M:16M", iters=3, warmup=1, timeout=300)
    lines: list[str] = []
    result = prove(_with_local_reference(smoke_project, 0.5), target="cpu",
                   options=options, say=lines.append)
    assert result.performance.state == "pass", "\n".join(lines[-20:])
    assert any(line.startswith("performance: PASS: busbw") for line in lines)
    with pytest.raises(PerformanceFailed) as info:
        prove(_with_local_reference(smoke_project, 1000.0), target="cpu", options=options,
              say=lines.append)
    assert info.value.exit_code == 3
    assert "is below the reference 1000 GB/s (>= 300 GB/s)" in str(info.value)
    assert "% short of 1000" in str(info.value)
    assert "sanity:      PASS" in lines
    records = perflog.read(smoke_project.settings.perflog_dir, target="cpu")
    assert [r["performance"]["state"] for r in records] == ["pass", "fail"]
    assert all(r["passed"] for r in records)
    history: list[str] = []
    assert len(smoke_history(smoke_project, target="cpu", say=history.append)) == 2
    assert (smoke_project.settings.perflog_dir / "history-cpu.png").stat().st_size > 10_000


def test_gpu_site_with_a_cpu_image_fails_and_is_not_published(cpu_image, factory_project,
                                                              tmp_path) -> None:
    """A site profile with GPUs and the CPU image (what a missing --nv, driver libraries not
    found in the container or an empty CUDA_VISIBLE_DEVICES look like): the ranks are told to
    expect CUDA GPUs, find none and refuse; smoke and train fail naming the GPUs, and publish
    refuses the image."""
    root = factory_project()
    profile = root / "sites" / "local.yaml"
    # 4 GPUs a node: the profile's references at 4 ranks per node must be able to apply
    profile.write_text(profile.read_text() + "gpus: {kind: cuda, per_node: 4}\n")
    project = results_project(root, tmp_path, images_dir=str(cpu_image.parent))
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failure:
        prove(project, target="cpu", say=lines.append,
              options=SmokeOptions(gpus=2, sizes="4K:64K", iters=2, warmup=1, timeout=300))
    assert failure.value.exit_code == 2
    message = str(failure.value)
    assert "ranks 0, 1: torch " in message and "is a CPU-only build: the image was built for " \
        "CPUs only" in message
    assert "ran on the CPU: torch saw 0 GPUs (CUDA_VISIBLE_DEVICES='0,1'); usual causes: the " \
        "runtime's --nv flag missing" in message
    assert any(line.startswith("  run ") and " exec --nv " in line and
               "--expect-gpu cuda --backend nccl" in line for line in lines)
    assert sum("allreduce.py: rank" in line and "expected a cuda GPU" in line
               for line in lines) == 2, "each rank says in one line why it refused"
    # torchrun prints its own traceback on a failed child; the workload prints none.
    assert not any('File "/opt/containers/jobs/' in line for line in lines)
    (record_path,) = (tmp_path / "results" / "smoke").glob("*/verdict.json")
    record = json.loads(record_path.read_text())
    assert record["passed"] is False and record["device_kind"] == "cpu"
    assert [d["device"] for d in record["devices"]] == ["cpu", "cpu"]
    assert any("CPU-only build" in reason for reason in record["reasons"])

    with pytest.raises(VerdictFailed) as trained:
        train(project, target="cpu", say=lines.append,
              options=TrainOptions(example="ddp", gpus=2, model="cnn", model_size="tiny",
                                       epochs=1, batch_size=32, samples=64, timeout=300))
    assert trained.value.exit_code == 2 and "ran on the CPU" in str(trained.value)

    with pytest.raises(VerdictFailed) as refused:
        publish(project, target="cpu", dest=tmp_path / "pub", version="1.0",
                say=lines.append)
    assert "the newest smoke of this image" in str(refused.value) \
        and ") FAILED (" in str(refused.value) and "CPU-only build" in str(refused.value)
    assert not (tmp_path / "pub" / "cpu" / "1.0.sif").exists()
    _no_leftovers()


def test_a_soak_fails_naming_the_cycle_with_wrong_values(cpu_image, smoke_project) -> None:
    """--cycles 3 with one rank's buffer corrupted in cycle 2 only: the sweep is repeated, and
    the verdict names cycle 2 and the sizes."""
    lines: list[str] = []
    with pytest.raises(VerdictFailed) as failure:
        prove(smoke_project, target="cpu", say=lines.append,
              options=SmokeOptions(gpus=2, sizes="4K:16K", iters=2, warmup=1, timeout=300,
                                       cycles=3, fault="corrupt@1:2"))
    assert "at sizes 4096 B (cycle 2), 8192 B (cycle 2), 16384 B (cycle 2) in a soak of 3 " \
        "cycles" in str(failure.value)
    assert sum(line.startswith("# cycle ") for line in lines) == 3
    (path,) = (smoke_project.settings.results_dir / "smoke").glob("*/verdict.json")
    record = json.loads(path.read_text())
    assert record["cycles"] == 3 and record["cycles_done"] == 3
    assert [r["wrong_cycles"] for r in record["results"]] == [[2], [2], [2]]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0),
                    reason="needs cores 0 and 1")
def test_ranks_pin_themselves_to_the_sites_cores(cpu_image, factory_project, tmp_path) -> None:
    """A site map that pins 2 ranks to cores 0 and 1 under one torchrun: each rank really runs
    there (the kernel's Cpus_allowed_list), and the header, the JSON and the verdict say so."""
    root = factory_project()
    profile = root / "sites" / "local.yaml"
    profile.write_text(profile.read_text() + 'cpu_bind: ["0x1", "0x2"]\n')
    project = results_project(root, tmp_path, images_dir=str(cpu_image.parent))
    lines: list[str] = []
    result = prove(project, target="cpu", say=lines.append,
                   options=SmokeOptions(gpus=2, sizes="4K:16K", iters=2, warmup=1,
                                            timeout=300))
    assert result.ok, "\n".join(lines[-20:])
    assert "  cores: rank 0 cores 0, rank 1 cores 1 (each rank pins itself before it touches " \
        "its GPU: the site's cpu_bind map)" in lines
    assert any(line.startswith("  run ") and line.endswith("--rank-cores 0:1") for line in lines)
    ranks = result.outcome.report["ranks"]
    assert [(r["cores"], r["cpus_allowed_list"], r["pinned"]) for r in ranks] == [
        ("0", "0", True), ("1", "1", True)]
    assert any("cores 0" in line and line.startswith("#  Rank   0") for line in lines)
    record = json.loads((result.plan.out_dir / "verdict.json").read_text())
    assert [d["cores"] for d in record["devices"]] == ["0", "1"]
