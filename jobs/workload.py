"""What every workload script (``allreduce.py``, ``train.py``) shares: the exit codes the host
reads, the flags every launcher passes, the argparse value types, the per-rank completion file and
the guarded ``main``.

The host tells a run's ranks apart by these: ``rank-<RANK>.json`` says a rank finished cleanly, a
usage error is one ``<script>: error: …`` line (from rank 0 only, so N ranks do not print it N
times) with exit status 2, and any other failure names the rank and host and prints the traceback
with exit status 3.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import choices
import distenv

EXIT_OK = 0
#: The run finished but its result is wrong (all_reduce values, ranks disagree, loss not finite).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EPILOG = ("Exit status: 0 ok, 1 {failed}, 2 bad command line, config or data, 3 other error.")


class UsageError(Exception):
    """A bad flag, config file or data folder: one line on stderr from rank 0, exit status 2."""


# ----------------------------------------------------------------------------------------------
# argparse value types: a ValueError becomes argparse's usage error (exit 2, the message shown)
# ----------------------------------------------------------------------------------------------


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=``: its ValueError message becomes the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from err

    convert.__name__ = parse.__name__
    return convert


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(f"must be >= {low}, got {value}")
        return value

    return parse


positive_int = argparse_type(_at_least(1))
non_negative_int = argparse_type(_at_least(0))
step_factor = argparse_type(_at_least(2))


@argparse_type
def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"must be in (0, 1], got {value}")
    return value


@argparse_type
def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, got {value}")
    return value


def add_counts(parser: argparse.ArgumentParser,
               rows: Sequence[tuple[str, Callable[[str], Any], int, str]]) -> None:
    """Declare whole-number flags from a table of ``(flag, type, default, help)``: one line per
    flag, and the default always shown the same way."""
    for flag, kind, default, text in rows:
        parser.add_argument(flag, type=kind, default=default,
                            help=f"{text} (default: %(default)s)")


def add_common_flags(parser: argparse.ArgumentParser, *, out: str, writes: str,
                     timeout_s: int) -> None:
    """``--backend``, ``--out`` and ``--timeout-s``: what the host passes to every workload."""
    parser.add_argument(
        "--backend", choices=choices.BACKENDS, default="auto",
        help="process group backend; auto picks nccl when torch sees a GPU (ROCm torch reports "
        "its GPUs through torch.cuda and uses RCCL under the name nccl), else gloo on CPU "
        "(default: %(default)s)")
    parser.add_argument(
        "--out", default=out,
        help=f"results folder for {writes} and rank-<RANK>.json (default: %(default)s)")
    parser.add_argument(
        "--timeout-s", type=positive_int, default=timeout_s,
        help="seconds before process-group init or a collective is declared hung; passed to "
        "init_process_group (default: %(default)s)")


# ----------------------------------------------------------------------------------------------
# Completion and failure
# ----------------------------------------------------------------------------------------------


def write_rank_file(out: Path, env: distenv.DistEnv, **fields: Any) -> None:
    """``OUT/rank-<RANK>.json``, written last: the host counts the ranks that finished cleanly."""
    distenv.write_json(out / f"rank-{env.rank}.json", {
        "rank": env.rank, "local_rank": env.local_rank, "hostname": socket.gethostname(),
        "pid": os.getpid(), **fields, "finished": True})


def guarded_main(name: str, run: Callable[[distenv.DistEnv], int]) -> int:
    """Run ``run`` for this process's place in the job; turn what escapes into an exit status.

    A :class:`UsageError` is one line from rank 0 (every rank hits the same one); anything else
    is a bug or a broken node, so it says which rank on which host and keeps the traceback.
    """
    env = distenv.resolve_dist_env(os.environ)
    try:
        return run(env)
    except UsageError as err:
        if env.rank == 0:
            print(f"{name}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 - report which rank failed and exit non-zero
        print(f"{name}: rank {env.rank} on {socket.gethostname()} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        return EXIT_ERROR
