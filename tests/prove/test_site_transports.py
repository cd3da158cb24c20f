"""Every multi-node GPU site proves its network: Derecho (aws-ofi-nccl over cxi), Puhti and Mahti
(NCCL's InfiniBand transport) declare the line their logs must show, their 2-node job scripts
force that network (NCCL_NET), a log without the line fails the verdict, and a GPU site that
declares no transport cannot pass a multi-node run at all (NOT-PROVEN)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from containers.batch import job as batch
from containers.errors import ConfigError
from tests.fixtures.data import load_targets
from containers.inputs.sites import Gpus, Transport, load_sites
from containers.prove import verdict
from containers.prove.registry import kind_of
from containers.prove.smoke import SMOKE
from containers.run.workload import Outcome
from tests.fixtures import ROOT
from tests.fixtures.data import with_plugin

LOGS = Path(__file__).parents[1] / "fixtures" / "transport_logs"
ROW = {"bytes": 16 << 20, "oop": {"busbw": 2.0, "wrong": 0}, "ip": {"busbw": 2.1, "wrong": 0}}
REPORT = {"backend": "nccl", "nodes": 2, "results": [ROW], "finished": "x"}
#: site -> (its target, the recorded log that proves its transport, NCCL_NET it forces)
SITES = {"derecho": ("derecho-cuda", "cxi-proven.log", "AWS Libfabric"),
         "puhti": ("puhti-cuda", "ib-proven.log", "IB"),
         "mahti": ("mahti-cuda", "ib-proven.log", "IB")}


def _job(name: str, settings, *, nodes: int = 2, site=None) -> batch.Job:
    target, _, _ = SITES.get(name, ("lumi-rocm", None, None))
    where = site or load_sites(ROOT)[name]
    request = batch.JobRequest(kind=kind_of("smoke"), nodes=nodes, account="proj1",
                               partition="gpumedium" if name == "mahti" else None)
    return batch.plan_job(batch.JobNeeds(load_targets(ROOT)[target], where, settings=settings,
                          host_arch="x86_64"), request, environ={})


def _result(name: str, settings, lines: tuple[str, ...], *, site=None,
            transport: str | None = None) -> verdict.Result:
    target, _, _ = SITES[name]
    where = site or load_sites(ROOT)[name]
    request = batch.JobRequest(kind=kind_of("smoke"), nodes=2, account="proj1",
                               partition="gpumedium" if name == "mahti" else None,
                               transport=transport)
    run = batch.job_run(load_targets(ROOT)[target], where, settings=settings, request=request)
    outcome = Outcome(returncode=0, timed_out=False, missing_ranks=[], seconds=1.0,
                      report=REPORT, lines=lines)
    return verdict.Result(SMOKE, run.workload, outcome, partition=request.partition)


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_two_node_script_forces_the_sites_network(name: str, data_settings) -> None:
    site = load_sites(ROOT)[name]
    if site.transport.host_stack:  # Derecho: refused until its profile binds the host's stack
        with pytest.raises(ConfigError, match="needs the host's network plugin"):
            _job(name, data_settings)
        site = with_plugin(site, "/opt/aws-ofi-nccl/lib")
    job = _job(name, data_settings, site=site)
    _, _, net = SITES[name]
    assert f"NCCL_NET={net}" in job.text or f"NCCL_NET='{net}'" in job.text, job.text
    checked = subprocess.run(["bash", "-n"], input=job.text, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    # one node is neither forced nor proven (NVLink; no network plugin to load)
    assert "NCCL_NET" not in _job(name, data_settings, nodes=1).text


@pytest.mark.parametrize("name", sorted(SITES))
def test_a_log_without_the_proof_line_fails_the_verdict(name: str, data_settings) -> None:
    _, proof, _ = SITES[name]
    proven = _result(name, data_settings, tuple(LOGS.joinpath(proof).read_text().splitlines()))
    assert proven.transport is not None and proven.transport.ok, proven.transport
    assert not [r for r in proven.reasons if "transport" in r or "TCP" in r or "NCCL" in r]
    fallback = _result(name, data_settings,
                       tuple(LOGS.joinpath("socket-fallback.log").read_text().splitlines()))
    assert fallback.transport is not None and not fallback.transport.ok
    assert fallback.transport.message in fallback.reasons
    other = "ib-proven.log" if proof == "cxi-proven.log" else "cxi-proven.log"
    wrong = _result(name, data_settings, tuple(LOGS.joinpath(other).read_text().splitlines()))
    assert not wrong.transport.ok and wrong.transport.message in wrong.reasons


def test_a_gpu_site_without_a_declared_transport_is_not_proven(data_settings) -> None:
    bare = load_sites(ROOT)["puhti"].model_copy(update={"transport": Transport()})
    lines = tuple(LOGS.joinpath("ib-proven.log").read_text().splitlines())
    result = _result("puhti", data_settings, lines, site=bare)
    assert [r for r in result.reasons if r.startswith("NOT-PROVEN: site puhti declares no "
                                                      "transport")], result.reasons
    assert not result.ok
    # one node needs no network, and a CPU site has no NCCL network to prove
    one = replace(result.plan, launch=replace(result.plan.launch, nodes=1))
    assert not verdict.network_reasons(replace(result, plan=one))
    cpu = bare.model_copy(update={"gpus": Gpus()})
    assert not verdict.network_reasons(replace(result, plan=replace(result.plan, site=cpu)))


def test_sockets_chosen_prove_sockets_and_the_verdict_names_them_degraded(data_settings) -> None:
    """A Derecho job that opted into TCP sockets (--transport socket; no plugin for
    containers there) passes on a log that shows NCCL used them, and its verdict says, in the
    record, the transport line and the last line, that the transport was degraded; a log of
    another network does not prove the sockets it asked for."""
    lines = tuple(LOGS.joinpath("socket-fallback.log").read_text().splitlines())
    result = _result("derecho", data_settings, lines, transport="socket")
    assert result.transport is not None and result.transport.ok, result.transport
    assert not [r for r in result.reasons if "transport" in r or "TCP" in r or "NCCL" in r]
    # (no device reports here: the record is shown as a run that passed otherwise)
    record = {**verdict.record(result, image_record={}), "passed": True, "reasons": []}
    assert record["degraded"].startswith("TCP sockets instead of OFI (aws-ofi-nccl) over cxi")
    shown = verdict.gate_lines(record)
    assert shown[0].startswith("transport:   DEGRADED: transport TCP sockets (degraded: "
                               "--transport socket, not OFI (aws-ofi-nccl) over cxi) confirmed; "
                               "TCP sockets instead of"), shown
    assert shown[-1] == "verdict: PASS (degraded transport: see the transport line)"
    other = _result("derecho", data_settings,
                    tuple(LOGS.joinpath("cxi-proven.log").read_text().splitlines()),
                    transport="socket")
    assert not other.transport.ok and other.transport.message in other.reasons
    # the site's own transport: no degraded mark
    plugin = with_plugin(load_sites(ROOT)["derecho"], "/opt/aws-ofi-nccl/lib")
    cxi = _result("derecho", data_settings,
                  tuple(LOGS.joinpath("cxi-proven.log").read_text().splitlines()), site=plugin)
    assert verdict.record(cxi, image_record={})["degraded"] is None
