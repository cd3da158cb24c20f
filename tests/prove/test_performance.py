"""The performance gate: a measured busbw against a reference, every state and the message."""

from __future__ import annotations

from containers.prove.performance import judge
from tests.fixtures.data import reference as ref


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
