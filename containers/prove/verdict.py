"""The two gates every workload run goes through, kept apart, and their record (``verdict.json``).
It carries the image's sha256, so publish tells whether THIS image passed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping
from functools import cached_property

from containers.errors import PerformanceFailed, VerdictFailed
from containers.host.facts import utc_now
from containers.image import provenance
from containers.inputs.names import Gpu
from containers.prove import devices
from containers.prove.kind import WorkloadKind
from containers.prove.performance import Judgement
from containers.prove.transport import TransportCheck, check_transport, run_stack
from containers import records
from containers.records import BuildRecord, Malformed, RunReport, Verdict
from containers.run.workload import Outcome, Say, Workload, failure_reasons, run_workload


@dataclass(frozen=True)
class Result:
    """A finished run of a kind: the plan, what the run left, and (lazily) both gates."""

    kind: WorkloadKind
    plan: Workload
    outcome: Outcome
    partition: str | None = None
    #: Reasons found outside the run's own files (a batch run's results of another image).
    given_reasons: tuple[str, ...] = ()

    @cached_property
    def _read(self) -> tuple[RunReport, list[str]]:
        """The report as its run left it (partial when it died midway), or why it is none."""
        read = getattr(records, self.kind.report_type).of
        try:
            return read(self.outcome.report or {}, source=self.kind.report_name), []
        except Malformed as exc:
            return read({}), [str(exc)]

    @property
    def run_report(self) -> RunReport:
        return self._read[0]

    @property
    def nodes(self) -> int:
        if self.plan.launch.nodes > 1:
            return self.plan.launch.nodes
        return self.run_report.nodes

    @cached_property
    def reasons(self) -> list[str]:
        """The sanity gate: why the run is not correct, one line each; empty when it is."""
        return list(self.given_reasons) + _run_reasons(self)

    @cached_property
    def transport(self) -> TransportCheck | None:
        """The transport's proof where the site declares one for this many nodes."""
        site = self.plan.site
        if not site.transport.applies(self.plan.launch.nodes):
            return None
        proof = check_transport(self.outcome.lines, expect=site.transport.expect or "",
                                name=site.transport.name or site.transport.expect or "",
                                net=site.transport.net)
        if self.outcome.report is not None and self.run_report.backend == "nccl":
            return proof
        return proof if proof.evidence is not None and not proof.ok else None

    @cached_property
    def archs(self) -> list[str]:
        """The architectures the ranks ran as (``platform.machine()`` in each device report)."""
        return sorted({str(d["arch"]) for d in self.outcome.devices if d.get("arch")})

    @cached_property
    def performance(self) -> Judgement | None:
        return self.kind.performance(self)

    @property
    def ok(self) -> bool:
        return not self.reasons and not (self.performance and self.performance.failed)


def run(kind: WorkloadKind, workload: Workload, *, say: Say,
        partition: str | None = None) -> Result:
    return Result(kind=kind, plan=workload, outcome=run_workload(workload, say=say),
                  partition=partition)


def _run_reasons(result: Result) -> list[str]:
    kind, outcome = result.kind, result.outcome
    reasons = failure_reasons(result.plan, outcome)
    # The script's own one-line diagnosis (a bad flag, ds_config or data folder) says the most.
    reasons += [line.strip() for line in outcome.lines
                if line.strip().startswith(f"{kind.script}: error:")][:1]
    # no report because the plugin NCCL_NET names did not load: the same reason for every kind
    proof = result.transport if outcome.report is None else None
    reasons += [proof.message] if proof is not None and not proof.ok else []
    reasons += result._read[1] + kind.failures(result)
    # judged even when the run stopped early: a rank without its GPU says why in its device report
    reasons += device_reasons(result) + arch_reasons(result) + network_reasons(result)
    if outcome.returncode != 0 and not outcome.timed_out and not reasons:
        reasons.append(f"{kind.program} exited with code {outcome.returncode}")
    if outcome.report is None:
        return reasons or [f"no {kind.report_name} was written"]
    return reasons + kind.report_reasons(result, settled=bool(reasons))


def device_reasons(result: Result) -> list[str]:
    """On a GPU site every rank must prove it used a GPU; pinned ranks, their cores."""
    plan, site = result.plan, result.plan.site
    expect = devices.Expectation(
        site=site.name, gpu=site.gpus.kind, ranks=plan.ranks, gpu_flag=site.gpus.kind.flag,
        visible_var=site.gpus.kind.visible_devices, rank_cores=tuple(plan.cores))
    return devices.reasons(expect, result.outcome.devices,
                           backend=result.run_report.backend)


def arch_reasons(result: Result) -> list[str]:
    """Every rank must have run as the image's recorded architecture."""
    recorded = provenance.read(result.plan.image.with_name(result.plan.image.name + ".json")
                               ).arch
    if recorded and result.archs and result.archs != [recorded]:
        return [f"ranks ran as {', '.join(result.archs)} but {result.plan.image.name} "
                f"is recorded as {recorded}"]
    return []


def network_reasons(result: Result) -> list[str]:
    """A multi-node GPU run where no transport is declared is NOT-PROVEN (TCP fallback)."""
    nodes, site = result.plan.launch.nodes, result.plan.site
    if site.gpus.kind == Gpu.NONE or nodes < 2 or site.transport.expect:
        return []
    return [f"NOT-PROVEN: site {site.name} declares no transport for multi-node runs "
            f"({site.path.name} has no transport:), so nothing "
            f"shows that this {nodes}-node run used the site's network and not TCP sockets"]


def record(result: Result, *, image_record: Mapping) -> dict:
    """``verdict.json``: what ran, on which image (``image_record``), both gates."""
    plan, performance = result.plan, result.performance
    image = BuildRecord.of(image_record)
    return {
        "kind": result.kind.name,
        "target": plan.target.name,
        "site": plan.site.name,
        "partition": result.partition,
        "image": str(plan.image),
        "inputs_hash": image.inputs_hash,
        "sha256": image.sha256,
        "build_date": image.build_date,
        # the architecture as the build record says (read from the image) and as the ranks saw it
        "image_arch": image.arch,
        "arch": result.archs,
        "ranks": plan.ranks,
        "nodes": result.nodes,
        "backend": result.run_report.backend,
        "device_kind": devices.device_kind(result.outcome.devices),
        "devices": devices.summary(result.outcome.devices),
        "stack": run_stack(result.outcome.devices, result.outcome.lines,
                           runtime=result.plan.launch.runtime),
        "passed": not result.reasons,
        "reasons": list(result.reasons),
        # a transport the job chose instead of the site's (invoke job --transport socket)
        "degraded": plan.site.transport.degraded
        if plan.site.transport.applies(plan.launch.nodes) else None,
        "performance": None if performance is None else performance.record(),
        **result.kind.details(result),
        "seconds": round(result.outcome.seconds, 1),
        "date": utc_now(),
        "out_dir": str(plan.out_dir),
    }


def gate_lines(given: Mapping) -> list[str]:
    """The gates as the terminal shows them, from the record (so it shows what was written)."""
    record, lines = Verdict.of(given), []
    transport, degraded = record.transport, record.degraded
    if transport is not None or degraded:
        state = ("FAIL" if transport is not None and not transport.ok
                 else "DEGRADED" if degraded else "ok")
        said = [transport.message] if transport is not None else []
        lines.append(f"transport:   {state}: " + "; ".join(said + ([degraded] if degraded else [])))
    reasons = record.reasons
    lines.append("sanity:      " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons)))
    ops = record.collectives or {}
    if len(ops) > 1:  # several collectives (smoke --op): each one's own verdict
        for op, entry in ops.items():
            judged = entry.performance.state if entry.performance else "not judged"
            lines.append(f"  {op + ':':<16} {'PASS' if entry.passed else 'FAIL'} "
                         f"({entry.wrong_total} wrong, busbw factor {entry.factor}, "
                         f"performance {judged.upper()})")
    performance = record.performance
    if performance is not None:
        lines.append(f"performance: {performance.state.upper()}: {performance.message}")
    slow = performance is not None and performance.failed
    lines.append("verdict: " + ("PASS" if record.passed and not slow else "FAIL")
                 + (" (degraded transport: see the transport line)" if degraded else ""))
    return lines


def check(result: Result) -> None:
    """Raise for a failed gate: sanity first (exit 2), then performance (exit 3)."""
    name, plan = result.kind.name, result.plan
    where = f"{plan.target.name} ({plan.ranks} ranks)"
    if result.reasons:
        raise VerdictFailed(f"{name} FAILED for {where}: " + "; ".join(result.reasons)
                            + f" [log: {plan.out_dir / 'run.log'}]")
    if result.performance is not None and result.performance.failed:
        raise PerformanceFailed(f"{name} performance FAILED for {where}: "
                                f"{result.performance.message}")
