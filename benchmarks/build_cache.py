"""Side by side, in one run: a cold image build vs an unchanged rebuild (the inputs-hash no-op).

Builds ``--target`` (default ``debian-base``: the cheapest real build) into a fresh temporary
images folder, then asks for the same build again, timing both through ``containers.app.build``,
the code ``invoke build`` runs. Usage: ``python benchmarks/build_cache.py [--target T]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import ROOT, report

from containers import app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="debian-base", help="image target to build")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" /
                        "build_cache.json", help="JSON result file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-build-", dir="/var/tmp") as tmp:
        project = app.Project.load(ROOT, {"images_dir": tmp})
        timings = {}
        for label in ("cold", "unchanged"):
            started = time.perf_counter()
            app.build(project, target=args.target,
                      say=lambda line, label=label: print(f"[{label}] {line}", flush=True))
            timings[label] = time.perf_counter() - started
    ratio = timings["cold"] / timings["unchanged"]
    report(f"build of {args.target}: cold vs unchanged inputs",
           ["cold build (s)", "unchanged rebuild (s)", "cold/unchanged"],
           [[f"{timings['cold']:.1f}", f"{timings['unchanged']:.2f}", f"{ratio:.0f}x"]],
           args.out, {"target": args.target, "seconds": timings, "ratio": ratio})


if __name__ == "__main__":
    main()
