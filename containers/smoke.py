"""``invoke smoke``: the all_reduce benchmark across ranks inside an image, and its verdict.

Planning (:func:`plan_smoke`) gives the exact ``apptainer exec … torchrun …`` argv; running it
(:func:`run_smoke`) streams the benchmark's nccl-tests-style table, enforces the timeout on the
whole process tree, then judges: every rank finished (each writes ``rank-<N>.json``), no ``#wrong``
values, exit code 0. The benchmark writes ``allreduce.json``; the host adds the PNG.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .errors import CheckFailed, ConfigError
from .process import run
from .runtime import Runtime
from .settings import Settings
from .sites import Site
from .targets import Target

Say = Callable[[str], None]
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
class SmokePlan:
    target: Target
    site: Site
    image: Path
    out_dir: Path
    ranks: int
    argv: list[str]
    timeout: float


@dataclass(frozen=True)
class SmokeResult:
    plan: SmokePlan
    returncode: int
    timed_out: bool
    missing_ranks: list[int]
    report: dict | None
    seconds: float
    first_failure: tuple[int, int] | None = None

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
        return (self.returncode == 0 and not self.timed_out and not self.missing_ranks
                and self.complete and self.wrong_total == 0)


def torchrun_argv(*, nproc: int, script: str, args: list[str]) -> list[str]:
    """Single-node torchrun: ``--standalone`` picks a free rendezvous port on localhost."""
    return ["torchrun", "--standalone", f"--nproc-per-node={nproc}", script, *args]


def plan_smoke(target: Target, site: Site, *, settings: Settings, runtime: Runtime,
               options: SmokeOptions, run_id: str) -> SmokePlan:
    if options.gpus < 1:
        raise ConfigError(f"--gpus must be at least 1 (got {options.gpus})", key="--gpus")
    if options.iters < 1 or options.warmup < 0:
        raise ConfigError("--iters must be >= 1 and --warmup >= 0", key="--iters")
    if site.gpu != "none" and site.gpus_per_node and options.gpus > site.gpus_per_node:
        raise ConfigError(f"{site.name} nodes have {site.gpus_per_node} GPUs; --gpus "
                          f"{options.gpus} needs more than one node", path=site.path,
                          line=site.lines.get("gpus_per_node"), key="gpus_per_node")
    out_dir = settings.results_dir / "smoke" / f"{target.name}-{run_id}"
    bench_args = ["--sizes", options.sizes, "--iters", str(options.iters),
                  "--warmup", str(options.warmup), "--dtype", options.dtype,
                  "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
    if options.fault:
        bench_args += ["--fault", options.fault]
    command = torchrun_argv(nproc=options.gpus, script=f"{settings.jobs_mount}/{BENCHMARK}",
                            args=bench_args)
    binds = [f"{settings.jobs_dir}:{settings.jobs_mount}:ro", f"{out_dir}:{settings.results_mount}",
             *site.binds]
    argv = runtime.exec_argv(image=settings.image_path(target.name), command=command,
                             gpu_flag=site.gpu_flag, binds=binds,
                             env={**site.env, **options.extra_env})
    return SmokePlan(target=target, site=site, image=settings.image_path(target.name),
                     out_dir=out_dir, ranks=options.gpus, argv=argv, timeout=options.timeout)


def _finished_ranks(out_dir: Path) -> set[int]:
    ranks = set()
    for path in out_dir.glob("rank-*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("finished"):
            ranks.add(int(record["rank"]))
    return ranks


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_FAILED_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def first_failure(lines: list[str]) -> tuple[int, int] | None:
    """``(rank, exit code)`` from torchrun's failure summary ("Root Cause" block), if any."""
    rank = None
    in_root_cause = False
    for line in lines:
        if _ROOT_CAUSE.search(line):
            in_root_cause = True
        elif in_root_cause and rank is None and (match := _FAILED_RANK.match(line)):
            rank = int(match.group(1))
        elif in_root_cause and rank is not None and (match := _FAILED_EXIT.match(line)):
            return rank, int(match.group(1))
    return None


def run_smoke(plan: SmokePlan, *, say: Say) -> SmokeResult:
    """Run the planned benchmark; never leaves a rank running (see :mod:`containers.process`)."""
    if not plan.image.is_file():
        raise ConfigError(f"image {plan.image} is not built; run: invoke build --target "
                          f"{plan.target.name}")
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    log = open(plan.out_dir / "smoke.log", "w", encoding="utf-8")
    lines: list[str] = []

    def on_line(line: str) -> None:
        log.write(line + "\n")
        lines.append(line)
        say(line)

    started = time.monotonic()
    try:
        completed = run(plan.argv, timeout=plan.timeout, on_line=on_line)
    finally:
        log.close()
    report_path = plan.out_dir / "allreduce.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else None
    missing = sorted(set(range(plan.ranks)) - _finished_ranks(plan.out_dir))
    return SmokeResult(plan=plan, returncode=completed.returncode, timed_out=completed.timed_out,
                       missing_ranks=missing, report=report,
                       seconds=time.monotonic() - started, first_failure=first_failure(lines))


def verdict(result: SmokeResult) -> list[str]:
    """Why a run failed, one line per reason; empty when it passed."""
    reasons = []
    plan = result.plan
    if result.timed_out:
        reasons.append(f"timed out after {plan.timeout:.0f} s; every process of the run was "
                       "stopped")
    if result.missing_ranks:
        ranks = ", ".join(map(str, result.missing_ranks))
        reasons.append(f"ranks that did not finish: {ranks} (of {plan.ranks})")
    if result.first_failure:
        rank, code = result.first_failure
        reasons.append(f"first failure: rank {rank} (exit code {code})")
    if result.wrong_total:
        sizes = [str(r["bytes"]) for r in result.report.get("results", [])
                 if r["oop"]["wrong"] or r["ip"]["wrong"]]
        reasons.append(f"{result.wrong_total} wrong values (all_reduce results differ from the "
                       f"exact sum) at sizes {', '.join(sizes)} B")
    if result.returncode != 0 and not result.timed_out and not reasons:
        reasons.append(f"the benchmark exited with code {result.returncode}")
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
        "seconds": round(result.seconds, 1),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "out_dir": str(result.plan.out_dir),
    }


def check(result: SmokeResult) -> None:
    reasons = verdict(result)
    if reasons:
        raise CheckFailed(f"smoke FAILED for {result.plan.target.name} "
                          f"({result.plan.ranks} ranks): " + "; ".join(reasons)
                          + f" [log: {result.plan.out_dir / 'smoke.log'}]")
