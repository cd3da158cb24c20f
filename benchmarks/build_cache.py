"""Side by side, in one run: a cold image build (empty package cache) against the rebuild after a
one-package change of its env spec, with the warm package cache and without it (--no-cache).

Each repetition works in a fresh temporary folder (images, package cache, build work) on a copy
of the project's inputs, timing ``containers.app.build`` (the code ``invoke build`` runs):

1. cold: the target and its bases, package cache empty;
2. warm: one package added to the target's env spec (its ``pip:`` list), rebuilt: only the
   target rebuilds, with the cache the cold build filled;
3. no cache: the same changed build again with ``--no-cache --force`` (what the rebuild cost
   before the cache existed).

Each phase starts on a settled filesystem (:func:`settle`: written out, the disk idle, and
creating a file quick again), so that no phase pays for the one before it; what each waited for
is in the JSON.

The warm and no-cache images must be identical in content: the same ``pip freeze`` and the same
sha256 of every file under /opt, /usr, /etc, /var/lib, /mnt (where the cache is bound) and /root
(bar the files the runtime injects at run time); a difference fails the benchmark. Medians over
``--repeat`` repetitions; the goal is warm/cold <= 0.3 (a one-package change rebuilds in a
fraction of a cold build).

Usage: ``python benchmarks/build_cache.py [--target cpu] [--package six] [--repeat 3]
[--squashfs auto] [--squashfs-level 9] [--skip-no-cache]``; the defaults are the tool's;
``--bases DIR`` links already built bases from an images folder (only the target is measured;
the tests' CI-sized run), ``--project DIR`` measures another project's inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from common import ROOT, report

from containers import app
from containers.files import atomic_write_text
from containers.host.runtime import Runtime
from containers.image.cache import package_cache_dir, usage
from containers.report import new_figure, save_figure
from containers.inputs.recipes import base_chain
from containers.inputs.settings import SQUASHFS_DEFAULT_LEVEL

GOAL = 0.3
#: Seconds each phase starts after the one before (:func:`settle`).
WINDOW_S = 240.0
#: The folders a project's inputs live in (what ``invoke build`` reads).
INPUTS = ("recipes", "envs", "sites", "jobs")
#: Files an ``apptainer exec`` injects or binds at run time: not the image's content.
INJECTED = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname",
            "/etc/localtime", "/etc/mtab")
#: Run by the image's own python3: the sha256 of every regular file under the content folders.
DIGEST = r"""
import hashlib, json, os, sys
injected = set(sys.argv[1:])
out = {}
for top in ("/opt", "/usr", "/etc", "/var/lib", "/mnt", "/root"):
    for parent, dirs, names in os.walk(top):
        dirs.sort()
        for name in names:
            path = os.path.join(parent, name)
            if path in injected or os.path.islink(path) or not os.path.isfile(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            out[path] = digest.hexdigest()
print(json.dumps(out))
"""


def add_package(spec: Path, package: str) -> None:
    """Add ``package`` to the env spec's ``pip:`` list (the one-package change a user makes)."""
    data = yaml.safe_load(spec.read_text())
    pip = next(item["pip"] for item in data["dependencies"] if isinstance(item, dict))
    if any(str(entry).split("=")[0].strip().lower() == package.lower() for entry in pip):
        raise SystemExit(f"{spec} already lists {package}: choose another --package")
    pip.append(package)
    atomic_write_text(spec, yaml.safe_dump(data, sort_keys=False))


def copy_inputs(source: Path, dest: Path) -> Path:
    for folder in INPUTS:
        shutil.copytree(source / folder, dest / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def link_bases(project: app.Project, target: str, bases: Path, images: Path) -> list[str]:
    """Link the target's built bases (image and record) from ``bases`` into ``images``."""
    linked = []
    for base in base_chain(project.targets, target)[:-1]:
        for suffix in (".sif", ".sif.json"):
            found = bases / f"{base.name}{suffix}"
            if not found.is_file():
                raise SystemExit(f"--bases {bases}: {found.name} is not there (build it first)")
            (images / found.name).symlink_to(found.resolve())
        linked.append(base.name)
    return linked


def content(image: Path, runtime: Runtime) -> tuple[list[str], dict[str, str]]:
    """(pip freeze, {path: sha256}) of ``image``, read by its own Python (``--contain``: no
    host folders over /root or the working folder)."""
    def run(argv: list[str]) -> str:
        done = subprocess.run(runtime.exec_argv(image=image, command=argv,
                                                options=["--contain"]),
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise SystemExit(f"reading {image} failed: {done.stderr.strip()[-500:]}")
        return done.stdout
    freeze = sorted(run(["python", "-m", "pip", "freeze"]).splitlines())
    return freeze, json.loads(run(["python3", "-c", DIGEST, *INJECTED]))


def cache_use(images: Path, target: str) -> dict[str, Any] | None:
    """How the target's last build used the package cache, from its build record."""
    return json.loads((images / f"{target}.sif.json").read_text()).get("package_cache")


def differences(one: dict[str, str], two: dict[str, str]) -> list[str]:
    return sorted(path for path in one.keys() | two.keys() if one.get(path) != two.get(path))


def disk_busy_ms() -> int:
    """Milliseconds the machine's disks have spent doing I/O (``/proc/diskstats``, every
    device but loop, RAM and zram ones): it stops growing once the disk is idle."""
    total = 0
    try:
        lines = Path("/proc/diskstats").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        fields = line.split()
        if len(fields) > 12 and not fields[2].startswith(("loop", "ram", "zram")):
            total += int(fields[12])
    return total


def create_us(folder: Path, count: int = 40) -> float:
    """Microseconds it takes to create an empty file in ``folder`` (mean of ``count``; the files
    are removed after)."""
    probe = Path(tempfile.mkdtemp(prefix=".create-probe-", dir=folder))
    try:
        started = time.perf_counter()
        for number in range(count):
            (probe / str(number)).touch()
        return (time.perf_counter() - started) / count * 1e6
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def settle(say: Callable[[str], None], folder: Path, *, window_s: float = WINDOW_S,
           quiet_s: float = 2.0, create_limit_us: float = 100.0,
           limit_s: float = 420.0) -> dict[str, float]:
    """Start each phase on a filesystem in the same state: the files of the phase before are
    written out (``sync``), ``window_s`` have passed since, the disk has done no I/O for
    ``quiet_s``, and creating a file in ``folder`` is quick.

    The window is this machine's: its root is ext4 without a journal, where the kernel will not
    reuse an inode freed in the last 60 s (5 min more while its table block is unwritten:
    ``recently_deleted()`` in fs/ext4/ialloc.c) and scans past every such inode for each new
    file. A build removes its ~1 GB work tree when it ends, so the phase right after it paid up
    to 1 ms for each file it made: unsquashing the 9213-entry base took 6-7 s within 90 s of a
    build's end (65 s after a ``sync`` too), 1.6 s three minutes after (``perf``:
    ``recently_deleted`` and ``find_get_block_common`` on top). Creating a file in one folder
    turns quick sooner than in all of them, hence the fixed window. Journalled ext4, XFS and
    tmpfs have no such window; a user who edits an env spec seldom rebuilds within it.
    Returns what it waited for (seconds; creating a file, in µs, before and after)."""
    started = time.monotonic()
    os.sync()
    first = create_us(folder)
    last, quiet_since = disk_busy_ms(), time.monotonic()
    while time.monotonic() - started < limit_s:
        time.sleep(0.25)
        now = disk_busy_ms()
        if now != last:
            last, quiet_since = now, time.monotonic()
        if time.monotonic() - quiet_since >= quiet_s and time.monotonic() - started >= window_s:
            create = create_us(folder)
            if create <= create_limit_us:
                break
            time.sleep(1.0)
    else:
        create = create_us(folder)
    waited = time.monotonic() - started
    say(f"settled in {waited:.1f} s (sync, {window_s:.0f} s window, {quiet_s:.0f} s without "
        f"disk I/O; creating a file {first:.0f} -> {create:.0f} us)")
    return {"seconds": round(waited, 1), "create_us_before": round(first),
            "create_us_after": round(create)}


def timed(label: str, action: Callable[[Callable[[str], None]], Any], folder: Path,
          settled: list[dict[str, Any]], window_s: float,
          kept: list[str] | None = None) -> float:
    """Seconds ``action`` takes, started on a settled filesystem (:func:`settle`; what it
    waited for is added to ``settled``); the lines it says about environment snapshots go to
    ``kept``."""
    def say(line: str) -> None:
        print(f"[{label}] {line}", flush=True)
        if kept is not None and "environment snapshot: " in line:
            kept.append(line.split("environment snapshot: ", 1)[1])

    settled.append({"phase": label, **settle(say, folder, window_s=window_s)})
    started = time.perf_counter()
    action(say)
    seconds = time.perf_counter() - started
    print(f"[{label}] {seconds:.1f} s", flush=True)
    return seconds


def repetition(args: argparse.Namespace, number: int, tmp: Path) -> dict[str, Any]:
    root = copy_inputs(args.project, tmp / "project")
    images, cache = tmp / "images", tmp / "cache"
    images.mkdir()
    config = {"images_dir": str(images), "cache_dir": str(cache), "tmp_dir": str(tmp / "work"),
              "squashfs_level": args.squashfs_level, "squashfs": args.squashfs}
    project = app.Project.load(root, config)
    linked = link_bases(project, args.target, args.bases, images) if args.bases else []
    runtime = project.runtime(required=True)
    tag = f"{number}/{args.repeat}"
    settled: list[dict[str, Any]] = []

    def phase(label: str, kept: list[str] | None = None, **options: Any) -> float:
        return timed(f"{label} {tag}", lambda say: app.build(project, target=args.target,
                                                             say=say, **options),
                     tmp, settled, args.settle_s, kept)

    seconds = {"cold": phase("cold")}
    cache_after_cold = usage(package_cache_dir(cache))[0]
    add_package(root / project.target(args.target).env, args.package)
    project = app.Project.load(root, config)  # targets are read once per project
    snapshot: list[str] = []
    seconds["warm"] = phase("warm", snapshot)
    warm_use = cache_use(images, args.target)
    if not warm_use or not warm_use["bytes_before"]:
        raise SystemExit(f"the warm build did not use the filled cache: {warm_use}")
    warm = content(images / f"{args.target}.sif", runtime)
    if args.skip_no_cache:  # an image of gigabytes: the third build is left out
        return {"seconds": seconds, "bases_linked": linked, "cache_bytes": cache_after_cold,
                "warm_cache_use": warm_use, "warm_snapshot": snapshot, "files_compared": 0,
                "pip_freeze": warm[0], "settled": settled}
    seconds["no_cache"] = phase("no cache", force=True, no_cache=True)
    if cache_use(images, args.target) is not None:
        raise SystemExit("the --no-cache build's record says it used the cache")
    plain = content(images / f"{args.target}.sif", runtime)
    if not any(line.lower().startswith(args.package.lower() + "==") for line in warm[0]):
        raise SystemExit(f"the warm image's pip freeze lacks {args.package}: the change did "
                         "not reach the image")
    changed = differences(warm[1], plain[1])
    if warm[0] != plain[0] or changed:
        raise SystemExit(f"the warm and no-cache images differ: pip freeze "
                         f"{'differs' if warm[0] != plain[0] else 'is the same'}; "
                         f"{len(changed)} files differ, first {changed[:10]}")
    return {"seconds": seconds, "bases_linked": linked, "cache_bytes": cache_after_cold,
            "warm_cache_use": warm_use, "warm_snapshot": snapshot,
            "files_compared": len(plain[1]), "pip_freeze": warm[0], "settled": settled}


def plot(medians: dict[str, float], path: Path, title: str) -> Path:
    """The three medians as bars, each labelled with its share of the cold build."""
    labels = {"cold": "cold\n(empty cache)", "warm": "+1 package\nwarm cache",
              "no_cache": "+1 package\n--no-cache"}
    fig, ax = new_figure((6.4, 4.2))
    bars = ax.bar([labels[k] for k in medians], list(medians.values()),
                  color=["tab:grey", "tab:blue", "tab:orange"][:len(medians)])
    for bar, value in zip(bars, medians.values(), strict=True):
        ax.annotate(f"{value:.0f} s ({value / medians['cold']:.2f} of cold)",
                    (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points")
    ax.axhline(GOAL * medians["cold"], color="tab:green", linestyle="--",
               label=f"goal: {GOAL} of cold")
    ax.set_ylabel("build time, median (s)")
    ax.set_title(title)
    ax.margins(y=0.15)
    ax.legend(loc="upper right")
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", help="image target (apptainer, pip list)")
    parser.add_argument("--package", default="six", help="the package the change adds")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (median)")
    parser.add_argument("--project", type=Path, default=ROOT, help="project whose inputs to use")
    parser.add_argument("--bases", type=Path, default=None,
                        help="images folder with the target's bases built (not measured)")
    parser.add_argument("--squashfs-level", type=int, default=SQUASHFS_DEFAULT_LEVEL,
                        help="containers.squashfs_level of every build (default: %(default)s, "
                        "Apptainer's own gzip)")
    parser.add_argument("--squashfs", default="auto",
                        help="containers.squashfs of every build (default: %(default)s, the "
                        "tool's default)")
    parser.add_argument("--skip-no-cache", action="store_true",
                        help="leave out the --no-cache build and the content comparison")
    parser.add_argument("--settle-s", type=float, default=WINDOW_S,
                        help="seconds each phase waits after the one before ended (see "
                        "settle(); default %(default)s)")
    parser.add_argument("--tmp", type=Path, default=Path("/var/tmp"),
                        help="where each repetition's temporary folder goes")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" /
                        "build_cache.json", help="JSON result file (the PNG goes beside it)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    runs = []
    for number in range(1, args.repeat + 1):
        with tempfile.TemporaryDirectory(prefix="bench-build-cache-", dir=args.tmp) as tmp:
            runs.append(repetition(args, number, Path(tmp)))
    medians = {key: statistics.median(run["seconds"][key] for run in runs)
               for key in ("cold", "warm", "no_cache") if key in runs[0]["seconds"]}
    no_cache = medians.get("no_cache", float("nan"))
    ratio = medians["warm"] / medians["cold"]
    bases = runs[0]["bases_linked"]
    title = (f"{args.target}: +{args.package} rebuild vs cold build, median of {args.repeat}"
             + f", squashfs {args.squashfs}"
             + (f", gzip level {args.squashfs_level}"
                if args.squashfs_level != SQUASHFS_DEFAULT_LEVEL else "")
             + (f" (bases {', '.join(bases)} not rebuilt)" if bases else ""))
    report(title, ["cold, empty cache (s)", "+1 package, warm (s)",
                   "+1 package, --no-cache (s)", "warm/cold", "no-cache/cold", "goal",
                   "content"],
           [[f"{medians['cold']:.1f}", f"{medians['warm']:.1f}", f"{no_cache:.1f}",
             f"{ratio:.2f}", f"{no_cache / medians['cold']:.2f}", f"<= {GOAL}",
             f"identical ({runs[0]['files_compared']} files)" if "no_cache" in medians
             else "not compared (--skip-no-cache)"]],
           args.out, {"title": title, "target": args.target, "package": args.package,
                      "repeat": args.repeat, "squashfs_level": args.squashfs_level,
                      "squashfs": args.squashfs,
                      "medians": medians, "ratio": ratio,
                      "no_cache_ratio": (no_cache / medians["cold"] if "no_cache" in medians
                                         else None), "goal": GOAL,
                      "meets_goal": ratio <= GOAL, "runs": runs})
    print(f"plot: {plot(medians, args.out.with_suffix('.png'), title)}")


if __name__ == "__main__":
    main()
