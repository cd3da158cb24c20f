"""``invoke smoke``: the all_reduce benchmark across ranks inside an image, and its verdict.

The run itself goes through :mod:`containers.run.workload`; here are the benchmark's arguments and the
two gates a site regression suite keeps apart:

* sanity: every rank finished, no ``#wrong`` values, exit code 0, all sizes done, and, where the
  site declares its network transport, NCCL/RCCL's debug output proves it was used;
* performance: out-of-place busbw at the reference size within the site's reference tolerance.

The benchmark writes ``allreduce.json``; the host adds ``verdict.json`` and the PNG.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

from containers.errors import ConfigError, PerformanceFailed, VerdictFailed
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from containers.inputs.references import Judgement, judge
from containers.inputs.sites import Site
from containers.prove.transport import TransportCheck, check_transport
from containers.run.workload import (Outcome, Placement, Say, Workload, failure_reasons,
                                     plan_workload, run_workload)
from containers.settings import Settings

BENCHMARK = "allreduce.py"
#: What makes NCCL/RCCL name its network transport in the output.
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True)
class SmokeOptions:
    gpus: int
    sizes: str = "1K:128M"
    iters: int = 20
    warmup: int = 5
    timeout: float = 600.0
    dtype: str = "float32"
    fault: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SmokeResult:
    plan: Workload
    outcome: Outcome
    partition: str | None = None

    @property
    def report(self) -> dict | None:
        return self.outcome.report

    @property
    def rows(self) -> list[dict]:
        return list(self.report.get("results", [])) if self.report else []

    @property
    def wrong_total(self) -> int:
        """Wrong values over every size measured so far (the benchmark rewrites its JSON after
        each size, so a run that died midway still shows what it had checked)."""
        return sum(r[mode]["wrong"] or 0 for r in self.rows for mode in ("oop", "ip"))

    @property
    def complete(self) -> bool:
        return bool(self.report and self.report.get("finished"))

    @property
    def nodes(self) -> int:
        """Nodes the run spanned: the placement's (one torchrun per node, even where nodes
        share a host name), else the distinct host names the benchmark saw."""
        if self.plan.nodes > 1:
            return self.plan.nodes
        return int(self.report.get("nodes") or 1) if self.report else 1

    @property
    def transport(self) -> TransportCheck | None:
        site = self.plan.site
        if not site.transport_expect or not self.report or self.report.get("backend") != "nccl":
            return None  # gloo (CPU) runs have no NCCL transport to prove
        return check_transport(self.outcome.lines, expect=site.transport_expect,
                               name=site.transport_name or site.transport_expect)

    @property
    def performance(self) -> Judgement:
        reference = self.plan.site.reference(partition=self.partition, nodes=self.nodes,
                                             ranks_per_node=self.plan.ranks // self.nodes,
                                             measured={row["bytes"] for row in self.rows})
        return judge(reference, self.rows)

    @property
    def ok(self) -> bool:
        return not verdict(self) and not self.performance.failed


def plan_smoke(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
               options: SmokeOptions, run_id: str, environ: Mapping[str, str] | None = None,
               strict: bool = True, placement: Placement | None = None) -> Workload:
    if options.iters < 1 or options.warmup < 0:
        raise ConfigError("--iters must be >= 1 and --warmup >= 0", key="--iters")
    args = ["--sizes", options.sizes, "--iters", str(options.iters),
            "--warmup", str(options.warmup), "--dtype", options.dtype,
            "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
    if options.fault:
        args += ["--fault", options.fault]
    extra_env = {**(DEBUG_ENV if site.transport_expect else {}), **options.extra_env}
    return plan_workload(target, site, settings=settings, runtime=runtime, kind="smoke",
                         script=BENCHMARK, args=args, ranks=options.gpus,
                         timeout=options.timeout, run_id=run_id, report_name="allreduce.json",
                         extra_env=extra_env, environ=environ, strict=strict,
                         placement=placement)


def run_smoke(plan: Workload, *, say: Say, partition: str | None = None) -> SmokeResult:
    return SmokeResult(plan=plan, outcome=run_workload(plan, say=say), partition=partition)


def verdict(result: SmokeResult) -> list[str]:
    """The sanity gate: why the run is not correct, one line per reason; empty when it is."""
    reasons = failure_reasons(result.plan, result.outcome)
    if result.wrong_total:
        sizes = [str(r["bytes"]) for r in result.rows if r["oop"]["wrong"] or r["ip"]["wrong"]]
        reasons.append(f"{result.wrong_total} wrong values (all_reduce results differ from the "
                       f"exact sum) at sizes {', '.join(sizes)} B")
    if result.outcome.returncode != 0 and not result.outcome.timed_out and not reasons:
        reasons.append(f"the benchmark exited with code {result.outcome.returncode}")
    if result.report is None and not reasons:
        reasons.append("no allreduce.json was written")
    elif not result.complete and not reasons:
        reasons.append("the benchmark did not complete its sizes")
    transport = result.transport
    if transport is not None and not transport.ok:
        reasons.append(transport.message)
    return reasons


def summary(result: SmokeResult, *, image_record: dict) -> dict:
    """The run in one record (``verdict.json``): what was tested, on which image, both gates.

    ``image_record`` is the image's provenance (inputs hash, sha256), so a later step (publishing)
    can tell whether THIS image passed. ``passed`` is the sanity gate.
    """
    reasons = verdict(result)
    performance = result.performance
    transport = result.transport
    reference = performance.reference
    largest = result.rows[-1] if result.rows else None
    return {
        "target": result.plan.target.name,
        "site": result.plan.site.name,
        "partition": result.partition,
        "image": str(result.plan.image),
        "inputs_hash": image_record.get("inputs_hash"),
        "sha256": image_record.get("sha256"),
        "build_date": image_record.get("build_date"),
        "ranks": result.plan.ranks,
        "nodes": result.nodes,
        "backend": result.report.get("backend") if result.report else None,
        "passed": not reasons,
        "reasons": reasons,
        "wrong_total": result.wrong_total,
        "transport": None if transport is None else {
            "ok": transport.ok, "message": transport.message, "evidence": transport.evidence},
        "performance": {
            "state": performance.state, "message": performance.message,
            "measured": performance.measured,
            "reference": None if reference is None else {
                "bytes": reference.bytes, "value": reference.value, "lower": reference.lower,
                "upper": reference.upper, "unit": reference.unit, "xfail": reference.xfail,
                "source": reference.source}},
        "results": [{"bytes": r["bytes"], "busbw_oop": r["oop"]["busbw"],
                     "busbw_ip": r["ip"]["busbw"], "wrong": (r["oop"]["wrong"] or 0)
                     + (r["ip"]["wrong"] or 0)} for r in result.rows],
        "largest": None if largest is None else {
            "bytes": largest["bytes"], "busbw_oop": largest["oop"]["busbw"],
            "busbw_ip": largest["ip"]["busbw"]},
        "seconds": round(result.outcome.seconds, 1),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "out_dir": str(result.plan.out_dir),
    }


def check(result: SmokeResult) -> None:
    """Raise for a failed gate: sanity first (exit 2), then performance (exit 3)."""
    reasons = verdict(result)
    log = result.plan.out_dir / "run.log"
    if reasons:
        raise VerdictFailed(f"smoke FAILED for {result.plan.target.name} "
                          f"({result.plan.ranks} ranks): " + "; ".join(reasons)
                          + f" [log: {log}]")
    performance = result.performance
    if performance.failed:
        raise PerformanceFailed(f"smoke performance FAILED for {result.plan.target.name} "
                                f"({result.plan.ranks} ranks): {performance.message}")
