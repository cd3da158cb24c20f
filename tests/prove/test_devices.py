"""The device gate on recorded rank reports: what a GPU site's PASS must rest on."""

from __future__ import annotations

import json

import pytest

from containers.inputs import names
from containers.prove import devices
from tests.fixtures import ROOT

RECORDED = ROOT / "tests" / "fixtures" / "devices"


def _mi250x(rank: int, *, host: str = "nid005001", **fields) -> dict:
    """A LUMI rank as the workload reports it (ROCm torch names its GPUs cuda)."""
    return {"rank": rank, "local_rank": rank % 8, "hostname": host, "pid": 1000 + rank,
            "device": "cuda", "index": rank % 8, "name": "AMD Instinct MI250X",
            "uuid": f"GPU-00{rank % 8}", "pci_bus_id": f"0000:{0xc1 + rank % 8:02x}:00.0",
            "visible": 8, "visible_env": {"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
            "build": "rocm", "torch": "2.7.1+rocm6.3", "cuda": None, "hip": "6.3.42131",
            "nccl": "2.21.5", "driver": "6.8.5", "cores": "49-55", "pinned": False,
            **fields}


LUMI = devices.Expectation(site="lumi", gpu="rocm", ranks=2, gpu_flag="--rocm",
                           visible_var="ROCR_VISIBLE_DEVICES")
OLIVIA = devices.Expectation(site="olivia", gpu="cuda", ranks=2, gpu_flag="--nv",
                             visible_var="CUDA_VISIBLE_DEVICES")


def test_two_ranks_on_their_own_gcds_pass() -> None:
    assert devices.reasons(LUMI, [_mi250x(0), _mi250x(1)], backend="nccl") == []
    assert devices.device_kind([_mi250x(0), _mi250x(1)]) == "rocm"


def test_ranks_on_the_cpu_fail_naming_the_usual_causes() -> None:
    cpu = {"device": "cpu", "index": None, "name": None, "uuid": None, "pci_bus_id": None,
           "visible": 0, "visible_env": {"ROCR_VISIBLE_DEVICES": ""}}
    found = devices.reasons(LUMI, [_mi250x(0, **cpu), _mi250x(1, **cpu)], backend=None)
    assert found == [
        "ranks 0, 1 on nid005001 ran on the CPU: torch saw 0 GPUs (ROCR_VISIBLE_DEVICES=''); "
        "usual causes: the runtime's --rocm flag missing, the driver libraries not found in "
        "the container, ROCR_VISIBLE_DEVICES empty or wrong, or an image built for the other "
        "GPU vendor or for CPUs only"]
    assert devices.device_kind([_mi250x(0, **cpu)]) == "cpu"


def test_a_cpu_only_torch_fails_as_a_build_problem() -> None:
    cpu_build = {"build": "cpu", "torch": "2.9.1+cpu", "hip": None, "device": "cpu",
                 "visible": 0}
    found = devices.reasons(OLIVIA, [_mi250x(0, **cpu_build), _mi250x(1, **cpu_build)],
                            backend="gloo")
    assert found[0] == ("ranks 0, 1: torch 2.9.1+cpu is a CPU-only build: the image was built "
                        "for CPUs only")
    assert found[1].startswith("ranks 0, 1 on nid005001 ran on the CPU")
    assert len(found) == 2


def test_the_other_vendors_torch_fails() -> None:
    found = devices.reasons(OLIVIA, [_mi250x(0), _mi250x(1)], backend="nccl")
    assert found == ["ranks 0, 1: torch 2.7.1+rocm6.3 is built for AMD (ROCm), but site olivia "
                     "has NVIDIA (CUDA) GPUs: the image was built for the other GPU vendor"]


def test_two_ranks_on_one_gpu_fail_and_so_do_too_few_visible_gpus() -> None:
    one = {"uuid": "GPU-000", "pci_bus_id": "0000:c1:00.0", "index": 0, "visible": 1,
           "visible_env": {"ROCR_VISIBLE_DEVICES": "0"}}
    found = devices.reasons(LUMI, [_mi250x(0, **one), _mi250x(1, **one)], backend="nccl")
    assert found == [
        "ranks 0, 1 on nid005001 share one GPU (AMD Instinct MI250X GPU-000): each rank needs "
        "its own (is ROCR_VISIBLE_DEVICES the same for every rank?)",
        "nid005001: 1 GPU visible but 2 ranks run there: the allocation or "
        "ROCR_VISIBLE_DEVICES gives fewer GPUs than ranks per node"]


def test_one_device_per_task_is_not_sharing() -> None:
    """srun per GPU: each task sees one device, numbered 0, through its own variable value;
    without UUIDs the visible-devices values still tell the GPUs apart."""
    tasks = [_mi250x(r, index=0, visible=1, uuid=None, pci_bus_id=None,
                     visible_env={"ROCR_VISIBLE_DEVICES": str(r)}) for r in range(2)]
    assert devices.reasons(LUMI, tasks, backend="nccl") == []
    same = [{**t, "visible_env": {"ROCR_VISIBLE_DEVICES": "0"}} for t in tasks]
    assert "share one GPU" in devices.reasons(LUMI, same, backend="nccl")[0]


def test_the_same_gpu_names_on_two_hosts_are_two_gpus() -> None:
    ranks = [_mi250x(0, host="a"), _mi250x(1, host="b", local_rank=0, index=0, uuid="GPU-000",
                                                  pci_bus_id="0000:c1:00.0")]
    assert devices.reasons(LUMI, ranks, backend="nccl") == []


def test_silence_is_no_proof() -> None:
    assert devices.reasons(LUMI, [], backend="nccl") == [
        "ranks 0, 1 wrote no device report, so their GPUs are not proven (device-<rank>.json "
        "missing: the rank did not start)"]
    assert devices.reasons(LUMI, [_mi250x(0)], backend="nccl")[0].startswith(
        "rank 1 wrote no device report")


def test_gloo_on_gpus_fails() -> None:
    found = devices.reasons(LUMI, [_mi250x(0), _mi250x(1)], backend="gloo")
    assert found == ["the ranks ran with backend gloo, not nccl (RCCL): the GPU collectives "
                     "were not tested"]


def test_a_cpu_site_has_no_gpu_rules_but_pinned_cores_are_checked() -> None:
    laptop = devices.Expectation(site="local", gpu="none", ranks=2,
                                 rank_cores=(frozenset({0}), frozenset({1})))
    ranks = [{"rank": r, "local_rank": r, "hostname": "h", "device": "cpu", "cores": str(r)}
             for r in range(2)]
    assert devices.reasons(laptop, ranks, backend="gloo") == []
    ranks[1]["cores"] = "0-1"
    assert devices.reasons(laptop, ranks, backend="gloo") == [
        "rank 1 on h runs on cores 0-1, not its GPU's cores 1 (the site's cpu_bind map)"]
    assert devices.reasons(laptop, [], backend="gloo") == []


@pytest.mark.parametrize("path", sorted(RECORDED.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_reports_from_real_runs(path) -> None:
    """Reports recorded on real machines (the name says what was run): a GPU run passes the
    gate of its GPU kind and fails the other vendor's; a run that lost its GPU fails."""
    recorded = json.loads(path.read_text())
    cores = tuple(names.parse_cpulist(c) for c in recorded["expect"].pop("rank_cores", []))
    reports = recorded["reports"]
    expect = devices.Expectation(**recorded["expect"], rank_cores=cores)
    found = devices.reasons(expect, reports, backend=recorded["backend"])
    assert (found == []) is recorded["passes"], recorded["what"]
    assert found == recorded["reasons"]
