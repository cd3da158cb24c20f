"""Reference arithmetic and selection, transport proof from NCCL/RCCL output, perflog history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.references import Reference, judge, parse_reference, select
from containers.inputs.yamlsource import load_yaml_text
from containers.prove import perflog
from containers.prove.transport import check_transport

CXI = "NET/OFI Selected [Pp]rovider is cxi"


def ref(**kw) -> Reference:
    base = dict(partition="*", nodes=1, ranks_per_node=8, bytes=128 << 20, value=125.0,
                lower=-0.05, upper=None, unit="GB/s", source="test")
    return Reference(**{**base, **kw})


def rows(busbw: float, size: int = 128 << 20) -> list[dict]:
    return [{"bytes": size, "oop": {"busbw": busbw, "wrong": 0}, "ip": {"busbw": busbw,
                                                                        "wrong": 0}}]


def test_judge_states_and_shortfall() -> None:
    assert ref().bounds == (118.75, None)
    assert judge(ref(), rows(130.0)).state == "pass"
    low = judge(ref(), rows(100.0))
    assert low.state == "fail" and low.failed and low.measured == 100.0
    assert low.message == ("busbw 100 GB/s is below the reference 125 GB/s (>= 119 GB/s) at "
                           "134217728 B: 20.0% short of 125")
    capped = judge(ref(upper=0.1), rows(140.0))
    assert capped.state == "fail" and "above" in capped.message
    assert judge(ref(xfail="RCCL 2.18 regression"), rows(100.0)).state == "xfail"
    xpass = judge(ref(xfail="RCCL 2.18 regression"), rows(130.0))
    assert xpass.state == "xpass" and xpass.failed
    assert judge(ref(), rows(130.0, size=1 << 20)).state == "not-measured"
    assert judge(None, rows(1.0)).state == "no-reference" and not judge(None, []).failed


def test_select_prefers_specific_partition_and_model() -> None:
    refs = [ref(value=100.0), ref(partition="standard-g", value=125.0),
            ref(partition="standard-g", gpu_model="MI300A", value=300.0), ref(nodes=2, value=85.0)]
    assert select(refs, partition="standard-g", nodes=1, ranks_per_node=8).value == 125.0
    assert select(refs, partition="dev-g", nodes=1, ranks_per_node=8).value == 100.0
    assert select(refs, partition="standard-g", nodes=1, ranks_per_node=8,
                  gpu_model="MI300A").value == 300.0
    assert select(refs, partition=None, nodes=2, ranks_per_node=8).value == 85.0
    assert select(refs, partition=None, nodes=1, ranks_per_node=4) is None
    # Equally specific references at several sizes: the largest size the run measured.
    sizes = [ref(bytes=16 << 20, value=1.0), ref(bytes=128 << 20, value=2.0)]
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8).bytes == 128 << 20
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8,
                  measured={1 << 20, 16 << 20}).bytes == 16 << 20
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8,
                  measured={16 << 20, 128 << 20}).bytes == 128 << 20


@pytest.mark.parametrize("spec, message", [
    ("[125.0, 0.05, null, GB/s]", r"lower tolerance 0.05 must be a fraction in \[-1, 0\]"),
    ("[125.0, -1.5, null, GB/s]", r"lower tolerance -1.5"),
    ("[125.0, -0.05, -0.1, GB/s]", "upper tolerance -0.1 is negative"),
    ("[0, -0.05, null, GB/s]", "value must be a positive number"),
    ("[125.0, -0.05, null]", r"must be \[value, lower, upper, unit\]"),
    ("[fast, -0.05, null, GB/s]", "value must be a number or null"),
])
def test_invalid_references_rejected_with_line(spec, message) -> None:
    data = load_yaml_text(f"- nodes: 1\n  ranks_per_node: 8\n  bytes: 1024\n  busbw: {spec}\n"
                          "  source: x\n", path=Path("sites/x.yaml"))
    with pytest.raises(ConfigError, match=r"sites/x.yaml:4: references\[0\].busbw: " + message):
        parse_reference(data[0], path=Path("sites/x.yaml"), index=0)


# NCCL/RCCL debug output as the LUMI and Olivia documentation show it.
GOOD_RCCL = """nid005001:12345:12345 [0] NCCL INFO Bootstrap : Using hsn0:10.253.6.1<0>
nid005001:12345:12345 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
nid005001:12345:12345 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid005001:12345:12345 [0] NCCL INFO Using network AWS Libfabric
""".splitlines()
TCP_FALLBACK = """nid005001:12345:12345 [0] NCCL INFO Bootstrap : Using hsn0:10.253.6.1<0>
nid005001:12345:12345 [0] NCCL INFO NET/Plugin: Could not find: librccl-net.so. Using internal network plugin.
nid005001:12345:12345 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.253.6.1<0> [1]hsn1:10.253.6.2<0>
nid005001:12345:12345 [0] NCCL INFO Using network Socket
""".splitlines()


def test_transport_proven_fallback_and_missing() -> None:
    good = check_transport(GOOD_RCCL, expect=CXI, name="OFI over cxi")
    assert good.ok and "Selected Provider is cxi" in good.evidence
    fallback = check_transport(TCP_FALLBACK, expect=CXI, name="OFI over cxi")
    assert not fallback.ok and "fell back to TCP sockets instead of OFI over cxi" in \
        fallback.message
    assert "/opt/cray" in fallback.message and "NCCL_SOCKET_IFNAME" in fallback.message
    assert fallback.evidence.endswith("NCCL INFO NET/Socket : Using [0]hsn0:10.253.6.1<0> "
                                      "[1]hsn1:10.253.6.2<0>")
    silent = check_transport(["rank 0 ok"], expect=CXI, name="OFI over cxi")
    assert not silent.ok and "NCCL_DEBUG=INFO" in silent.message
    other = check_transport(["x NCCL INFO Using network IB"], expect=CXI, name="OFI over cxi")
    assert not other.ok and "names a network but not OFI over cxi" in other.message


def _record(date: str, inputs_hash: str, busbw: float, passed: bool = True) -> dict:
    return {"date": date, "site": "lumi", "partition": "standard-g", "target": "lumi-rocm",
            "inputs_hash": inputs_hash, "build_date": date, "ranks": 8, "nodes": 1,
            "passed": passed, "results": [{"bytes": 1 << 20, "busbw_oop": 50.0},
                                          {"bytes": 128 << 20, "busbw_oop": busbw}],
            "performance": {"state": "pass", "reference": {
                "bytes": 128 << 20, "value": 125.0, "unit": "GB/s"}}}


def test_perflog_accumulates_and_renders(tmp_path: Path) -> None:
    for record in (_record("2026-11-01T10:00:00Z", "a" * 64, 131.0),
                   _record("2026-11-02T10:00:00Z", "a" * 64, 129.5),
                   _record("2026-11-03T10:00:00Z", "b" * 64, 97.0, passed=False)):
        path = perflog.append(tmp_path, record)
    assert path == tmp_path / "lumi" / "standard-g" / "allreduce.jsonl"
    assert len(path.read_text().splitlines()) == 3
    (tmp_path / "lumi" / "standard-g" / "allreduce.jsonl").open("a").write("not json\n")
    records = perflog.read(tmp_path, target="lumi-rocm")
    assert [r["date"][:10] for r in records] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert perflog.read(tmp_path, target="cpu") == []
    table = perflog.history_rows(records)
    assert [row[7] for row in table] == ["131.000", "129.500", "97.000"]
    assert table[2][3] == "lumi-rocm bbbbbbbbbbbb (2026-11-03)" and table[2][9] == "FAIL"
    png = perflog.plot_history(records, tmp_path / "h.png", title="t")
    assert png.stat().st_size > 10_000
    assert json.loads(path.read_text().splitlines()[0])["inputs_hash"] == "a" * 64
