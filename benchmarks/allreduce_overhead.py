"""Side by side, in one run: the smoke harness vs a bare all_reduce loop, and image vs host.

Three runs of the same gloo all_reduce (2 ranks, message sizes >= 16 MiB), repeated and
interleaved so that machine noise hits all of them alike; the best busbw of each is kept:

* bare:   ``benchmarks/bare_allreduce.py`` on the host (one timing bracket, no checks);
* host:   the smoke benchmark ``jobs/allreduce.py`` on the host;
* image:  the same benchmark inside the CPU image, with the exact argv ``invoke smoke`` runs.

Ratios: host/bare (harness overhead; in-place busbw, as the bare loop is in place) and image/host
(container overhead). Usage: ``python benchmarks/allreduce_overhead.py [--ranks 2] [--repeat 2]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from common import ROOT, parser, report, run_checked

from containers.app.project import Project
from containers.prove.kind import plan as plan_run
from containers.prove.smoke import SmokeOptions

SIZES = [16 << 20, 32 << 20, 64 << 20]


def main() -> None:
    flags = parser(__doc__, out_name="allreduce_overhead.json")
    flags.add_argument("--iters", type=int, default=10, help="timed iterations per size")
    args = flags.parse_args()
    project = Project.load(ROOT, {})
    target = project.target(args.target)
    runtime = project.runtime()
    sizes = ",".join(str(s) for s in SIZES)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={args.ranks}"]
    best: dict[str, dict[int, float]] = {"bare": {}, "host": {}, "image": {}}
    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as tmp:
        for repeat in range(args.repeat):
            print(f"== repetition {repeat + 1}/{args.repeat}", flush=True)
            for line in run_checked(torchrun + [str(ROOT / "benchmarks" / "bare_allreduce.py"),
                                                sizes, str(args.iters), "3"], label="bare"):
                if line.startswith("BARE "):
                    _, size, _, busbw = line.split()
                    best["bare"][int(size)] = max(best["bare"].get(int(size), 0), float(busbw))
            host_out = Path(tmp) / f"host-{repeat}"
            run_checked(torchrun + [str(ROOT / "jobs" / "allreduce.py"), "--sizes", sizes,
                                    "--iters", str(args.iters), "--warmup", "3",
                                    "--out", str(host_out)], label="host")
            options = SmokeOptions(gpus=args.ranks, sizes=sizes, iters=args.iters, warmup=3,
                                   timeout=600)
            plan = plan_run(target, project.site_of(target), settings=project.settings,
                              runtime=runtime, options=options, run_id=f"bench-{repeat}")
            plan.out_dir.mkdir(parents=True, exist_ok=True)
            run_checked(plan.argv, label="image")
            for name, folder in (("host", host_out), ("image", plan.out_dir)):
                data = json.loads((folder / "allreduce.json").read_text())
                for row in data["results"]:
                    size = row["bytes"]
                    best[name][size] = max(best[name].get(size, 0), row["ip"]["busbw"])
    rows = []
    for size in SIZES:
        bare, host, image = best["bare"][size], best["host"][size], best["image"][size]
        rows.append([f"{size >> 20} MiB", f"{bare:.3f}", f"{host:.3f}", f"{image:.3f}",
                     f"{host / bare:.2f}", f"{image / host:.2f}"])
    report(f"all_reduce busbw (GB/s, best of {args.repeat}), {args.ranks} ranks, gloo",
           ["size", "bare loop", "harness host", "harness image", "host/bare", "image/host"],
           rows, args.out, {"ranks": args.ranks, "iters": args.iters, "repeat": args.repeat,
                            "busbw": {k: {str(s): v for s, v in d.items()}
                                      for k, d in best.items()}})


if __name__ == "__main__":
    main()
