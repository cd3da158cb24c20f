"""Side by side, in one run: how fast mksquashfs packs a built image's root file system, and how
big and how fast to read back, for each compression a build may use.

The root is the image's own (unpacked once from its SIF into a temporary folder); each
compression packs it with the same mksquashfs the builds use, and its listing must be the
first one's (names, modes, sizes, link targets). Reading back is not timed: unpacking onto this
machine's ext4 measures the file system (inodes freed by the unpack before), not the
decompressor; zstd decompresses faster than gzip (the kernel's squashfs zstd commit,
torvalds/linux 87bf54bb43dd, measured 210-225 MB/s against gzip's 128).
Ratios are against Apptainer's own gzip -9. ``containers.squashfs`` (auto: zstd level 1 with
Apptainer) was chosen from this table; publish refuses a compression a site's runtime is not
known to read (``squashfs.reads`` in its profile).

Usage: ``python benchmarks/squashfs.py [--target cpu] [--image PATH] [--choices gzip-9,zstd-1]
[--tmp /var/tmp]``.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, report

from containers.app.project import Project
from containers.image.arch import squashfs_offset

#: (label, mksquashfs arguments), Apptainer's own first: every ratio is against it.
CHOICES = {"gzip-9": ("gzip -9 (Apptainer's own)", ["-comp", "gzip"]),
           "gzip-1": ("gzip -1", ["-comp", "gzip", "-Xcompression-level", "1"]),
           "zstd-1": ("zstd -1 (the default)", ["-comp", "zstd", "-Xcompression-level", "1"]),
           "zstd-3": ("zstd -3", ["-comp", "zstd", "-Xcompression-level", "3"]),
           "lz4": ("lz4", ["-comp", "lz4"])}


def listing(squashfs: Path) -> list[str]:
    """What a reader sees: every entry's mode, size and name (dates and owners left out)."""
    out = subprocess.run(["unsquashfs", "-lls", "-n", str(squashfs)], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    return sorted(" ".join(line.split()[:1] + line.split()[2:3] + line.split()[5:])
                  for line in out.splitlines() if line.startswith(("-", "d", "l")))


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, timeout=3600, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(root: Path, work: Path, keys: list[str]) -> tuple[list[dict], list[str]]:
    """Each choice's pack seconds and size; the listing every one must give back."""
    rows, expected = [], None
    for label, args in (CHOICES[key] for key in keys):
        out = work / "image.sqfs"
        pack = timed(["mksquashfs", str(root), str(out), "-noappend", "-quiet", *args])
        seen = listing(out)
        expected = expected or seen
        if seen != expected:
            raise SystemExit(f"{label}: the unpacked listing differs from {rows[0]['label']}'s")
        rows.append({"label": label, "args": args, "pack_s": pack, "bytes": out.stat().st_size})
        print(f"[{label}] packed in {pack:.1f} s, {out.stat().st_size / 1e6:.0f} MB",
              flush=True)
        out.unlink()
    return rows, expected or []


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", help="built target whose image to use")
    parser.add_argument("--image", type=Path, default=None, help="a SIF (default: the target's)")
    parser.add_argument("--tmp", type=Path, default=Path("/var/tmp"), help="work folder's parent")
    parser.add_argument("--choices", default=",".join(CHOICES),
                        help="which, comma-separated, the first the base of the ratios "
                        "(default: %(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "squashfs.json",
                        help="JSON result file")
    args = parser.parse_args(argv)
    keys = args.choices.split(",")
    if not keys or not set(keys) <= set(CHOICES):
        parser.error(f"--choices: each one of {', '.join(CHOICES)}")
    project = Project.load(ROOT)
    image = args.image or project.settings.image_path(args.target)
    runtime = project.runtime(required=True)
    with tempfile.TemporaryDirectory(prefix="bench-squashfs-", dir=args.tmp) as tmp:
        work = Path(tmp)
        subprocess.run(["unsquashfs", "-q", "-n", "-o", str(squashfs_offset(runtime, image)),
                        "-d", str(work / "root"), str(image)], check=True, timeout=3600,
                       stdout=subprocess.DEVNULL)
        rows, entries = measure(work / "root", work, keys)
    base = rows[0]
    title = (f"squashfs of {image.name}'s root ({len(entries)} entries), one run, ratios to "
             f"{base['label']}")
    report(title, ["compression", "pack (s)", "pack ratio", "size (MB)", "size ratio"],
           [[r["label"], f"{r['pack_s']:.1f}", f"{r['pack_s'] / base['pack_s']:.2f}",
             f"{r['bytes'] / 1e6:.0f}", f"{r['bytes'] / base['bytes']:.2f}"] for r in rows],
           args.out, {"title": title, "image": str(image), "entries": len(entries),
                      "rows": rows})


if __name__ == "__main__":
    main()
