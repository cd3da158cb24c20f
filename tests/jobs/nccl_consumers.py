"""How the public tools that read nccl-tests output read it, written here from their descriptions
(none of their code is copied), so a test can feed them what ``allreduce.py`` prints.

* :data:`STRICT_ROW`: a data row as nccl-tests prints it (``src/util.cu``): size, count, type,
  redop, root, then time, algbw, busbw (numbers) and ``#wrong`` (a count or ``N/A``), twice;
  anything else must be a ``#`` line.
* :data:`REFRAME_AVG`: the extraction ReFrame checks of nccl-tests use on the footer.
* :func:`superbench_figures`: the algorithm of microsoft/superbenchmark's nccl-tests parser
  (``superbench/benchmarks/micro_benchmarks/cuda_nccl_bw_performance.py``,
  ``_process_raw_result``), as it reads one nccl-tests binary's output.
"""

from __future__ import annotations

import re

_NUMBER = r"[0-9]+(?:\.[0-9]+)?(?:e[+-][0-9]+)?"
_MODE = rf"\s+{_NUMBER}\s+{_NUMBER}\s+{_NUMBER}\s+(?:[0-9]+|N/A)"
STRICT_ROW = re.compile(rf"^\s*[0-9]+\s+[0-9]+\s+[a-z0-9]+\s+[a-z]+\s+-?[0-9]+{_MODE}{_MODE}\s*$")
REFRAME_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<busbw>\S+)", re.MULTILINE)


class SuperbenchRejects(ValueError):
    """What superbenchmark logs as "The result format is invalid" (it returns False)."""


def _tokens(line: str) -> list[str]:
    return re.sub(r" +", " ", line.strip(" ")).split(" ")


def _columns(header: str, in_place: bool) -> dict[str, int]:
    """Column positions from the header line (its ``#`` dropped): ``size`` from the left, the
    figures counted from the right end, the out-of-place (first) or in-place (last) ones."""
    names = _tokens(header[1:])
    found = {"size": names.index("size")}
    for name in ("time", "busbw", "algbw"):
        found[name] = (-1 - names[::-1].index(name)) if in_place \
            else names.index(name) - len(names)
    return found


def superbench_figures(output: str, operation: str, *, in_place: bool = False) -> dict:
    """``{"<operation>_<size>_busbw": float, ..._algbw, ..._time}`` as superbenchmark reads
    ``output``: the lines between the LAST ``out-of-place`` line and the LAST ``Out of bounds
    values`` line; the first of them naming ``time`` and ``busbw`` is the header; every line
    whose first token starts with a digit is a row, its columns converted with int/float (an
    error there is its "result format is invalid")."""
    lines = output.splitlines()
    start = max((i for i, line in enumerate(lines) if "out-of-place" in line), default=-1)
    end = max((i for i, line in enumerate(lines) if "Out of bounds values" in line), default=-1)
    body = lines[start + 1:end]
    header = next((line for line in body if "time" in line and "busbw" in line), None)
    if start == -1 or end == -1 or header is None:
        raise SuperbenchRejects("no out-of-place banner, header or Out of bounds line")
    where, figures = _columns(header, in_place), {}
    for line in body:
        fields = _tokens(line)
        if not fields or not re.match(r"\d+", fields[0]):
            continue
        size = int(fields[where["size"]])
        if size != 0:
            for name in ("busbw", "algbw", "time"):
                figures[f"{operation}_{size}_{name}"] = float(fields[where[name]])
    if not figures:
        raise SuperbenchRejects("no row with a size")
    return figures


def sections(output: str) -> dict[str, str]:
    """The output split where each collective's block starts: per op, what its nccl-tests
    binary would print (``# Collective test starting: <op>_perf`` up to the next one)."""
    found, name = {}, None
    for line in output.splitlines():
        started = re.match(r"# Collective test starting: (\w+)_perf$", line)
        if started:
            name = started.group(1)
            found[name] = []
        if name is not None:
            found[name].append(line)
    return {op: "\n".join(lines) for op, lines in found.items()}
