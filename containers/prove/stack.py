"""The software stack a run ran on, and what changed between two runs of one image. A site's
busbw can drop with the same image when the driver or network stack is upgraded under it."""

from __future__ import annotations

from typing import Mapping, Sequence

from containers.host.runtime import Runtime
from containers.prove.transport import stack_from_log

#: The report keys that make the stack, and the names the stack gives them.
FROM_REPORTS = (("torch", "torch"), ("build", "build"), ("cuda", "cuda"), ("hip", "hip"),
                ("driver", "driver"), ("nccl", "nccl"), ("name", "devices"))
#: What a change of is worth marking in the history (not the device list of a bigger run).
COMPARED = ("torch", "build", "cuda", "hip", "driver", "nccl", "nccl_log", "net_plugin",
            "libfabric", "network", "runtime")


def of_run(reports: Sequence[Mapping], lines: Sequence[str], *, runtime: Runtime) -> dict:
    """The stack of one run; values that differ between ranks are joined with `` / ``."""
    found: dict[str, str] = {}
    for key, name in FROM_REPORTS:
        values = sorted({str(r[key]) for r in reports if r.get(key) not in (None, "")})
        if values:
            found[name] = " / ".join(values)
    found.update(stack_from_log(lines))
    found["runtime"] = f"{runtime.flavour} {runtime.version}"
    return found


def changes(before: Mapping | None, after: Mapping | None) -> list[str]:
    """``driver 550.54 -> 560.35`` per compared part that differs; none without a stack."""
    if not before or not after:
        return []
    return [f"{key} {before.get(key) or '-'} -> {after.get(key) or '-'}" for key in COMPARED
            if before.get(key) != after.get(key)]
