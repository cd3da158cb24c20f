"""The gates every kind goes through, and ``verdict.json``: the same shape for smoke and train."""

from __future__ import annotations

from dataclasses import replace

import pytest

from containers.errors import PerformanceFailed, VerdictFailed
from tests.fixtures.data import load_targets
from containers.inputs.references import Reference
from containers.inputs.sites import load_site
from containers.prove import verdict
from containers.prove.kind import plan
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.train import TRAINS, TrainOptions
from containers.run.workload import Outcome, collect
from tests.fixtures.reports import train_report

IMAGE = {"inputs_hash": "a" * 64, "sha256": "b" * 64, "build_date": "2026-11-20T10:00:00Z"}
ROW = {"bytes": 16 << 20, "oop": {"busbw": 2.0, "wrong": 0}, "ip": {"busbw": 2.1, "wrong": 0}}


def _planner(root, settings, runtime, *, target: str, site: str, environ=None):
    """options -> the plan of ``target`` on ``site`` (a profile of the checkout)."""
    item, where = load_targets(root)[target], load_site(root / "sites" / f"{site}.yaml")

    def make(options):
        return plan(item, where, settings=settings, runtime=runtime, options=options,
                    run_id="r", environ=environ)
    return make


@pytest.fixture
def data_plans(data_root, data_settings, data_runtime):
    return _planner(data_root, data_settings, data_runtime, target="cpu", site="local")


def _outcome(report, **kw) -> Outcome:
    return Outcome(**{"returncode": 0, "timed_out": False, "missing_ranks": [], "seconds": 2.04,
                      "report": report, **kw})


def test_train_verdict_has_the_smoke_shape(data_plans) -> None:
    smoke = verdict.Result(SMOKE, data_plans(SmokeOptions(gpus=2)), _outcome(
        {"backend": "gloo", "nodes": 1, "results": [ROW], "finished": "x"}), partition="p")
    fsdp = TrainOptions(example="fsdp", gpus=2)
    train = verdict.Result(fsdp.kind, data_plans(fsdp), _outcome(
        train_report(example="fsdp", throughput=9.5)))
    records = [verdict.record(result, image_record=IMAGE) for result in (smoke, train)]
    common = {"kind", "target", "site", "partition", "image", "inputs_hash", "sha256",
              "build_date", "ranks", "nodes", "backend", "passed", "reasons", "performance",
              "seconds", "date", "out_dir"}
    for record in records:
        assert common <= set(record)
        assert (record["inputs_hash"], record["sha256"]) == (IMAGE["inputs_hash"],
                                                             IMAGE["sha256"])
        assert record["passed"] is True and record["reasons"] == [] and record["seconds"] == 2.0
    assert [r["kind"] for r in records] == ["smoke", "train"]
    assert records[0]["performance"]["state"] in ("pass", "fail", "not-measured",
                                                  "no-reference")
    assert records[0]["wrong_total"] == 0 and records[0]["largest"]["bytes"] == 16 << 20
    assert records[1]["performance"] is None  # training is not judged against references
    assert (records[1]["example"], records[1]["throughput"]) == ("fsdp", 9.5)
    assert records[1]["out_dir"].endswith("train-fsdp/cpu-r")
    assert verdict.gate_lines(records[1]) == ["sanity:      PASS", "verdict: PASS"]


def test_gates_and_exit_codes(data_plans) -> None:
    train_plan = data_plans(TrainOptions(example="ddp", gpus=2))
    usage = verdict.Result(TRAINS["ddp"], train_plan, _outcome(None, returncode=2, lines=(
        "noise", "train.py: error: --data /x: no such folder", "train.py: error: again")))
    assert usage.reasons == ["train.py: error: --data /x: no such folder"]
    record = verdict.record(usage, image_record={})
    assert verdict.gate_lines(record) == [
        "sanity:      FAIL: train.py: error: --data /x: no such folder", "verdict: FAIL"]
    with pytest.raises(VerdictFailed) as info:
        verdict.check(usage)
    assert info.value.exit_code == 2
    assert str(info.value).startswith("train FAILED for cpu (2 ranks): train.py: error:")
    assert str(info.value).endswith(f"[log: {train_plan.out_dir / 'run.log'}]")

    smoke_plan = data_plans(SmokeOptions(gpus=2))
    usage = verdict.Result(SMOKE, smoke_plan, _outcome(None, returncode=2, lines=(
        "allreduce.py: error: --sizes: no sizes given",)))
    assert usage.reasons == ["allreduce.py: error: --sizes: no sizes given"]
    slow_site = smoke_plan.site.model_copy(update={"references": (
        Reference(partition="*", nodes=1, ranks_per_node=2, bytes=16 << 20, value=100.0,
                  lower=-0.1, upper=None, unit="GB/s", source="test"),)})
    slow = verdict.Result(SMOKE, replace(smoke_plan, site=slow_site),
                          _outcome({"backend": "gloo", "results": [ROW], "finished": "x"}))
    assert slow.reasons == [] and slow.performance.failed and not slow.ok
    lines = verdict.gate_lines(verdict.record(slow, image_record={}))
    assert lines[0] == "sanity:      PASS" and lines[1].startswith("performance: FAIL: busbw 2 ")
    assert lines[-1] == "verdict: FAIL"
    with pytest.raises(PerformanceFailed) as info:
        verdict.check(slow)
    assert info.value.exit_code == 3
    assert str(info.value).startswith("smoke performance FAILED for cpu (2 ranks): busbw 2 GB/s")


@pytest.fixture
def data_gpu_plans(data_root, data_settings, data_runtime):
    """Plans of the lumi-rocm target on LUMI (ROCm GPUs, RCCL transport declared)."""
    return _planner(data_root, data_settings, data_runtime, target="lumi-rocm", site="lumi",
                    environ={"USER": "u", "SLURM_JOB_ID": "7"})


CXI = ("lumi-node:1:1 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)",)
SMOKE_REPORT = {"nodes": 1, "results": [ROW], "finished": "x"}
TRAIN_REPORT = train_report()


def _gcd(rank: int, **fields) -> dict:
    """A LUMI rank's device report on its own GCD."""
    return {"rank": rank, "local_rank": rank, "hostname": "nid005001", "device": "cuda",
            "index": rank, "name": "AMD Instinct MI250X", "uuid": f"GPU-{rank}", "visible": 8,
            "visible_env": {"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, "build": "rocm",
            "torch": "2.7.1+rocm6.3", "hip": "6.3.42131", "nccl": "2.21.5", "driver": "6.8.5",
            "cores": ["49-55", "57-63", "17-23", "25-31", "1-7", "9-15", "33-39", "41-47"][rank],
            **fields}


GCDS = tuple(_gcd(rank) for rank in range(8))


@pytest.mark.parametrize("kind,options,report", [
    (SMOKE, SmokeOptions(gpus=8), SMOKE_REPORT),
    (TRAINS["ddp"], TrainOptions(example="ddp", gpus=8), TRAIN_REPORT),
])
def test_a_gpu_site_passes_only_on_its_gpus(data_gpu_plans, kind, options, report) -> None:
    workload = data_gpu_plans(options)

    def reasons(ranks=GCDS, **fields) -> list[str]:
        return verdict.Result(kind, workload, _outcome({**report, **fields}, lines=CXI,
                                                       devices=ranks)).reasons

    assert reasons(backend="nccl") == []
    on_cpu = tuple(_gcd(r, device="cpu", visible=0, index=None, uuid=None,
                        visible_env={"ROCR_VISIBLE_DEVICES": ""}) for r in range(8))
    (found,) = reasons(on_cpu, backend=None)
    assert found.startswith("ranks 0, 1, 2, 3, 4, 5, 6, 7 on nid005001 ran on the CPU: torch "
                            "saw 0 GPUs (ROCR_VISIBLE_DEVICES=''); usual causes: the "
                            "runtime's --rocm flag missing")
    assert reasons((), backend="nccl")[0].startswith("ranks 0, 1, 2, 3, 4, 5, 6, 7 wrote no "
                                                     "device report")
    assert reasons(backend="gloo") == ["the ranks ran with backend gloo, not nccl (RCCL): the "
                                       "GPU collectives were not tested"]
    moved = (*GCDS[:3], _gcd(3, cores="0-63"), *GCDS[4:])
    assert reasons(moved, backend="nccl") == [
        "rank 3 on nid005001 runs on cores 0-63, not its GPU's cores 25-31 (the site's "
        "cpu_bind map)"]
    with pytest.raises(VerdictFailed, match="ran on the CPU"):
        verdict.check(verdict.Result(kind, workload, _outcome(
            {**report, "backend": "gloo"}, lines=CXI, devices=on_cpu)))
    record = verdict.record(verdict.Result(kind, workload, _outcome(
        {**report, "backend": "nccl"}, lines=CXI, devices=GCDS)), image_record=IMAGE)
    assert record["device_kind"] == "rocm" and len(record["devices"]) == 8
    assert record["devices"][3] == {"rank": 3, "local_rank": 3, "hostname": "nid005001",
                                    "device": "cuda", "index": 3, "name": "AMD Instinct MI250X",
                                    "uuid": "GPU-3", "pci_bus_id": None, "visible": 8,
                                    "build": "rocm", "cores": "25-31"}
    assert record["stack"] == {"torch": "2.7.1+rocm6.3", "build": "rocm", "hip": "6.3.42131",
                               "driver": "6.8.5", "nccl": "2.21.5",
                               "devices": "AMD Instinct MI250X",
                               "runtime": f"{workload.launch.runtime.flavour} "
                                          f"{workload.launch.runtime.version}"}


def test_a_rank_that_refused_to_start_without_its_gpu_is_explained(data_gpu_plans) -> None:
    """The workload exits 4 before any report: the device reports still say why."""
    workload = data_gpu_plans(SmokeOptions(gpus=8))
    on_cpu = tuple(_gcd(r, device="cpu", visible=0, build="cpu", torch="2.9.1+cpu")
                   for r in range(8))
    found = verdict.Result(SMOKE, workload, _outcome(None, returncode=1, lines=(),
                                                     devices=on_cpu)).reasons
    assert found[0] == ("ranks 0, 1, 2, 3, 4, 5, 6, 7: torch 2.9.1+cpu is a CPU-only build: the "
                        "image was built for CPUs only")
    assert "ran on the CPU" in found[1] and len(found) == 2


def test_a_gpu_smoke_still_needs_its_transport(data_gpu_plans) -> None:
    workload = data_gpu_plans(SmokeOptions(gpus=8))
    report = {**SMOKE_REPORT, "backend": "nccl", "device": "cuda"}
    tcp = ("lumi-node:1:1 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.0.0.1<0>",)
    found = verdict.Result(SMOKE, workload, _outcome(report, lines=tcp, devices=GCDS)).reasons
    assert len(found) == 1 and "cxi" in found[0]
    # NCCL_NET forbids the fallback: RCCL stops at start-up, before any report.
    stopped = ("nid005001:1:1 [0] NCCL WARN Error: network AWS Libfabric not found.",)
    found = verdict.Result(SMOKE, workload, _outcome(None, returncode=1, lines=stopped,
                                                     devices=GCDS)).reasons
    assert found[0].startswith("OFI (aws-ofi-rccl) over cxi: NCCL/RCCL could not load the "
                               "network plugin 'AWS Libfabric' (NCCL_NET='AWS Libfabric' "
                               "forbids the TCP fallback)")


def test_a_cpu_site_runs_on_gloo(data_plans) -> None:
    result = verdict.Result(SMOKE, data_plans(SmokeOptions(gpus=2)), _outcome(
        {**SMOKE_REPORT, "backend": "gloo", "device": "cpu"}))
    assert result.reasons == []


def test_training_that_stopped_for_want_of_the_network_plugin_says_so(data_gpu_plans) -> None:
    workload = data_gpu_plans(TrainOptions(example="ddp", gpus=8))
    stopped = ("nid005001:1:1 [0] NCCL WARN Error: network AWS Libfabric not found.",)
    found = verdict.Result(TRAINS["ddp"], workload, _outcome(None, returncode=1, lines=stopped,
                                                            devices=GCDS)).reasons
    assert found == [
        "OFI (aws-ofi-rccl) over cxi: NCCL/RCCL could not load the network plugin 'AWS "
        "Libfabric' (NCCL_NET='AWS Libfabric' forbids the TCP fallback): usual causes: missing "
        "binds of the host's network libraries such as /opt/cray and libcxi.so.1, the plugin "
        "not on LD_LIBRARY_PATH, the plugin not installed in the image"]


# ------------------------------------------------------------------ batch runs, judged after
def test_the_collected_outcome_reads_what_the_ranks_left(data_plans, tmp_path) -> None:
    import json
    workload = replace(data_plans(SmokeOptions(gpus=2)), out_dir=tmp_path)
    (tmp_path / "rank-0.json").write_text(json.dumps({"rank": 0, "finished": True}))
    (tmp_path / "allreduce.json").write_text("{not json")
    outcome = collect(workload, returncode=0, timed_out=False, lines=(), seconds=1.0)
    assert outcome.missing_ranks == [1] and outcome.report is None
    assert verdict.Result(SMOKE, workload, outcome, given_reasons=("given",)).reasons[0] == \
        "given"


def test_ranks_of_another_arch_than_the_image_record_fail(data_plans) -> None:
    """An aarch64 image proven by x86_64 ranks (or the other way round) proves nothing."""
    import json
    workload = data_plans(SmokeOptions(gpus=2))
    record = workload.image.with_name(workload.image.name + ".json")
    record.parent.mkdir(parents=True, exist_ok=True)
    report = {"backend": "gloo", "nodes": 1, "results": [ROW], "finished": "x"}

    def reasons(*arches: str) -> list[str]:
        ranks = tuple({"rank": rank, "device": "cpu", "arch": arch}
                      for rank, arch in enumerate(arches))
        return [r for r in verdict.Result(SMOKE, workload, _outcome(report, devices=ranks)
                                          ).reasons if "recorded as" in r]

    record.write_text(json.dumps({"arch": "aarch64"}))
    assert reasons("aarch64", "aarch64") == []
    assert reasons("x86_64", "x86_64") == [
        f"ranks ran as x86_64 but {workload.image.name} is recorded as aarch64"]
    assert reasons("aarch64", "x86_64") == [
        f"ranks ran as aarch64, x86_64 but {workload.image.name} is recorded as aarch64"]
