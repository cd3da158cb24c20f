"""Run a user's command pinned to its local rank's cores (``invoke run`` on a site with a CPU map).

The tool's own workloads pin themselves (``--rank-cores``); a user's command cannot be asked
to, so torchrun starts this small wrapper per rank instead: it takes the rank's entry of the
site's map (``LOCAL_RANK``), pins itself there and replaces itself with the command, which
inherits the affinity. Needs nothing but the standard library and ``choices.py``, so it adds no
start-up time (no torch import) to the command.
"""

from __future__ import annotations

import os
import sys

import choices


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: pinned.py RANK_CORES -- COMMAND ...", file=sys.stderr)
        return 2
    cores = choices.parse_rank_cores(argv[0])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if local_rank >= len(cores):
        print(f"pinned.py: local rank {local_rank} has no entry in the CPU map "
              f"({len(cores)} entries)", file=sys.stderr)
        return 2
    mine = cores[local_rank]
    try:
        os.sched_setaffinity(0, mine)
    except OSError as err:
        print(f"pinned.py: local rank {local_rank} cannot pin to cores "
              f"{choices.format_cpulist(mine)} ({err.strerror}); this process may use "
              f"{choices.format_cpulist(os.sched_getaffinity(0))}", file=sys.stderr)
        return 2
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as err:
        print(f"pinned.py: cannot run {argv[2]}: {err.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
