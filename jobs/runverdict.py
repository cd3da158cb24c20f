"""The verdict of a batch job that ran a user's own command (``invoke job --workload run``).

Run by the image's own Python at the end of the job, with ``jobs/`` bound read-only, so the
compute node needs no virtual environment, pip or package index. It reads what the job left in
its results folder (``run.log``: the device gate's lines, the command's output) and writes
``verdict.json``: passed, the exit status, the device gate, the torch stack, the transport proof
where the site declares one. Fails closed: a gate that did not pass, a missing log, a transport
the log does not name, or a non-zero command fails it. Exit status: 0 passed, 2 the gate or the
transport failed, else the command's own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from pathlib import Path

import safewrite

MAX_LOG = 64 << 20  # the tail read for the proofs; a log can be large


def read_log(path: Path) -> str | None:
    """The log's last :data:`MAX_LOG` bytes as text, or None when it is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
        handle.seek(max(0, size - MAX_LOG))
        return handle.read(MAX_LOG).decode("utf-8", "replace")


def first_failure(log: str) -> tuple[int, int] | None:
    """``(rank, exit code)`` of torchrun's "Root Cause (first observed failure)" block: the
    command's own status (torchrun itself exits 1 whatever its ranks' codes were)."""
    block = log.split("Root Cause (first observed failure):", 1)
    if len(block) < 2:
        return None
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", block[1], flags=re.M)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", block[1], flags=re.M)
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def stack() -> dict:
    """torch and its GPU runtime in this image (None where torch does not import)."""
    try:
        import torch
    except Exception as exc:  # the verdict says so rather than failing without one
        return {"torch": None, "error": str(exc).splitlines()[0] if str(exc) else "import"}
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None)}


def judge(args: argparse.Namespace) -> tuple[dict, int]:
    out = Path(args.out)
    log = read_log(out / "run.log")
    reasons: list[str] = []
    if log is None:
        reasons.append("run.log is missing or not a regular file")
    gate_lines = re.findall(r"^device gate: .*$", log or "", flags=re.M)
    if args.gate == "fail":
        reasons.append(gate_lines[-1] if gate_lines else "device gate: the probe failed")
    elif args.gate == "pass" and not any(ln.startswith("device gate: PASS") for ln in gate_lines):
        reasons.append("device gate: no PASS line in run.log")
    transport = None
    if args.transport_expect:
        seen = bool(re.search(args.transport_expect, log or ""))
        transport = {"name": args.transport_name, "expect": args.transport_expect,
                     "proven": seen}
        if not seen and args.gate != "fail":
            reasons.append(f"transport: {args.transport_name} not proven (no line matches "
                           f"{args.transport_expect!r} in run.log)")
    failure = first_failure(log or "") if args.exit_status else None
    status = failure[1] if failure and failure[1] > 0 else args.exit_status
    if args.gate != "fail" and args.exit_status != 0:
        reasons.append(f"the command exited with status {status}"
                       + (f" (rank {failure[0]} failed first)" if failure else ""))
    passed = not reasons
    code = 0 if passed else 2 if (args.gate == "fail" or (transport and not transport["proven"])
                                  or args.exit_status == 0) else status
    record = {"kind": "run", "passed": passed, "exit_status": status,
              "first_failure": None if failure is None else {"rank": failure[0],
                                                             "exit_code": failure[1]},
              "device_gate": args.gate, "gate_lines": gate_lines, "expect_gpu": args.expect_gpu,
              "ranks": args.ranks, "stack": stack(), "transport": transport,
              # a transport the job chose instead of the site's (invoke job --transport socket)
              "degraded": args.transport_degraded,
              "reasons": reasons, "exit_code": code}
    return record, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--exit-status", type=int, required=True)
    parser.add_argument("--gate", choices=("pass", "fail", "none"), required=True)
    parser.add_argument("--expect-gpu", default="none")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--transport-name")
    parser.add_argument("--transport-expect")
    parser.add_argument("--transport-degraded", help="what the job's chosen transport gives up "
                        "(it is not the site's): recorded and printed")
    args = parser.parse_args(argv)
    record, code = judge(args)
    path = Path(args.out) / "verdict.json"
    safewrite.write_text(path, json.dumps(record, indent=2, allow_nan=False) + "\n")
    print(f"verdict: {'PASS' if record['passed'] else 'FAIL'}"
          + (f" (degraded transport: {record['degraded']})" if record["degraded"] else "")
          + "".join(f"\n  {reason}" for reason in record["reasons"]), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
