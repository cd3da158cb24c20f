"""Side by side, in one run: the same DDP training inside the CPU image and on the host.

Runs ``jobs/train.py --example ddp`` with 2 ranks (gloo) on the host under torchrun and inside the
image with the exact argv ``invoke train`` runs, interleaved and repeated; keeps the best global
throughput of each and prints the ratio image/host (container overhead on training).
Usage: ``python benchmarks/train_image_vs_host.py [--model cnn] [--repeat 2]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from common import ROOT, parser, report, run_checked

from containers.app.project import Project
from containers.prove.kind import plan as plan_run
from containers.prove.train import TrainOptions


def main() -> None:
    flags = parser(__doc__, out_name="train_image_vs_host.json")
    flags.add_argument("--model", default="cnn", help="vit, wideresnet, cnn or resnet")
    flags.add_argument("--model-size", default="small", help="tiny, small or base")
    flags.add_argument("--epochs", type=int, default=3, help="epochs per run")
    flags.add_argument("--samples", type=int, default=8192, help="synthetic samples")
    args = flags.parse_args()
    project = Project.load(ROOT, {})
    target = project.target(args.target)
    options = TrainOptions(example="ddp", gpus=args.ranks, model=args.model,
                           model_size=args.model_size, epochs=args.epochs,
                           samples=args.samples, batch_size=64 * args.ranks)
    workload_args = ["--example", "ddp", "--model", args.model, "--model-size",
                     args.model_size, "--epochs", str(args.epochs), "--samples",
                     str(args.samples), "--batch-size", str(options.batch_size)]
    best = {"host": 0.0, "image": 0.0}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        for repeat in range(args.repeat):
            print(f"== repetition {repeat + 1}/{args.repeat}", flush=True)
            host_out = Path(tmp) / f"host-{repeat}"
            run_checked([sys.executable, "-m", "torch.distributed.run", "--standalone",
                         f"--nproc-per-node={args.ranks}", str(ROOT / "jobs" / "train.py"),
                         *workload_args, "--out", str(host_out)], label="host")
            plan = plan_run(target, project.site_of(target), settings=project.settings,
                              runtime=project.runtime(), options=options,
                              run_id=f"bench-{repeat}")
            plan.out_dir.mkdir(parents=True, exist_ok=True)
            run_checked(plan.argv, label="image")
            for name, folder in (("host", host_out), ("image", plan.out_dir)):
                data = json.loads((folder / "train.json").read_text())
                best[name] = max(best[name], data["throughput"])
    ratio = best["image"] / best["host"]
    report(f"DDP {args.model} ({args.model_size}), {args.ranks} ranks, best of {args.repeat}",
           ["host samples/s", "image samples/s", "image/host"],
           [[f"{best['host']:.1f}", f"{best['image']:.1f}", f"{ratio:.2f}"]], args.out,
           {"model": args.model, "model_size": args.model_size, "ranks": args.ranks,
            "throughput": best, "ratio": ratio})


if __name__ == "__main__":
    main()
