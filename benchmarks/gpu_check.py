"""The GPU check: every workload of ``jobs/`` on this machine's GPUs with the host's own torch,
judged by the tool's own gates, in one short run that ends in one summary table.

For the day a machine with NVIDIA GPUs is at hand (no container, no scheduler, no network): it
runs, in order,

* the device gate (``jobs/gate.py``), one process checking every local rank's GPU;
* every collective on NCCL (``jobs/allreduce.py --op all``), one rank per GPU;
* DDP, FSDP and DeepSpeed (``jobs/train.py``), two short epochs each, so the loss has a trend;

and judges each run with the verdict every interactive run gets (:class:`verdict.Result`:
exit status, every rank finished, each rank's device report shows a GPU of its own and backend
nccl, no wrong values, the loss fell, the ranks agree). The expectation is this machine's: GPUs of
``--device``'s kind, as many ranks as GPUs (NCCL refuses two ranks on one GPU). One rank moves no
data across a link, so the collectives' bandwidth is then shown as n/a and not judged.

``--device cpu`` runs the same stages on gloo CPU ranks with the GPU expectation off: the tests
run it, so the script is known to work before a GPU is there. Results: OUT/<stage>/ (each run's
own files and ``run.log``), ``OUT/gpu-check.json`` and the table on stdout; exit status 0 when
every stage passed, 1 otherwise, 2 when OUT is refused (the package's write rule,
``containers.files.unsafe_way``). The stages' TMPDIR is the check's own, removed at its end.
Needs the project's Python packages (``containers``) and torch; DeepSpeed only for its stage (a
missing DeepSpeed fails that stage, saying so). Usage::

    benchmarks/gpu_check.sh                       # NVIDIA GPUs: every one of them
    python benchmarks/gpu_check.py --device cpu --ranks 2 --out /tmp/gpu-check   # the CPU form
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from unittest.mock import patch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import run_shown  # noqa: E402
from containers.errors import WriteRefused  # noqa: E402
from containers.files import atomic_write_text, refuse_unsafe_way  # noqa: E402
from containers.image.builder import sigterm_as_exit  # noqa: E402
from containers.inputs.names import COLLECTIVES  # noqa: E402
from containers.inputs.sites import Site, load_sites  # noqa: E402
from containers.prove import verdict  # noqa: E402
from containers.inputs.names import Gpu  # noqa: E402
from containers.prove.kind import WorkloadKind  # noqa: E402
from containers.prove.registry import WORKLOADS  # noqa: E402
from containers.report import show_table  # noqa: E402
from containers.run.launchers import Launch  # noqa: E402
from containers.run.workload import Workload, collect  # noqa: E402

JOBS = ROOT / "jobs"
EXAMPLES = ("ddp", "fsdp", "deepspeed")
#: Collectives that need a peer rank.
TWO_RANK_OPS = ("sendrecv",)
#: Each form's workload sizes: short on a GPU, seconds on CPU ranks.
SIZES = {
    "cuda": {"sizes": "1K:256M", "train": ["--model", "wideresnet", "--model-size", "small",
                                          "--samples", "16384", "--val-samples", "2048"]},
    "cpu": {"sizes": "1K:1M", "train": ["--model", "cnn", "--model-size", "tiny",
                                        "--samples", "1024", "--val-samples", "256"]},
}


@dataclass
class Stage:
    """One row of the summary: what ran, its verdict, the figures worth a glance, and why not."""

    name: str
    verdict: str = "FAIL"
    seconds: float = 0.0
    figures: str = ""
    reasons: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda: this machine's NVIDIA GPUs, nccl; cpu: gloo CPU ranks, for "
                        "testing the check itself (default: %(default)s)")
    parser.add_argument("--ranks", type=int, default=0,
                        help="ranks (default: every GPU torch sees; 2 with --device cpu)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-check",
                        help="results folder (default: %(default)s)")
    parser.add_argument("--stages", default="gate,smoke," + ",".join(EXAMPLES),
                        help="comma list of stages to run (default: all)")
    parser.add_argument("--timeout", type=float, default=240,
                        help="seconds each stage may take (default: %(default)s)")
    return parser.parse_args(argv)


def machine_site(sites: dict[str, Site], device: str, ranks: int) -> Site:
    """What this machine is, as a site profile: the tool's own ``local`` profile with this
    machine's GPUs (kind and count), and no references (a workstation's bandwidth has none)."""
    local = sites["local"]
    kind = Gpu.CUDA if device == "cuda" else Gpu.NONE
    gpus = local.gpus.model_copy(update={"kind": kind,
                                         "per_node": ranks if kind != Gpu.NONE else 0})
    return local.model_copy(update={"gpus": gpus, "references": ()})


def host_workload(site: Site, *, kind: WorkloadKind, script: str, args: list[str],
                  out_dir: Path, ranks: int, timeout: float) -> Workload:
    """The plan of one run on this machine's Python: torchrun of ``script`` with ``args``. It
    has no container (``runtime`` None, nothing calls it), so the image is the host itself."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", str(JOBS / script), *args, "--out", str(out_dir),
            "--timeout-s", str(int(timeout))]
    launch = Launch(runtime=None, image=Path("host"), script=str(JOBS / script),  # type: ignore
                    args=tuple(args), ranks_per_node=ranks)
    return Workload(target=None, site=site, image=Path("host"), out_dir=out_dir,  # type: ignore
                    ranks=ranks, argv=argv, timeout=timeout, report_name=kind.report_name,
                    launch=launch)


def run_logged(argv: list[str], *, out_dir: Path, timeout: float, label: str,
               env: dict[str, str]) -> tuple[int, bool, list[str], float]:
    """Run ``argv`` showing its output prefixed by ``label`` and keeping it in ``run.log``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    result, lines = run_shown(argv, label=label, timeout=timeout, env={**os.environ, **env})
    atomic_write_text(out_dir / "run.log", "\n".join(lines) + "\n")
    return result.returncode, bool(result.timed_out), lines, time.monotonic() - start


def gate_stage(args: argparse.Namespace, ranks: int) -> Stage:
    """The device gate: one process checking, with the rule every workload applies to itself,
    that each of the ``ranks`` local ranks will have a usable GPU of the expected kind."""
    stage = Stage("device gate")
    expect = args.device if args.device == "cuda" else "none"
    code, timed_out, lines, stage.seconds = run_logged(
        [sys.executable, str(JOBS / "gate.py"), "--expect-gpu", expect, "--ranks", str(ranks)],
        out_dir=args.out / "gate", timeout=args.timeout, label="gate", env={})
    said = [line for line in lines if line.startswith("device gate: ")]
    passed = code == 0 and not timed_out and bool(said) and said[-1].startswith(
        "device gate: PASS")
    stage.verdict = "PASS" if passed else "FAIL"
    stage.figures = said[-1].removeprefix("device gate: ") if said else ""
    if not passed:
        stage.reasons = [said[-1] if said else f"jobs/gate.py exited {code} and said nothing"]
    return stage


def workload_stage(args: argparse.Namespace, site: Site, ranks: int, name: str) -> Stage:
    """One workload run on this machine, judged by the tool's own gates (``verdict.Result``)."""
    kind = WORKLOADS[name]
    form = SIZES[args.device]
    expect = ["--expect-gpu", args.device if args.device == "cuda" else "none"]
    if name == "smoke":
        script, extra = "allreduce.py", ["--op", ",".join(ops_for(ranks)), "--sizes",
                                         form["sizes"], "--iters", "20", "--warmup", "5"]
    else:
        script, extra = "train.py", ["--example", name, "--epochs", "2", *form["train"]]
    workload = host_workload(site, kind=kind, script=script, args=extra + expect,
                             out_dir=args.out / name, ranks=ranks, timeout=args.timeout)
    code, timed_out, lines, seconds = run_logged(
        workload.argv, out_dir=workload.out_dir, timeout=args.timeout, label=name,
        env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"})
    outcome = collect(workload, returncode=code, timed_out=timed_out, lines=lines,
                      seconds=seconds)
    result = verdict.Result(kind=kind, plan=workload, outcome=outcome)
    stage = Stage("collectives (nccl-tests ops)" if name == "smoke" else f"train {name}",
                  seconds=seconds)
    stage.reasons = list(result.reasons)
    performance = result.performance
    if performance is not None and performance.failed:
        stage.reasons.append(f"performance: {performance.message}")
    stage.verdict = "PASS" if not stage.reasons else "FAIL"
    stage.figures = figures(name, outcome.report or {})
    return stage


def ops_for(ranks: int) -> list[str]:
    """The collectives a run of ``ranks`` can do: sendrecv needs a peer (torch.distributed does
    not send to its own rank), so one GPU runs the other six and the table says so."""
    return [op for op in COLLECTIVES if ranks > 1 or op not in TWO_RANK_OPS]


def not_run(ranks: int) -> list[Stage]:
    """Rows for what this machine cannot run, so a reader sees it was not proven here."""
    return [Stage(f"collective {op}", verdict="NOT RUN",
                  reasons=[f"needs 2 ranks, and NCCL refuses two ranks on one GPU: run the "
                           f"check on a machine with 2 GPUs or more to prove {op}"])
            for op in COLLECTIVES if op not in ops_for(ranks)]


def figures(name: str, report: dict) -> str:
    """What a person looks at first: where the ranks ran, and the run's headline numbers."""
    where = f"{report.get('world_size', '?')} x {report.get('device', '?')} " \
            f"({report.get('backend', '?')})"
    if name == "smoke":
        ops = report.get("collectives") or {}
        wrong = sum(int(op.get("wrong_total") or 0) for op in ops.values())
        largest = max((row["bytes"] for row in report.get("results") or []), default=0)
        busbw = [row["oop"]["busbw"] for row in report.get("results") or []
                 if row["bytes"] == largest and row.get("op") == "all_reduce"]
        bandwidth = f"{busbw[0]:.1f} GB/s" if busbw and busbw[0] is not None else "n/a (1 rank)"
        return (f"{where}; {len(ops)} ops, #wrong {wrong}; all_reduce busbw at "
                f"{largest} B: {bandwidth}")
    first, last = report.get("loss_first"), report.get("loss_last")
    rate = report.get("throughput")
    loss = f"loss {first:.3f} -> {last:.3f}" if isinstance(first, float) and \
        isinstance(last, float) and math.isfinite(first) else "no loss"
    return (f"{where}; {report.get('model_name', '?')}, {loss}, "
            f"{rate:,.0f} samples/s" if isinstance(rate, (int, float)) else f"{where}; {loss}")


def detected_ranks(device: str) -> int:
    """Every GPU torch sees (one rank per GPU: NCCL refuses two ranks on one GPU); 2 on CPU."""
    if device == "cpu":
        return 2
    import torch  # only here: the table needs no torch, and the CPU form none before its runs
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextmanager
def own_tmpdir() -> Iterator[None]:
    """TMPDIR, for every stage, a folder of this check's own, removed at its end, stopped
    (SIGTERM) or not: torchrun leaves a ``torchelastic_*`` log folder in TMPDIR per run."""
    with sigterm_as_exit(), tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp, \
            patch.dict(os.environ, TMPDIR=tmp):
        yield


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ranks = args.ranks or detected_ranks(args.device)
    args.out = Path(os.path.abspath(args.out))  # links on the way are the write rule's to judge
    wanted = [name.strip() for name in args.stages.split(",") if name.strip()]
    unknown = sorted(set(wanted) - {"gate", "smoke", *EXAMPLES})
    if unknown:
        print(f"gpu_check: unknown stage(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        refuse_unsafe_way(args.out)
    except WriteRefused as exc:
        print(f"gpu_check: --out {exc}", file=sys.stderr)
        return 2
    with own_tmpdir():
        return summarise(args, run_stages(args, wanted, ranks), ranks)


def run_stages(args: argparse.Namespace, wanted: list[str], ranks: int) -> list[Stage]:
    """Every stage ``wanted``, in order, and the rows of what this machine cannot run."""
    stages: list[Stage] = []
    if ranks < 1:
        stages.append(Stage("device gate", reasons=[
            "torch sees no CUDA GPU here (torch.cuda.is_available() is False)"]))
    else:
        site = machine_site(load_sites(ROOT), args.device, ranks)
        stages += [gate_stage(args, ranks) if name == "gate"
                   else workload_stage(args, site, ranks, name) for name in wanted]
        stages += not_run(ranks) if "smoke" in wanted else []
    return stages


def summarise(args: argparse.Namespace, stages: list[Stage], ranks: int) -> int:
    """The one summary table, and its JSON mirror in ``OUT/gpu-check.json``."""
    rows = [[s.name, s.verdict, f"{s.seconds:.1f}", s.figures, "; ".join(s.reasons)[:300]]
            for s in stages]
    show_table(f"GPU check: {ranks} rank(s) on {args.device}",
                          ["stage", "verdict", "s", "figures", "why not"], rows)
    ran = [s for s in stages if s.verdict != "NOT RUN"]
    passed = all(s.verdict == "PASS" for s in ran) and bool(ran)
    record = {"device": args.device, "ranks": ranks, "passed": passed,
              "stages": [s.__dict__ for s in stages]}
    atomic_write_text(args.out / "gpu-check.json", json.dumps(record, indent=2) + "\n")
    skipped = f", {len(stages) - len(ran)} not run (see above)" if len(ran) < len(stages) else ""
    print(f"gpu check: {'PASS' if passed else 'FAIL'} ({sum(s.verdict == 'PASS' for s in ran)} "
          f"of {len(ran)} stages passed{skipped}); json: {args.out / 'gpu-check.json'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
