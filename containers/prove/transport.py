"""Which network NCCL/RCCL really used (read from its ``NCCL_DEBUG=INFO`` output), and the
software stack a run ran on. A Slingshot site whose RCCL cannot load the aws-ofi plugin falls
back to TCP sockets silently, so a profile declares the line it expects; busbw can drop with the
same image when the driver or network stack is upgraded, so every verdict names its stack."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # CHOICES is a flag's choices when the command line starts (invoke --list)
    from containers.host.runtime import Runtime
    from containers.inputs.sites import Transport

#: Lines NCCL/RCCL print when they fall back to TCP sockets.
SOCKET_FALLBACK = re.compile(r"NCCL INFO (NET/Socket\b|Using network Socket)")
#: Any line naming the network NCCL chose.
NETWORK_LINE = re.compile(r"NCCL INFO (NET/\w+|Using network )")
#: The errors NCCL/RCCL stop with when NCCL_NET names a network they cannot load: RCCL and older
#: NCCL (net.cc: ``Error: network %s not found.``, also in PyTorch's "Last error"), newer NCCL
#: (plugin/net.cc: ``Failed to initialize any NET plugin``).
PLUGIN_FAILED = re.compile(r"\bError: network (?P<net>.*?) ?not found\b"
                           r"|\bFailed to initialize any NET plugin\b")
#: NCCL/RCCL's own lines when the network plugin library did not load, across versions; good
#: runs print them too (one of several names tried), so they count only where NCCL_NET is set
#: and the expected line is missing.
PLUGIN_NOT_LOADED = re.compile(r"NET/Plugin ?: (Could not find\b|No plugin found\b|dlerror=|"
                               r"Plugin load returned\b|Most recent plugin load returned\b|"
                               r"\S*[nr]ccl-net\S*\.so: )")
#: The library the dynamic loader could not open, from a plugin line.
LOADER_MISSING = re.compile(r"NET/Plugin ?: .*?([\w.+-]+\.so[\w.]*): cannot open shared object")
#: What usually keeps the aws-ofi plugin from loading in a container.
PLUGIN_CAUSES = ("missing binds of the host's network libraries such as /opt/cray and "
                 "libcxi.so.1, the plugin not on LD_LIBRARY_PATH, the plugin not installed in "
                 "the image")

#: ``stack_from_log``'s patterns: key -> regex whose first group is the value.
STACK = {
    # newer aws-ofi-nccl "Initializing aws-ofi-nccl 1.14.2", older ones and aws-ofi-rccl "Using …"
    "net_plugin": re.compile(r"NET/OFI (?:Initializing|Using) (aws-ofi-[nr]ccl \S+)"),
    "libfabric": re.compile(r"NET/OFI Using Libfabric version (\S+)"),
    # "NCCL version 2.21.5+cuda12.4", "RCCL version 2.20.5+hip6.2 HEAD:…",
    # "RCCL version : 2.21.5-develop:…" (the branch and commit are left out)
    "nccl_log": re.compile(r"\b[NR]CCL version\s*:?\s*(\d+\.\d+\.\d+(?:\+[\w.]+)?)"),
    "network": re.compile(r"NCCL INFO Using network (\S.*?)\s*$"),
}
#: The network from NCCL's own transport lines, where no ``Using network`` line came.
NETWORK_FALLBACK = re.compile(r"NCCL INFO NET/(IB|Socket)\b")
#: The report keys that make the stack, and the names the stack gives them.
FROM_REPORTS = (("torch", "torch"), ("build", "build"), ("cuda", "cuda"), ("hip", "hip"),
                ("driver", "driver"), ("nccl", "nccl"), ("name", "devices"))
#: What a change of is worth marking in the history (not the device list of a bigger run).
COMPARED = ("torch", "build", "cuda", "hip", "driver", "nccl", "nccl_log", "net_plugin",
            "libfabric", "network", "runtime")


#: ``invoke job --transport``: the transports a job may take instead of its site's.
CHOICES = ("socket",)
#: NCCL's own TCP sockets: NCCL_NET names them ("Socket"), so NCCL neither loads a plugin nor
#: tries another network, and its debug output says so ("NCCL INFO Using network Socket").
SOCKET_NET = "Socket"
SOCKET_EXPECT = r"NCCL INFO Using network Socket\b"


def sockets(site_transport: Transport) -> Transport:
    """The transport of a job that opted into TCP sockets instead of ``site_transport``."""
    from containers.inputs.sites import Transport  # the model: here, not at the command's start

    if site_transport.degraded:
        return site_transport
    name = site_transport.name or "the site's network"
    chosen = Transport(name=f"TCP sockets (degraded: --transport socket, not {name})",
                       expect=SOCKET_EXPECT, net=SOCKET_NET,
                       from_nodes=site_transport.from_nodes)
    chosen._degraded = (f"TCP sockets instead of {name} (invoke job --transport socket): "
                        "slower, and no proof of the site's network")
    return chosen


@dataclass(frozen=True)
class TransportCheck:
    ok: bool
    message: str
    evidence: str | None = None


def _plugin_failure(lines: Sequence[str], line: str, *, name: str,
                    net: str | None) -> TransportCheck:
    missing = next((m.group(1) for m in map(LOADER_MISSING.search, lines) if m), None)
    loader = f"; the loader could not open {missing}" if missing else ""
    what = (f"the network plugin '{net}' (NCCL_NET='{net}' forbids the TCP fallback)" if net
            else "any network plugin (an NCCL_NET setting forbids the TCP fallback)")
    return TransportCheck(False, f"{name}: NCCL/RCCL could not load {what}{loader}: usual "
                                 f"causes: {PLUGIN_CAUSES}", line.strip())


def check_transport(lines: Sequence[str], *, expect: str, name: str,
                    net: str | None = None) -> TransportCheck:
    """The transport's proof (``expect``); NCCL/RCCL stopping for want of it wins."""
    for line in lines:
        found = PLUGIN_FAILED.search(line)
        if found:
            named = (found.group("net") or "").strip() or None
            return _plugin_failure(lines, line, name=name, net=net or named)
    wanted = re.compile(expect)
    for line in lines:
        if wanted.search(line):
            return TransportCheck(True, f"transport {name} confirmed", line.strip())
    if net:
        unloaded = next((line for line in lines if PLUGIN_NOT_LOADED.search(line)), None)
        if unloaded is not None:
            return _plugin_failure(lines, unloaded, name=name, net=net)
    fallback = next((line for line in lines if SOCKET_FALLBACK.search(line)), None)
    if fallback is not None:
        return TransportCheck(
            False, f"NCCL/RCCL fell back to TCP sockets instead of {name}: the network plugin "
                   f"was not found or did not load (usual causes: {PLUGIN_CAUSES}, or a wrong "
                   "NCCL_SOCKET_IFNAME)", fallback.strip())
    if not any(NETWORK_LINE.search(line) for line in lines):
        return TransportCheck(False, f"no NCCL network line in the output, so {name} is not "
                                     "proven (NCCL_DEBUG=INFO must reach the ranks)")
    return TransportCheck(False, f"the NCCL output names a network but not {name} (expected a "
                                 f"line matching {expect!r})")


def stack_from_log(lines: Sequence[str]) -> dict[str, str]:
    """The communication stack NCCL/RCCL's debug lines show (warnings skipped)."""
    stack: dict[str, str] = {}
    for line in lines:
        if "NCCL WARN" in line:
            continue
        for key, pattern in STACK.items():
            if key not in stack:
                found = pattern.search(line)
                if found:
                    stack[key] = found.group(1)
    if "network" not in stack:
        found = next((m for m in map(NETWORK_FALLBACK.search, lines) if m), None)
        if found:
            stack["network"] = found.group(1)
    return stack


def run_stack(reports: Sequence[Mapping], lines: Sequence[str], *, runtime: Runtime) -> dict:
    """The software stack of one run; values that differ between ranks are joined with `` / ``."""
    found: dict[str, str] = {}
    for key, name in FROM_REPORTS:
        values = sorted({str(r[key]) for r in reports if r.get(key) not in (None, "")})
        if values:
            found[name] = " / ".join(values)
    found.update(stack_from_log(lines))
    found["runtime"] = f"{runtime.flavour} {runtime.version}"
    return found


def stack_diff(before: Mapping | None, after: Mapping | None) -> list[str]:
    """``driver 550.54 -> 560.35`` per compared part that differs; none without a stack."""
    if not before or not after:
        return []
    return [f"{key} {before.get(key) or '-'} -> {after.get(key) or '-'}" for key in COMPARED
            if before.get(key) != after.get(key)]
