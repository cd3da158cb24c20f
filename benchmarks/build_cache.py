"""Side by side, in one run: a cold image build (empty package cache) against the rebuild after a
one-package change of its env spec, with the warm package cache and without it (--no-cache).

Each repetition works in a fresh temporary folder (images, package cache, build work) on a copy
of the project's inputs, timing ``containers.app.build`` (the code ``invoke build`` runs):

1. cold: the target and its bases, package cache empty (a full build, which keeps its root);
2. warm: one package added to the target's env spec (its ``pip:`` list), rebuilt: only the
   target rebuilds, from the root the cold build kept (its record says so);
3. floor: ``mksquashfs`` of the rebuilt root at the build's settings, what any rebuild pays;
4. no cache: the same changed build again with ``--no-cache --force`` (a clean build).

Each phase starts on a settled filesystem (:func:`settle`: written out, the disk idle, and
creating a file quick again), so that no phase pays for the one before it; what each waited for
is in the JSON.

The warm and no-cache images must be identical (:func:`content`: every entry of the root file
system with its mode, owner and content, ``pip freeze``, the labels but their dates, the
definition but the work folder it names); a difference fails the benchmark. Medians over
``--repeat`` repetitions; the goals: rebuild/cold <= 0.3 and rebuild/floor <= 3.

Usage: ``python benchmarks/build_cache.py [--target cpu] [--package six] [--repeat 3]
[--squashfs auto] [--squashfs-level 9] [--skip-no-cache] [--keep DIR]``; the defaults are the
tool's; ``--bases DIR`` links already built bases from an images folder (only the target is
measured; the tests' CI-sized run), ``--project DIR`` measures another project's inputs,
``--keep DIR`` keeps each phase's image and the package cache to look into (the tests do).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from common import ROOT, report

from containers.app.build import build
from containers.app.project import Project
from containers.files import atomic_write_text
from containers.host.runtime import Runtime
from containers.image.arch import squashfs_offset
from containers.image.cache import package_cache_dir, usage
from containers.image.plan import squashfs_env
from containers.image.provenance import labels_of
from containers.report import new_figure, save_figure
from containers.inputs.recipes import base_chain
from containers.inputs.settings import SQUASHFS_DEFAULT_LEVEL

GOAL = 0.3
#: The rebuild's goal over the floor (mksquashfs of the rebuilt root at the build's settings).
FLOOR_GOAL = 3.0
#: Seconds each phase starts after the one before (:func:`settle`).
WINDOW_S = 240.0
#: The folders a project's inputs live in (what ``invoke build`` reads).
INPUTS = ("recipes", "envs", "sites", "jobs")
#: What differs between any two builds of the same inputs, compared apart (:func:`content`):
#: the definition as rendered (it names the build's own work folder) and the labels (dated).
VARIES = ("/.singularity.d/Singularity", "/.singularity.d/labels.json")
#: The labels that date a build.
DATED = ("containers.build-date", "org.label-schema.build-date")
#: A build's own work folder, as the rendered definition names it (``<target>-<12 hex>-<8>``).
WORK_FOLDER = re.compile(r"/[^/\s]+-[0-9a-f]{12}-[A-Za-z0-9_]{8}/")


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


def link_bases(project: Project, target: str, bases: Path, images: Path) -> list[str]:
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


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` but :data:`VARIES`: its type and mode, owner, and content
    (a file's sha256, a link's target)."""
    out = {}
    for parent, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(parent, name)
            rel = "/" + os.path.relpath(path, root)
            info = os.lstat(path)
            if rel in VARIES:
                continue
            what = (os.readlink(path) if stat.S_ISLNK(info.st_mode) else
                    hashlib.sha256(Path(path).read_bytes()).hexdigest()
                    if stat.S_ISREG(info.st_mode) else "")
            out[rel] = f"{stat.filemode(info.st_mode)} {info.st_uid}:{info.st_gid} {what}"
    return out


def content(image: Path, runtime: Runtime) -> dict[str, Any]:
    """What a build of ``image`` made: every entry of its root file system (:func:`tree`, as
    unsquashfs unpacks it), its ``pip freeze`` (run by its own Python), its labels but the
    dates, and its definition with the build's work folder left out."""
    with tempfile.TemporaryDirectory(prefix="content-", dir=image.parent) as folder:
        root = Path(folder) / "root"
        subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-o",
                        str(squashfs_offset(runtime, image)), "-d", str(root), str(image)],
                       check=True, capture_output=True, timeout=900)
        files = tree(root)
    done = subprocess.run(runtime.exec_argv(image=image, command=["python", "-m", "pip", "freeze"],
                                            options=["--contain"]),
                          capture_output=True, text=True, timeout=900, check=True)
    labels = {key: value for key, value in labels_of(runtime, image).items() if key not in DATED}
    definition = subprocess.run([runtime.binary, "inspect", "--deffile", str(image)],
                                capture_output=True, text=True, check=True).stdout
    return {"files": files, "pip_freeze": sorted(done.stdout.splitlines()), "labels": labels,
            "definition": [WORK_FOLDER.sub("/<work>/", line) for line in definition.splitlines()
                           if not any(label in line for label in DATED)]}


def compared(one: dict[str, Any], two: dict[str, Any]) -> list[str]:
    """What differs between two :func:`content` readings, in words (none: the same image)."""
    files = sorted(path for path in one["files"].keys() | two["files"].keys()
                   if one["files"].get(path) != two["files"].get(path))
    found = [f"{len(files)} entries differ, first {files[:10]}"] if files else []
    return found + [f"{key} differs" for key in ("pip_freeze", "labels", "definition")
                    if one[key] != two[key]]


def cache_use(images: Path, target: str) -> dict[str, Any] | None:
    """How the target's last build used the package cache, from its build record."""
    return json.loads((images / f"{target}.sif.json").read_text()).get("package_cache")


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
    # --settle-s 0: written out, no wait (a run that judges no ratio, beside other work)
    while window_s > 0 and time.monotonic() - started < limit_s:
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
    waited for is added to ``settled``); the lines it says about the kept root go to
    ``kept``."""
    def say(line: str) -> None:
        print(f"[{label}] {line}", flush=True)
        if kept is not None and "kept root: " in line:
            kept.append(line.split("kept root: ", 1)[1])

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
    project = Project.load(root, config)
    linked = link_bases(project, args.target, args.bases, images) if args.bases else []
    runtime = project.runtime(required=True)
    tag = f"{number}/{args.repeat}"
    settled: list[dict[str, Any]] = []

    def phase(label: str, kept: list[str] | None = None, **options: Any) -> float:
        seconds = timed(f"{label} {tag}", lambda say: build(project, target=args.target,
                                                                say=say, **options),
                        tmp, settled, args.settle_s, kept)
        if args.keep:
            for suffix in (".sif", ".sif.json"):
                os.link(images / f"{args.target}{suffix}",
                        args.keep / f"{label.replace(' ', '_')}-{number}{suffix}")
        return seconds

    seconds = {"cold": phase("cold")}
    cache_after_cold = usage(package_cache_dir(cache))[0]
    add_package(root / project.target(args.target).env, args.package)
    project = Project.load(root, config)  # targets are read once per project
    kept: list[str] = []
    seconds["warm"] = phase("warm", kept)
    warm_record = json.loads((images / f"{args.target}.sif.json").read_text())
    if warm_record.get("made_from") in (None, "full"):
        raise SystemExit(f"the warm build was not made from the kept root: {kept}")
    seconds["floor"] = timed(f"floor {tag}", lambda say: floor(project, runtime, cache, tmp),
                             tmp, settled, args.settle_s)
    result = {"seconds": seconds, "bases_linked": linked, "cache_bytes": cache_after_cold,
              "warm_cache_use": warm_record["package_cache"], "warm_made_from":
              warm_record["made_from"], "warm_kept_root": kept, "settled": settled}
    warm = content(images / f"{args.target}.sif", runtime)
    if not any(line.lower().startswith(args.package.lower() + "==")
               for line in warm["pip_freeze"]):
        raise SystemExit(f"the warm image's pip freeze lacks {args.package}: the change did "
                         "not reach the image")
    if args.skip_no_cache:  # an image of gigabytes: the third build is left out
        return {**result, "files_compared": 0, "pip_freeze": warm["pip_freeze"]}
    seconds["no_cache"] = phase("no cache", force=True, no_cache=True)
    if cache_use(images, args.target) is not None:
        raise SystemExit("the --no-cache build's record says it used the cache")
    differ = compared(warm, content(images / f"{args.target}.sif", runtime))
    if differ:
        raise SystemExit(f"the warm and no-cache images differ: {'; '.join(differ)}")
    if args.keep:
        shutil.move(cache, args.keep / f"cache-{number}")
    return {**result, "files_compared": len(warm["files"]), "pip_freeze": warm["pip_freeze"]}


def floor(project: Project, runtime: Runtime, cache: Path, tmp: Path) -> None:
    """The floor any rebuild pays: ``mksquashfs`` of the rebuilt root file system (the one the
    warm build kept) at the build's settings."""
    [root] = (package_cache_dir(cache) / "roots").glob("*/root")
    options = squashfs_env(project.settings, runtime).get("APPTAINER_MKSQUASHFS_ARGS",
                                                          "-comp gzip")
    out = tmp / "floor.squashfs"
    subprocess.run(["mksquashfs", str(root), str(out), "-noappend", *options.split()],
                   check=True, capture_output=True)
    out.unlink()


def plot(medians: dict[str, float], path: Path, title: str) -> Path:
    """The three medians as bars, each labelled with its share of the cold build."""
    labels = {"cold": "cold\n(empty cache)", "warm": "+1 package\nkept root",
              "floor": "floor\n(mksquashfs)", "no_cache": "+1 package\n--no-cache"}
    fig, ax = new_figure((7.2, 4.2))
    bars = ax.bar([labels[k] for k in medians], list(medians.values()),
                  color=["tab:grey", "tab:blue", "tab:green", "tab:orange"][:len(medians)])
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
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder on --tmp's file system to keep each phase's image and "
                        "record in (hard links, <phase>-<repetition>.sif) and, after a full "
                        "repetition, its package cache (cache-<repetition>)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" /
                        "build_cache.json", help="JSON result file (the PNG goes beside it)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    runs = []
    for number in range(1, args.repeat + 1):
        with tempfile.TemporaryDirectory(prefix="bench-build-cache-", dir=args.tmp) as tmp:
            runs.append(repetition(args, number, Path(tmp)))
    medians = {key: statistics.median(run["seconds"][key] for run in runs)
               for key in ("cold", "warm", "floor", "no_cache") if key in runs[0]["seconds"]}
    no_cache = medians.get("no_cache", float("nan"))
    ratio, over_floor = medians["warm"] / medians["cold"], medians["warm"] / medians["floor"]
    bases = runs[0]["bases_linked"]
    title = (f"{args.target}: +{args.package} rebuild vs cold build, median of {args.repeat}"
             + f", squashfs {args.squashfs}"
             + (f", gzip level {args.squashfs_level}"
                if args.squashfs_level != SQUASHFS_DEFAULT_LEVEL else "")
             + (f" (bases {', '.join(bases)} not rebuilt)" if bases else ""))
    report(title, ["cold, empty cache (s)", "+1 package, kept root (s)", "floor (s)",
                   "+1 package, --no-cache (s)", "rebuild/floor", "rebuild/cold", "goal",
                   "content"],
           [[f"{medians['cold']:.1f}", f"{medians['warm']:.1f}", f"{medians['floor']:.1f}",
             f"{no_cache:.1f}", f"{over_floor:.2f}", f"{ratio:.2f}",
             f"<= {FLOOR_GOAL} and <= {GOAL}",
             f"identical ({runs[0]['files_compared']} entries)" if "no_cache" in medians
             else "not compared (--skip-no-cache)"]],
           args.out, {"title": title, "target": args.target, "package": args.package,
                      "repeat": args.repeat, "squashfs_level": args.squashfs_level,
                      "squashfs": args.squashfs, "medians": medians, "ratio": ratio,
                      "floor_ratio": over_floor, "goal": GOAL, "floor_goal": FLOOR_GOAL,
                      "meets_goal": ratio <= GOAL and over_floor <= FLOOR_GOAL, "runs": runs})
    print(f"plot: {plot(medians, args.out.with_suffix('.png'), title)}")


if __name__ == "__main__":
    main()
