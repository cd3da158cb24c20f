"""Which network NCCL/RCCL really used, read from its ``NCCL_DEBUG=INFO`` output.

A Slingshot site whose RCCL cannot load the aws-ofi plugin does not fail: it falls back to TCP
sockets and runs at a few GB/s. CSCS's regression checks therefore assert the plugin's line
(``NET/OFI Selected provider is cxi``); a site profile declares the line it expects and this module
tells a proven transport from a silent fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

#: Lines NCCL/RCCL print when they fall back to TCP sockets.
SOCKET_FALLBACK = (re.compile(r"NCCL INFO NET/Socket\b"),
                   re.compile(r"NCCL INFO Using network Socket"))
#: Any line naming the network NCCL chose.
NETWORK_LINE = re.compile(r"NCCL INFO (NET/\w+|Using network )")


@dataclass(frozen=True)
class TransportCheck:
    ok: bool
    message: str
    evidence: str | None = None


def check_transport(lines: Sequence[str], *, expect: str, name: str) -> TransportCheck:
    """``expect`` is a regex for the line that proves the intended transport was used."""
    wanted = re.compile(expect)
    for line in lines:
        if wanted.search(line):
            return TransportCheck(True, f"transport {name} confirmed", line.strip())
    fallback = next((line for line in lines if any(p.search(line) for p in SOCKET_FALLBACK)),
                    None)
    if fallback is not None:
        return TransportCheck(
            False, f"NCCL/RCCL fell back to TCP sockets instead of {name}: the network plugin "
                   "was not found or did not load (usual causes: missing binds of the host's "
                   "network libraries such as /opt/cray and libcxi.so.1, the plugin not on "
                   "LD_LIBRARY_PATH, or a wrong NCCL_SOCKET_IFNAME)", fallback.strip())
    if not any(NETWORK_LINE.search(line) for line in lines):
        return TransportCheck(False, f"no NCCL network line in the output, so {name} is not "
                                     "proven (NCCL_DEBUG=INFO must reach the ranks)")
    return TransportCheck(False, f"the NCCL output names a network but not {name} (expected a "
                                 f"line matching {expect!r})")
