"""``invoke smoke``: the all_reduce benchmark across ranks inside an image, as a workload kind.

Its own sanity rules: no ``#wrong`` values, all sizes done, and, where the site declares its
network transport, NCCL/RCCL's debug output proves it was used (a silent TCP fallback fails).
Its performance is judged: out-of-place busbw at the reference size within the site's reference
tolerance. The benchmark writes ``allreduce.json``; the host adds ``verdict.json``, the PNG and a
perflog record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from containers.errors import UsageError
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.prove import names, verdict
from containers.prove.kind import Invocation, WorkloadKind, above_zero, at_least, one_of
from containers.prove.performance import Judgement, judge
from containers.prove.transport import TransportCheck, check_transport
from containers.report import plot_busbw

#: What makes NCCL/RCCL name its network transport in the output.
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True)
class SmokeOptions:
    """``invoke smoke``'s flags, checked when made (the benchmark's own rules, ``jobs/choices``)."""

    gpus: int
    sizes: str = "1K:128M"
    iters: int = 20
    warmup: int = 5
    timeout: float = 600.0
    dtype: str = "float32"
    fault: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        at_least("--gpus", self.gpus)
        at_least("--iters", self.iters)
        at_least("--warmup", self.warmup, 0)
        above_zero("--timeout", self.timeout)
        one_of("--dtype", self.dtype, names.DTYPES)
        try:
            names.check_sizes(self.sizes, self.dtype)
        except ValueError as exc:
            raise UsageError(f"--sizes {self.sizes}: {exc}", flag="--sizes") from exc

    @property
    def kind(self) -> "SmokeKind":
        return SMOKE


def _rows(result: verdict.Result) -> list[dict]:
    return list(result.report.get("results", [])) if result.report else []


def wrong_total(result: verdict.Result) -> int:
    """Wrong values over every size measured so far (the benchmark rewrites its JSON after
    each size, so a run that died midway still shows what it had checked)."""
    return sum(r[mode]["wrong"] or 0 for r in _rows(result) for mode in ("oop", "ip"))


def transport(result: verdict.Result) -> TransportCheck | None:
    site = result.plan.site
    if not site.transport_expect or not result.report or result.report.get("backend") != "nccl":
        return None  # gloo (CPU) runs have no NCCL transport to prove
    return check_transport(result.outcome.lines, expect=site.transport_expect,
                           name=site.transport_name or site.transport_expect)


class SmokeKind(WorkloadKind):
    name = "smoke"
    script = "allreduce.py"
    report_name = "allreduce.json"
    program = "the benchmark"
    logs_performance = True

    def launch(self, options: SmokeOptions, *, site: Site, settings: Settings,
               nodes: int) -> Invocation:
        args = ["--sizes", options.sizes, "--iters", str(options.iters),
                "--warmup", str(options.warmup), "--dtype", options.dtype,
                "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
        if options.fault:
            args += ["--fault", options.fault]
        return Invocation(args=args, env={**(DEBUG_ENV if site.transport_expect else {}),
                                      **options.extra_env})

    def failures(self, result: verdict.Result) -> list[str]:
        wrong = wrong_total(result)
        if not wrong:
            return []
        sizes = [str(r["bytes"]) for r in _rows(result) if r["oop"]["wrong"] or r["ip"]["wrong"]]
        return [f"{wrong} wrong values (all_reduce results differ from the exact sum) at sizes "
                f"{', '.join(sizes)} B"]

    def report_reasons(self, result: verdict.Result, *, settled: bool) -> list[str]:
        reasons = []
        if not result.report.get("finished") and not settled:
            reasons.append("the benchmark did not complete its sizes")
        proof = transport(result)
        if proof is not None and not proof.ok:
            reasons.append(proof.message)
        return reasons

    def performance(self, result: verdict.Result) -> Judgement:
        rows = _rows(result)
        reference = result.plan.site.reference(
            partition=result.partition, nodes=result.nodes,
            ranks_per_node=result.plan.ranks // result.nodes,
            measured={row["bytes"] for row in rows})
        return judge(reference, rows)

    def details(self, result: verdict.Result) -> dict:
        rows = _rows(result)
        proof = transport(result)
        largest = rows[-1] if rows else None
        return {
            "wrong_total": wrong_total(result),
            "transport": None if proof is None else {
                "ok": proof.ok, "message": proof.message, "evidence": proof.evidence},
            "results": [{"bytes": r["bytes"], "busbw_oop": r["oop"]["busbw"],
                         "busbw_ip": r["ip"]["busbw"],
                         "wrong": (r["oop"]["wrong"] or 0) + (r["ip"]["wrong"] or 0)}
                        for r in rows],
            "largest": None if largest is None else {
                "bytes": largest["bytes"], "busbw_oop": largest["oop"]["busbw"],
                "busbw_ip": largest["ip"]["busbw"]},
        }

    def write_reports(self, result: verdict.Result) -> list[Path]:
        if not _rows(result):
            return []
        return [plot_busbw(result.report, result.plan.out_dir / "allreduce.png",
                           title=f"all_reduce busbw: {result.plan.target.name}, "
                                 f"{result.plan.ranks} ranks, "
                                 f"{result.report.get('backend', '?')}")]


SMOKE = SmokeKind()

