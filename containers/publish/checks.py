"""The checks an image passes before it is published, and their record in the catalogue."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Collection, Mapping

from containers.errors import CommandFailed, PerformanceFailed, VerdictFailed
from containers.files import not_yours_alone, read_json_object, read_regular_json
from containers.host.facts import utc_now
from containers.host.process import run
from containers.host.runtime import Runtime
from containers.image.emulated import emulated_binds
from containers.image.sitefit import holds_no_torch
from containers.inputs.names import Gpu
from containers.inputs.recipes import Target
from containers.publish.gate import evidence_reasons
from containers.records import BuildRecord, Malformed, RunStatus, Verdict
from containers.report import Say, show_command
from containers.run.command import KIND as RUN_KIND

# A short smoke of the image: VerdictFailed when it is wrong, PerformanceFailed when only slow.
QuickCheck = Callable[[Say], None]
#: ``ops`` and ``collectives`` travel with it, so the catalogue says which ops were proven.
SMOKE_KEYS = ("passed", "site", "partition", "ranks", "nodes", "backend", "device_kind",
              "wrong_total", "cycles", "largest", "transport", "performance", "stack", "seconds",
              "date", "ops", "collectives")
#: What an image without torch was published with instead of a smoke (the catalogue's words).
NO_TORCH_PROOF = "no collective proof: no torch"
#: The most a verdict.json may hold; a larger one (or a FIFO) is not a verdict of this tool.
VERDICT_LIMIT = 16 << 20
#: The most an ``invoke run``'s status.json may hold (its command's words, a few numbers).
STATUS_LIMIT = 1 << 20
#: The records found but not counted that a refusal lists, before "and N more".
LISTED = 5


def _proves(record: Verdict, gpu: Gpu) -> bool:
    """Whether a pass proves the image: 2+ ranks, for a GPU image all on it with nccl."""
    return ((record.ranks or 0) >= 2
            and (gpu == Gpu.NONE or (record.backend == "nccl" and record.device_kind == gpu)))


def find_verdict(results_dir: Path, target: str, sha256: str, *,
                 gpu: Gpu = Gpu.NONE) -> tuple[Path, Verdict] | None:
    """The newest verdict of this image that counts: a pass that proves it, or a failure, which
    outvotes an older pass; an undated one could hide a failure (refused)."""
    best: tuple[Path, Verdict] | None = None
    for path in (results_dir / "smoke").glob("*/verdict.json"):
        data = read_json_object(path, limit=VERDICT_LIMIT)
        record = None if data is None else Verdict.of(data, source=path)
        if record is None or record.target != target or record.sha256 != sha256:
            continue
        if not _dated(record.date):
            raise VerdictFailed(f"not publishing {target}: {path} has no date "
                                f"({record.date!r}), so it cannot be ranked against "
                                "this image's other smokes; remove it or run the smoke again")
        if ((record.passed is not True or _proves(record, gpu))
                and (best is None or record.date > best[1].date)):
            best = (path, record)
    return best


def _dated(value: object) -> bool:
    """Whether ``value`` is a UTC time as verdicts write it, which orders as text."""
    return isinstance(value, str) and re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", value) is not None


def _one_line(items: object) -> str:
    """A verdict's reasons as one line, whatever a hand-edited file holds."""
    listed = items if isinstance(items, list) else [items]
    line = "; ".join(" ".join(str(item).split()) for item in listed if item)
    if len(line) <= 400:
        return line
    return line[:400].rsplit(" ", 1)[0] + " ... (the rest in the verdict file)"


def refuse_unproven(found: tuple[Path, Verdict], *, target: str, sha256: str, gpu: Gpu,
                    labels: Mapping | None = None) -> None:
    """Refuse a failed newest verdict, or a pass its run's files do not bear out."""
    path, record = found
    if record.passed is not True:
        why = _one_line(record.reasons) or "no reason recorded"
        raise VerdictFailed(f"not publishing {target}: the newest smoke of this image (sha256 "
                            f"{sha256[:12]}) FAILED ({path}, {record.date}): {why}; "
                            "fix it and run the smoke again")
    if reasons := evidence_reasons(path, record, sha256=sha256, gpu=gpu, labels=labels):
        raise VerdictFailed(f"not publishing {target}: {path} says passed but its run's own "
                            f"files do not: {_one_line(reasons)}; run the smoke again")


def smoke_summary(path: Path, record: Verdict, *, run_now: bool) -> dict:
    """What the catalogue keeps of a smoke verdict: enough to judge it without the file."""
    data = record.as_dict()
    return {**{k: data.get(k) for k in SMOKE_KEYS}, "verdict": str(path), "run_now": run_now,
            "performance_failed": bool(record.performance and record.performance.failed)}


def apptainer_test(runtime: Runtime, target: Target, image: Path, built: BuildRecord, *,
                   smoked: bool, say: Say) -> dict:
    """``apptainer test`` of ``image`` unless the build ran it (no ``%test`` is no pass)."""
    if not target.test:
        return {"passed": None, "how": "the definition has no %test"}
    if built.tested is False:
        return {"passed": None, "how": "its build ran no %test"}
    if smoked and built.tested is True:
        return {"passed": True, "how": "at build (provenance)", "date": built.build_date}
    argv = runtime.test_argv(image, binds=emulated_binds(target.arch))
    say(f"checks: {' '.join(argv)}")
    try:
        run(argv, timeout=600, on_line=lambda line: say(f"  {line}")).check("apptainer test")
    except CommandFailed as exc:
        raise VerdictFailed(f"not publishing {target.name}: {exc}") from exc
    return {"passed": True, "how": "run now", "date": utc_now()}


def skipped(target: str, say: Say) -> dict:
    """The record of ``--skip-checks``, announced so nobody misses it."""
    banner = "!" * 72
    warning = (f"WARNING: --skip-checks: {target} is published WITHOUT "
               "apptainer test and smoke checks.")
    for line in (banner, warning,
                 "This is recorded in its catalogue entry (checks.skipped = true).", banner):
        say(line)
    return {"skipped": True, "apptainer_test": None, "smoke": None}


def _read_status(path: Path) -> RunStatus | str:
    """The run record at ``path``, or why it is none (not the user's alone, invalid)."""
    try:
        why = not_yours_alone(path, os.lstat(path))
        return f"it {why}" if why else RunStatus.of(
            read_regular_json(path, limit=STATUS_LIMIT), source=path)
    except Malformed as exc:
        return f"it does not validate: {exc.problem}"
    except (OSError, ValueError) as exc:
        return f"it is unreadable: {exc}"


def _not_of_image(record: RunStatus, target: str, sha256: str | None) -> str | None:
    """Why a valid run record is not of exactly this image, else None."""
    if not record.sha256:
        return "it names no image (written before runs recorded their image's sha256)"
    if not sha256 or record.sha256 != sha256:
        return f"a run of another image (sha256 {record.sha256[:12]})"
    return None if record.target == target else f"a run of target {record.target!r}"


def _not_passed(record: RunStatus) -> str | None:
    """Why a run of this image proves nothing, else None."""
    if record.exit_status is None:
        return "its device gate failed: the command never started"
    if record.exit_status != 0 or record.interrupted:
        return (f"it ended with exit {record.exit_status}"
                + (" (interrupted)" if record.interrupted else ""))
    if not _dated(record.date):
        return f"it has no date ({record.date!r}), so it cannot be ranked"
    return None


def find_run(results_dir: Path, target: str, sha256: str | None
             ) -> tuple[tuple[Path, RunStatus] | None, list[str]]:
    """The newest passing ``invoke run`` of this image not since failed, else why none."""
    ran: list[tuple[Path, RunStatus]] = []
    why_not: list[str] = []
    for path in sorted((results_dir / RUN_KIND).glob(f"{target}-*/status.json")):
        record = _read_status(path)
        why = record if isinstance(record, str) else _not_of_image(record, target, sha256)
        if why:
            why_not.append(f"{path}: {why}")
        else:
            ran.append((path, record))
    ran.sort(key=lambda item: (not _dated(item[1].date), item[1].date or ""))
    newest = {tuple(record.command): path for path, record in ran}
    for path, record in reversed(ran):
        later = newest[tuple(record.command)]
        why = _not_passed(record) or (None if later == path else
                                      f"the same command's newer run ({later}) is no proof")
        if why is None:
            return (path, record), []
        why_not.append(f"{path}: {why}")
    return None, why_not


def _not_counted(why_not: list[str]) -> str:
    """The records a refusal found, each with why it is no proof (the first :data:`LISTED`)."""
    if not why_not:
        return ""
    more = f"; and {len(why_not) - LISTED} more" if len(why_not) > LISTED else ""
    return f"; found, not counted: {'; '.join(why_not[:LISTED])}{more}"


def proof_of(run: RunStatus) -> str:
    """A passing run's proof in the catalogue's words."""
    return f"proof: the run of `{show_command(run.command)}` (exit {run.exit_status})"


def without_torch(target: Target, provenance: BuildRecord, *, results_dir: Path,
                  say: Say) -> dict:
    """An image without torch: its ``%test`` at build, else a passing ``invoke run``."""
    checks = {"skipped": False, "smoke": None, "proof": NO_TORCH_PROOF}
    if provenance.tested is True:
        say(f"checks: {target.name} holds no torch ({NO_TORCH_PROOF}); its %test passed at build")
        return {**checks, "apptainer_test": {"passed": True, "how": "at build (provenance)",
                                             "date": provenance.build_date}}
    found, why_not = find_run(results_dir, target.name, provenance.sha256)
    if found is None:
        raise VerdictFailed(
            f"not publishing {target.name}: it holds no torch, so no smoke can prove it; its "
            f"build ran no %test, and no passing run of this image (sha256 "
            f"{str(provenance.sha256)[:12]}) is in {results_dir / RUN_KIND}: run `invoke run "
            f"--target {target.name} --no-launcher -- <a command that checks the image>`, "
            "then publish again (or give its definition a %test, or publish with "
            "--skip-checks, recorded)" + _not_counted(why_not))
    path, run = found
    say(f"checks: {target.name} holds no torch ({NO_TORCH_PROOF}); {proof_of(run)} on "
        f"{run.date} ({path})")
    return {**checks, "apptainer_test": {"passed": None, "how": "its build ran no %test"},
            "run": {**run.as_dict(), "file": str(path)}}


def ensure_checks(runtime: Runtime, *, target: Target, image: Path, provenance: Mapping,
                  results_dir: Path, quick_check: QuickCheck, say: Say,
                  gpu: Gpu = Gpu.NONE, gpus_here: Collection[Gpu] = ()) -> dict:
    """The checks record for the catalogue; :class:`VerdictFailed` when one fails."""
    provenance = BuildRecord.of(provenance, source=image)
    if holds_no_torch(provenance.stack or {}, provenance.probe_errors):
        return without_torch(target, provenance, results_dir=results_dir, say=say)
    sha = provenance.sha256
    found = find_verdict(results_dir, target.name, sha, gpu=gpu)
    if found is None and gpu != Gpu.NONE and gpu not in gpus_here:
        raise VerdictFailed(
            f"not publishing {target.name}: no passing smoke verdict of this image (sha256 "
            f"{sha[:12]}) on {Gpu(gpu).vendor} GPUs in {results_dir / 'smoke'}, and this "
            f"machine has no {Gpu(gpu).vendor} GPUs to run one: run `invoke job --target "
            f"{target.name} --workload smoke --submit` on the site's GPU nodes (its verdict "
            "lands in the shared results folder), then publish again; or publish with "
            "--skip-checks, which the catalogue records")
    if found is not None:
        refuse_unproven(found, target=target.name, sha256=sha, gpu=gpu, labels=provenance.labels)
    test = apptainer_test(runtime, target, image, provenance, smoked=found is not None, say=say)
    if found is not None:
        say(f"checks: passing smoke verdict for this image (sha256 {sha[:12]}): {found[0]}")
        return {"skipped": False, "apptainer_test": test,
                "smoke": smoke_summary(*found, run_now=False)}
    say(f"checks: no passing smoke verdict for sha256 {sha[:12]}; running the quick check")
    try:
        quick_check(lambda line: say(f"  {line}"))
    except VerdictFailed as exc:
        raise VerdictFailed(f"not publishing {target.name}: {exc}") from exc
    except PerformanceFailed as exc:
        # Only the sanity gate blocks publishing; a slow run is recorded with the verdict.
        say(f"checks: WARNING: {exc}")
    found = find_verdict(results_dir, target.name, sha, gpu=gpu)
    if found is None:
        why = (f"whose ranks ran on {Gpu(gpu).vendor} GPUs (run the smoke on the site's GPU "
               "nodes, e.g. as a batch job, then publish)" if gpu != Gpu.NONE
               else "(was it rebuilt meanwhile?)")
        raise VerdictFailed(f"not publishing {target.name}: the quick check passed but wrote "
                            f"no smoke verdict for this image's sha256 {why}")
    refuse_unproven(found, target=target.name, sha256=sha, gpu=gpu, labels=provenance.labels)
    return {"skipped": False, "apptainer_test": test,
            "smoke": smoke_summary(*found, run_now=True)}
