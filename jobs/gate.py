"""The device gate before a user's own command (``invoke run``): one short process per node that
checks, with the same rule every workload of this tool applies to itself (``devices.missing_gpu``),
that each local rank of the coming run will have a usable GPU of the site's kind.

A missing ``--nv``/``--rocm``, an empty visible-devices variable or a CPU build of torch then
fails in one line, exit 2, before the user's command starts and node hours are spent. Needs
torch only, like every script in ``jobs/``.
"""

from __future__ import annotations

import argparse
import socket
import sys

import devices


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--expect-gpu", required=True, choices=("cuda", "rocm", "none"))
    parser.add_argument("--ranks", type=int, required=True, help="local ranks of the run")
    args = parser.parse_args(argv)
    problems = [why for rank in range(args.ranks)
                if (why := devices.missing_gpu(args.expect_gpu, rank))]
    host = socket.gethostname()
    if problems:
        ranks = "all" if len(problems) == args.ranks else str(len(problems))
        print(f"device gate: FAIL on {host} ({ranks} of {args.ranks} local ranks): "
              f"{problems[0]}", flush=True)
        return 2
    print(f"device gate: PASS on {host}: {args.ranks} local ranks, "
          f"{devices.visible_gpus()} {args.expect_gpu} GPUs visible "
          f"(torch {devices.torch.__version__})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
