"""Which network NCCL/RCCL really used, proven (or not) from its debug output."""

from __future__ import annotations

from containers.prove.transport import check_transport

CXI = "NET/OFI Selected [Pp]rovider is cxi"

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
