"""``invoke smoke``: the all_reduce benchmark across ranks inside an image, and its verdict.

The run itself goes through :mod:`containers.launch`; here are the benchmark's arguments and the
verdict: every rank finished, no ``#wrong`` values, exit code 0, the benchmark completed its sizes.
The benchmark writes ``allreduce.json``; the host adds ``verdict.json`` and the PNG.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

from .errors import CheckFailed, ConfigError
from .launch import Outcome, Say, Workload, failure_reasons, plan_workload, run_workload
from .runtime import Runtime
from .settings import Settings
from .sites import Site
from .targets import Target

BENCHMARK = "allreduce.py"


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

    @property
    def report(self) -> dict | None:
        return self.outcome.report

    @property
    def wrong_total(self) -> int:
        """Wrong values over every size measured so far (the benchmark rewrites its JSON after
        each size, so a run that died midway still shows what it had checked)."""
        rows = self.report.get("results", []) if self.report else []
        return sum(r[mode]["wrong"] or 0 for r in rows for mode in ("oop", "ip"))

    @property
    def complete(self) -> bool:
        return bool(self.report and self.report.get("finished"))

    @property
    def ok(self) -> bool:
        return not verdict(self)


def plan_smoke(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
               options: SmokeOptions, run_id: str, environ: Mapping[str, str] | None = None,
               strict: bool = True) -> Workload:
    if options.iters < 1 or options.warmup < 0:
        raise ConfigError("--iters must be >= 1 and --warmup >= 0", key="--iters")
    args = ["--sizes", options.sizes, "--iters", str(options.iters),
            "--warmup", str(options.warmup), "--dtype", options.dtype,
            "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
    if options.fault:
        args += ["--fault", options.fault]
    return plan_workload(target, site, settings=settings, runtime=runtime, kind="smoke",
                         script=BENCHMARK, args=args, ranks=options.gpus,
                         timeout=options.timeout, run_id=run_id, report_name="allreduce.json",
                         extra_env=options.extra_env, environ=environ, strict=strict)


def run_smoke(plan: Workload, *, say: Say) -> SmokeResult:
    return SmokeResult(plan=plan, outcome=run_workload(plan, say=say))


def verdict(result: SmokeResult) -> list[str]:
    """Why a run failed, one line per reason; empty when it passed."""
    reasons = failure_reasons(result.plan, result.outcome)
    if result.wrong_total:
        sizes = [str(r["bytes"]) for r in result.report.get("results", [])
                 if r["oop"]["wrong"] or r["ip"]["wrong"]]
        reasons.append(f"{result.wrong_total} wrong values (all_reduce results differ from the "
                       f"exact sum) at sizes {', '.join(sizes)} B")
    if result.outcome.returncode != 0 and not result.outcome.timed_out and not reasons:
        reasons.append(f"the benchmark exited with code {result.outcome.returncode}")
    if result.report is None and not reasons:
        reasons.append("no allreduce.json was written")
    elif not result.complete and not reasons:
        reasons.append("the benchmark did not complete its sizes")
    return reasons


def summary(result: SmokeResult, *, image_record: dict) -> dict:
    """The run in one record (``verdict.json``): what was tested, on which image, and the verdict.

    ``image_record`` is the image's provenance (inputs hash, sha256), so a later step (publishing)
    can tell whether THIS image passed.
    """
    rows = result.report.get("results", []) if result.report else []
    largest = rows[-1] if rows else None
    reasons = verdict(result)
    return {
        "target": result.plan.target.name,
        "site": result.plan.site.name,
        "image": str(result.plan.image),
        "inputs_hash": image_record.get("inputs_hash"),
        "sha256": image_record.get("sha256"),
        "ranks": result.plan.ranks,
        "backend": result.report.get("backend") if result.report else None,
        "passed": not reasons,
        "reasons": reasons,
        "wrong_total": result.wrong_total,
        "largest": None if largest is None else {
            "bytes": largest["bytes"], "busbw_oop": largest["oop"]["busbw"],
            "busbw_ip": largest["ip"]["busbw"]},
        "seconds": round(result.outcome.seconds, 1),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "out_dir": str(result.plan.out_dir),
    }


def check(result: SmokeResult) -> None:
    reasons = verdict(result)
    if reasons:
        raise CheckFailed(f"smoke FAILED for {result.plan.target.name} "
                          f"({result.plan.ranks} ranks): " + "; ".join(reasons)
                          + f" [log: {result.plan.out_dir / 'run.log'}]")
