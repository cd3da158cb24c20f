"""The GPU gate, from the device report every rank writes before it joins the process group.
On a GPU site a PASS must rest on those reports, and no report at all fails."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Callable, Iterable, Sequence

from containers.inputs import names
from containers.inputs.names import Gpu


@dataclass(frozen=True)
class Expectation:
    """What the site's profile and the plan promise about the run's devices."""

    site: str
    gpu: Gpu
    ranks: int
    gpu_flag: str | None = None  # --nv / --rocm
    visible_var: str | None = None  # CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES
    rank_cores: tuple[frozenset[int], ...] = ()  # per local rank, when the workload pins

    @property
    def causes(self) -> str:
        """The usual reasons a container does not see its GPUs, for this site."""
        visible = self.visible_var or "the visible-devices variable"
        return (f"usual causes: the runtime's {self.gpu_flag or 'GPU'} flag missing, the "
                f"driver libraries not found in the container, {visible} empty or wrong, or "
                "an image built for the other GPU vendor or for CPUs only")


def _ranks(reports: Iterable[dict]) -> str:
    """``rank 3`` or ``ranks 0, 1``."""
    return _plural([r["rank"] for r in reports], "rank")


def _plural(items: Sequence[object], noun: str) -> str:
    return f"{noun}{'s' if len(items) != 1 else ''} {', '.join(map(str, items))}"


def _ident(report: dict) -> str:
    """A GPU's identity on its host: UUID, else PCI bus id, else what the rank was shown."""
    if report.get("uuid") or report.get("pci_bus_id"):
        return str(report.get("uuid") or report.get("pci_bus_id"))
    shown = ",".join(f"{k}={v}" for k, v in sorted((report.get("visible_env") or {}).items()))
    return f"{shown}#{report.get('index')}"


def _grouped(reports: Iterable[dict], key: Callable[[dict], str]) -> list[tuple[str, list[dict]]]:
    return [(name, list(group)) for name, group in groupby(sorted(reports, key=key), key=key)]


def _host(report: dict) -> str:
    return str(report.get("hostname"))


def reasons(expect: Expectation, reports: Sequence[dict], *, backend: str | None) -> list[str]:
    """The sanity gate on devices: one line per cause; empty when the GPUs were used."""
    found = core_reasons(expect, reports)
    if expect.gpu == Gpu.NONE:
        return found
    missing = sorted(set(range(expect.ranks)) - {r["rank"] for r in reports})
    if missing:
        found.append(f"{_plural(missing, 'rank')} wrote no device report, so their "
                     f"GPUs are not proven (device-<rank>.json missing: the rank did not start)")
    found += build_reasons(expect, reports)
    on_cpu = [r for r in reports if r.get("device") != "cuda"]
    for host, group in _grouped(on_cpu, _host):
        seen = sorted({int(r.get("visible") or 0) for r in group})
        shown = sorted({f"{k}={v!r}" for r in group
                        for k, v in (r.get("visible_env") or {}).items()})
        found.append(f"{_ranks(group)} on {host} ran on the CPU: torch saw "
                     f"{'/'.join(map(str, seen))} GPUs"
                     + (f" ({', '.join(shown)})" if shown else "") + f"; {expect.causes}")
    found += sharing_reasons(expect, [r for r in reports if r.get("device") == "cuda"])
    if backend is not None and backend != "nccl" and not on_cpu:
        found.append(f"the ranks ran with backend {backend}, not nccl "
                     f"({'RCCL' if expect.gpu == Gpu.ROCM else 'NCCL'}): the GPU collectives "
                     "were not tested")
    return found


def build_reasons(expect: Expectation, reports: Sequence[dict]) -> list[str]:
    """A CPU-only torch, or one built for the other vendor: the image cannot use these GPUs."""
    found = []
    for build, group in _grouped(reports, lambda r: str(r.get("build") or "unknown")):
        if build == expect.gpu:  # the torch build a site's GPU kind needs is its namesake
            continue
        torch = "/".join(sorted({str(r.get("torch")) for r in group}))
        if build == "cpu":
            what = f"torch {torch} is a CPU-only build: the image was built for CPUs only"
        elif build in (Gpu.CUDA, Gpu.ROCM):
            what = (f"torch {torch} is built for {Gpu(build).vendor}, but site {expect.site} has "
                    f"{Gpu(expect.gpu).vendor} GPUs: the image was built for the other GPU "
                    "vendor")
        else:
            what = f"the torch build is not reported ({build})"
        found.append(f"{_ranks(group)}: {what}")
    return found


def sharing_reasons(expect: Expectation, on_gpu: Sequence[dict]) -> list[str]:
    """Two ranks on one GPU, and fewer GPUs visible on a host than ranks run there."""
    found = []
    for host, group in _grouped(on_gpu, _host):
        by_gpu = _grouped(group, _ident)
        for ident, sharing in by_gpu:
            if len(sharing) > 1:
                found.append(f"{_ranks(sharing)} on {host} share one GPU "
                             f"({sharing[0].get('name') or 'GPU'} {ident}): each rank needs "
                             f"its own (is {expect.visible_var or 'the visible-devices variable'}"
                             " the same for every rank?)")
        visible = max(int(r.get("visible") or 0) for r in group)
        if len(by_gpu) < len(group) and visible < len(group):
            found.append(f"{host}: {visible} GPU{'s' if visible != 1 else ''} visible but "
                         f"{len(group)} ranks run there: the allocation or "
                         f"{expect.visible_var or 'the visible-devices variable'} gives fewer "
                         "GPUs than ranks per node")
    return found


def core_reasons(expect: Expectation, reports: Sequence[dict]) -> list[str]:
    """Ranks the site's CPU map pins that the kernel says run on other cores."""
    found = []
    for report in reports:
        local = report.get("local_rank")
        if not expect.rank_cores or not isinstance(local, int) or local >= len(expect.rank_cores):
            continue
        wanted = expect.rank_cores[local]
        try:
            got = names.parse_cpulist(str(report.get("cores") or ""))
        except ValueError:
            got = frozenset()
        if got != wanted:
            found.append(f"rank {report['rank']} on {report.get('hostname')} runs on cores "
                         f"{report.get('cores') or 'unreported'}, not its GPU's cores "
                         f"{names.format_cpulist(wanted)} (the site's cpu_bind map)")
    return found


def summary(reports: Sequence[dict]) -> list[dict]:
    """What ``verdict.json`` keeps per rank: enough to tell later what the run ran on."""
    keys = ("rank", "local_rank", "hostname", "device", "index", "name", "uuid", "pci_bus_id",
            "visible", "build", "cores")
    return [{key: report.get(key) for key in keys} for report in reports]


def device_kind(reports: Sequence[dict]) -> str | None:
    """The one device kind every rank ran on (``cuda``, ``rocm``, ``cpu``), else None."""
    kinds = {("cpu" if r.get("device") != "cuda" else str(r.get("build"))) for r in reports}
    return kinds.pop() if len(kinds) == 1 else None
