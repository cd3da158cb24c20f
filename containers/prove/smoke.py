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

from containers.inputs import flags, names
from containers.inputs.settings import Settings
from containers.inputs.sites import Site
from containers.prove import verdict
from containers.prove.kind import Invocation, WorkloadKind
from containers.prove.performance import Judgement, judge
from containers.report import plot_busbw


@dataclass(frozen=True)
class SmokeOptions:
    """``invoke smoke``'s flags, checked when made (the benchmark's own rules, ``jobs/choices``)."""

    gpus: int
    sizes: str = "1K:128M"
    iters: int = 20
    warmup: int = 5
    timeout: float = 600.0
    dtype: str = "float32"
    cycles: int = 1
    fault: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Text (from the command line) or numbers: each through its option type."""
        flags.settle(self, gpus=flags.POSITIVE_INT("--gpus", self.gpus),
                     iters=flags.POSITIVE_INT("--iters", self.iters),
                     warmup=flags.NON_NEGATIVE_INT("--warmup", self.warmup),
                     cycles=flags.POSITIVE_INT("--cycles", self.cycles),
                     timeout=flags.SECONDS("--timeout", self.timeout),
                     dtype=flags.DTYPE("--dtype", self.dtype))
        flags.sizes("--sizes", self.sizes, self.dtype)

    @property
    def largest_size(self) -> int:
        """The largest message in bytes (the benchmark holds about three buffers of it)."""
        return max(names.check_sizes(self.sizes, self.dtype))

    @property
    def kind(self) -> "SmokeKind":
        return SMOKE


def _rows(result: verdict.Result) -> list[dict]:
    return list(result.report.get("results", [])) if result.report else []


def _cycles(result: verdict.Result) -> int:
    return int((result.report or {}).get("cycles") or 1)


def wrong_total(result: verdict.Result) -> int:
    """Wrong values over every size measured so far (the benchmark rewrites its JSON after
    each size, so a run that died midway still shows what it had checked)."""
    return sum(r[mode]["wrong"] or 0 for r in _rows(result) for mode in ("oop", "ip"))


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
                "--cycles", str(options.cycles),
                "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
        if options.fault:
            args += ["--fault", options.fault]
        return Invocation(args=args, env=dict(options.extra_env))

    def failures(self, result: verdict.Result) -> list[str]:
        found = verdict.startup_failure(result)
        wrong = wrong_total(result)
        if not wrong:
            return found
        soak = _cycles(result) > 1
        sizes = [f"{r['bytes']} B" + (f" (cycle{'s' if len(r['wrong_cycles']) > 1 else ''} "
                                      f"{', '.join(map(str, r['wrong_cycles']))})"
                                      if soak and r.get("wrong_cycles") else "")
                 for r in _rows(result) if r["oop"]["wrong"] or r["ip"]["wrong"]]
        return found + [
            f"{wrong} wrong values (all_reduce results differ from the exact sum) at sizes "
            f"{', '.join(sizes)}"
            + (f" in a soak of {_cycles(result)} cycles" if _cycles(result) > 1 else "")]

    def report_reasons(self, result: verdict.Result, *, settled: bool) -> list[str]:
        reasons = []
        if not result.report.get("finished") and not settled:
            reasons.append("the benchmark did not complete its sizes")
        proof = result.transport
        if proof is not None and not proof.ok:
            reasons.append(proof.message)
        return reasons

    def performance(self, result: verdict.Result) -> Judgement:
        if result.plan.ranks == 1:
            return Judgement("not-judged", "1 rank: no data crosses a link, so there is no "
                             "bandwidth to judge")
        rows = _rows(result)
        reference = result.plan.site.reference(
            partition=result.partition, nodes=result.nodes,
            ranks_per_node=result.plan.ranks // result.nodes,
            measured={row["bytes"] for row in rows})
        return judge(reference, rows)

    def details(self, result: verdict.Result) -> dict:
        rows = _rows(result)
        proof = result.transport
        largest = rows[-1] if rows else None
        return {
            "wrong_total": wrong_total(result),
            "cycles": _cycles(result),
            "cycles_done": (result.report or {}).get("cycles_done"),
            "transport": None if proof is None else {
                "ok": proof.ok, "message": proof.message, "evidence": proof.evidence},
            "results": [{"bytes": r["bytes"], "busbw_oop": r["oop"]["busbw"],
                         "busbw_ip": r["ip"]["busbw"],
                         "wrong": (r["oop"]["wrong"] or 0) + (r["ip"]["wrong"] or 0),
                         "wrong_cycles": r.get("wrong_cycles") or []}
                        for r in rows],
            "largest": None if largest is None else {
                "bytes": largest["bytes"], "busbw_oop": largest["oop"]["busbw"],
                "busbw_ip": largest["ip"]["busbw"]},
        }

    def write_reports(self, result: verdict.Result) -> list[Path]:
        if not _rows(result) or result.plan.ranks == 1:  # one rank: no bandwidth to plot
            return []
        return [plot_busbw(result.report, result.plan.out_dir / "allreduce.png",
                           title=f"all_reduce busbw: {result.plan.target.name}, "
                                 f"{result.plan.ranks} ranks, "
                                 f"{result.report.get('backend', '?')}")]


SMOKE = SmokeKind()

