"""Side by side, in one run: how long the command line takes to start, against invoke itself.

Each case is a fresh ``python -m invoke`` process, timed from start to exit (output discarded):

1. one-task file: ``invoke --list`` in a temporary folder whose ``tasks.py`` holds one task
   (invoke's own start, the floor every command pays);
2. ``invoke --list`` in the project (``tasks.py`` imported, every task's flags declared);
3. ``invoke targets``, as a user's second listing finds it: nothing it read has changed, so it
   shows what the first one kept (``containers/app/inputs.py``, keyed on their content);
   ``invoke targets, read afresh``: the same with nothing kept (an empty ``XDG_CACHE_HOME`` each
   run), as after an edit: the inputs loaded and checked, each target's inputs hash;
4. ``invoke build --target cpu`` with nothing to do: the image and its record are the current
   ones. It needs the built ``cpu`` image; when there is none (or it is stale) its row says so
   and nothing is built. The images are linked into a temporary folder (their records copied),
   so the measured build writes nothing beside them.

Every case runs once untimed first with ``invoke --write-pyc`` (invoke writes no bytecode
otherwise), as any run after a user's first one finds it; then the repetitions are interleaved
(one of each case, then again), so a busy moment falls on every case alike; the table shows each
case's median (and its CPU seconds, which a busy machine changes least) and its difference and
ratio to the one-task file. ``--against DIR`` measures another checkout's cases in the same
interleaving (e.g. the commit before a change) and gives each case's ratio to it. The goals
(issue 51): ``--list`` at most 0.1 s over the one-task file, ``targets`` at most 0.25 s, the
unchanged build at most 1 s, on a quiet machine.

Usage: ``python benchmarks/startup.py [--repeat 7] [--images DIR] [--project DIR]
[--against DIR]``; each checkout runs with its own ``containers`` first on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, report

from containers.files import atomic_write_text

#: A tasks file with one task: what invoke itself costs.
ONE_TASK = 'from invoke import task\n\n\n@task\ndef hello(c):\n    """Say hello."""\n'
#: case -> (the invoke arguments, where it runs: the project or the one-task folder).
CASES = {"one-task file": (["--list"], "one-task"),
         "invoke --list": (["--list"], "project"),
         "invoke targets": (["targets"], "project"),
         "invoke targets, read afresh": (["targets"], "project"),
         "unchanged build": (["build", "--target", "cpu"], "project")}
#: case -> (what it is judged by, the limit in seconds): over the one-task file, or its own.
GOALS = {"invoke --list": ("over", 0.1), "invoke targets": ("own", 0.25),
         "unchanged build": ("own", 1.0)}


def invoke(args: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds one ``python -m invoke ARGS`` takes in ``cwd``: on the clock, and of CPU (user
    and system, its children's too: what a busy machine changes least); a failure stops the
    benchmark."""
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    took = time.perf_counter() - started, _children_cpu() - cpu
    if done.returncode:
        raise SystemExit(f"invoke {' '.join(args)} in {cwd} failed (exit {done.returncode}): "
                         f"{done.stdout.decode(errors='replace')[-2000:]}")
    return took


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_state(project: Path, env: dict[str, str]) -> str:
    """The cpu target's state as ``invoke targets --json`` gives it (``built``: up to date)."""
    done = subprocess.run([sys.executable, "-m", "invoke", "targets", "--json"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600, check=True)
    return next((entry["state"] for entry in json.loads(done.stdout)
                 if entry["target"] == "cpu"), "not a target")


def stage_images(images: Path, into: Path) -> None:
    """Link the built images of ``images`` into ``into`` and copy their records: the measured
    build reads them and writes (its lock) only in ``into``."""
    for path in sorted(images.iterdir()):
        if path.name.endswith(".sif"):
            (into / path.name).symlink_to(path.resolve())
        elif path.name.endswith(".json"):
            shutil.copyfile(path, into / path.name)


def measure(cases: list[str], folders: dict[str, Path], envs: dict[str, dict[str, str]],
            repeat: int, *, warm: bool = False) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """(clock, CPU) seconds of each case of each checkout (``folders``' and ``envs``' keys:
    ``project`` and, when given, ``against``), ``repeat`` times, interleaved; ``warm``: with
    invoke writing bytecode."""
    seconds = {name: {case: [] for case in cases} for name in envs}
    for number in range(repeat):
        for case in cases:
            args, where = CASES[case]
            for name, env in envs.items():
                fresh = {"XDG_CACHE_HOME": tempfile.mkdtemp(dir=folders["one-task"].parent)} \
                    if case.endswith("read afresh") else {}
                seconds[name][case].append(invoke(
                    ["--write-pyc", *args] if warm else args,
                    cwd=folders[name if where == "project" else where], env={**env, **fresh}))
        print(f"repetition {number + 1}/{repeat}: " + ", ".join(
            f"{name} {case} {seconds[name][case][-1][0]:.3f} s" for case in cases
            for name in envs), flush=True)
    return seconds


def summary(seconds: dict[str, list[tuple[float, float]]], skipped: dict[str, str],
            against: dict[str, list[tuple[float, float]]] | None = None
            ) -> list[dict[str, Any]]:
    """One row per case: median and minimum on the clock, median CPU, the clock's difference
    and ratio to the one-task file (and to the same case of the ``against`` checkout), and its
    goal met or not; a case not measured says why."""
    floor = statistics.median(clock for clock, _ in seconds["one-task file"])
    rows = []
    for case in CASES:
        if case in skipped:
            rows.append({"case": case, "skipped": skipped[case]})
            continue
        median = statistics.median(clock for clock, _ in seconds[case])
        row: dict[str, Any] = {"case": case, "median_s": round(median, 4),
                               "min_s": round(min(clock for clock, _ in seconds[case]), 4),
                               "cpu_s": round(statistics.median(c for _, c in seconds[case]), 4),
                               "over_one_task_s": round(median - floor, 4),
                               "ratio": round(median / floor, 2), "samples": seconds[case]}
        if against is not None:
            row["vs_against"] = round(median / statistics.median(c for c, _ in against[case]), 2)
        if case in GOALS:
            judged, limit = GOALS[case]
            value = median - floor if judged == "over" else median
            row["goal"] = f"{'over one-task ' if judged == 'over' else ''}<= {limit:g} s"
            row["met"] = value <= limit
        rows.append(row)
    return rows


def table_rows(rows: list[dict[str, Any]], checkout: str) -> list[list[object]]:
    return [[checkout, row["case"], "-", "-", "-", "-", "-", "-", row["skipped"]]
            if "skipped" in row else
            [checkout, row["case"], f"{row['median_s']:.3f}", f"{row['min_s']:.3f}",
             f"{row['cpu_s']:.3f}", f"{row['over_one_task_s']:+.3f}", f"{row['ratio']:.2f}",
             f"{row['vs_against']:.2f}" if "vs_against" in row else "-",
             (f"{row['goal']}: {'met' if row['met'] else 'NOT met'}" if "goal" in row else "")]
            for row in rows]


def skipped_cases(project: Path, env: dict[str, str]) -> dict[str, str]:
    """The unchanged build, not measured where the cpu image is not the current one."""
    state = cpu_state(project, env)
    return {} if state == "built" else {
        "unchanged build": f"not measured: the cpu image is {state} (build it first: invoke "
                           "build --target cpu)"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved repetitions")
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout measured beside it (each case's ratio to it)")
    parser.add_argument("--images", type=Path, default=None,
                        help="folder of the built images (default: the project's images_dir)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "startup.json",
                        help="JSON result file")
    args = parser.parse_args(argv)
    checkouts = {"project": args.project.resolve(),
                 **({"against": args.against.resolve()} if args.against else {})}
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measured as users run it: with bytecode
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        # its own builds' work folder: another user's build there is a listing not kept
        env["INVOKE_CONTAINERS_TMP_DIR"] = str(Path(tmp) / "work")
        folders = {**checkouts, "one-task": Path(tmp) / "one-task"}
        folders["one-task"].mkdir()
        atomic_write_text(folders["one-task"] / "tasks.py", ONE_TASK)
        if args.images is not None:
            staged = Path(tmp) / "images"
            staged.mkdir()
            stage_images(args.images.resolve(), staged)
            env["INVOKE_CONTAINERS_IMAGES_DIR"] = str(staged)
        envs = {name: {**env, "PYTHONPATH": str(path)}  # its own containers first
                for name, path in checkouts.items()}
        skipped: dict[str, str] = {}
        for name in checkouts:  # a case is measured in every checkout or in none
            skipped.update(skipped_cases(checkouts[name], envs[name]))
        cases = [case for case in CASES if case not in skipped]
        measure(cases, folders, envs, 1, warm=True)  # untimed: each case's bytecode written
        seconds = measure(cases, folders, envs, args.repeat)
    rows = {name: summary(seconds[name], skipped, seconds.get("against")
                          if name == "project" else None) for name in checkouts}
    title = (f"start-up, medians of {args.repeat} interleaved runs ({checkouts['project']}"
             f"{'; against ' + str(args.against) if args.against else ''}; python "
             f"{sys.version.split()[0]})")
    report(title, ["checkout", "case", "median (s)", "min (s)", "CPU (s)", "over one-task (s)",
                   "ratio", "vs against", "goal"],
           [line for name in checkouts for line in table_rows(rows[name], name)], args.out,
           {"title": title, **{name: str(path) for name, path in checkouts.items()},
            "repeat": args.repeat, "rows": rows["project"],
            **({"against_rows": rows["against"]} if args.against else {})})


if __name__ == "__main__":
    main()
