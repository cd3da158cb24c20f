"""The text nccl-tests prints, so the tools sites run on nccl-tests output read this harness's.

nccl-tests (NVIDIA/nccl-tests, ``src/util.cu``: ``writeResultHeader``,
``writeBenchmarkLinePreamble``, ``writeBenchmarkLineBody``, ``writeResultFooter``) runs one
binary per collective (``all_reduce_perf``...), and each prints ONE table: a ``#`` banner with
``out-of-place`` and ``in-place``, a ``#`` line of column names and one of units, one data row
per size (``size count type redop root`` then ``time algbw busbw #wrong`` twice), then
``# Out of bounds values : N OK``, ``# Avg bus bandwidth    : X``, ``#`` and
``# Collective test concluded: all_reduce_perf``. Numbers are as its ``getFloatStr`` makes them
(two decimals where they fit the column, fewer, else an exponent), ``#wrong`` as ``%6g`` or
``N/A`` where it does not check (alltoall and sendrecv in place: its ``reportErrors = 0``).

Here one run measures several collectives, so each gets exactly that block, opened by
``# Collective test starting: <op>_perf``; what this harness adds is on ``#`` lines outside the
tables' rows, which every such parser skips. Splitting the output at the ``Collective test
starting`` lines gives, per op, what that nccl-tests binary would have printed (the harness
also writes it as ``OUT/<op>.txt``). Standard library only.
"""

from __future__ import annotations

from typing import Any, Optional

#: (name, unit, width) of the columns, nccl-tests' own widths and two-space separators.
KEY_COLUMNS = (("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 8),
               ("redop", "", 6), ("root", "", 6))
MODE_COLUMNS = (("time", "(us)", 7), ("algbw", "(GB/s)", 6), ("busbw", "(GB/s)", 6),
                ("#wrong", "", 6))
#: torch's dtype names as nccl-tests prints them (its test_typenames).
NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16",
                   "float64": "double", "int8": "int8", "uint8": "uint8", "int32": "int32",
                   "int64": "int64"}
#: A reminder printed once after the tables (never inside one).
AVG_NOTE = ("# (each table's average busbw is the mean over its sizes and both modes, dominated "
            "by small\n#  messages: read the busbw of the largest size instead; the average is "
            "not a pass criterion)")


def program(name: str) -> str:
    """The nccl-tests binary measuring collective ``name`` (``all_reduce_perf``)."""
    return f"{name}_perf"


def _columns(values: list[str], columns: tuple) -> str:
    return "  ".join(f"{value:>{col[2]}}" for value, col in zip(values, columns))


def fit(value: Optional[float], width: int) -> str:
    """nccl-tests' getFloatStr: two decimals if the number fits ``width``, else one, none, or
    an exponent; ``N/A`` for no number (one rank: no bandwidth, see allreduce.py)."""
    if value is None:
        return "N/A"
    for digits in (2, 1, 0):
        text = f"{value:{width}.{digits}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def table_header() -> str:
    """nccl-tests' column header: a banner, the names, then the units (comment lines)."""
    keys = [_columns([col[row] for col in KEY_COLUMNS], KEY_COLUMNS) for row in (0, 1)]
    modes = [_columns([col[row] for col in MODE_COLUMNS], MODE_COLUMNS) for row in (0, 1)]
    width = len(modes[0])
    banner = " " * len(keys[0]) + "  " + "out-of-place".center(width) + "  " + \
        "in-place".center(width)
    return "\n".join(("#" + line[1:]).rstrip() for line in (
        banner, *(keys[row] + "  " + modes[row] + "  " + modes[row] for row in (0, 1))))


def _mode(mode: Optional[dict[str, Any]]) -> str:
    """One mode's four columns; a mode not measured (a report of an older harness, which had
    no in-place alltoall) is N/A in every one."""
    if mode is None:
        return _columns(["N/A"] * len(MODE_COLUMNS), MODE_COLUMNS)
    wrong = "N/A" if mode["wrong"] is None else f"{float(mode['wrong']):g}"
    return _columns([fit(mode["time_us"], 7), fit(mode["algbw"], 6), fit(mode["busbw"], 6),
                     wrong], MODE_COLUMNS)


def row(record: dict[str, Any]) -> str:
    """One result row, as nccl-tests prints it, aligned under :func:`table_header` (a root of
    None is nccl-tests' -1)."""
    root = -1 if record.get("root") is None else record["root"]
    keys = _columns([str(record["bytes"]), str(record["count"]),
                     NCCL_TYPE_NAMES.get(record["type"], record["type"]), record["redop"],
                     str(root)], KEY_COLUMNS)
    return f"{keys}  {_mode(record['oop'])}  {_mode(record.get('ip'))}"


def footer(name: str, wrong_total: Optional[int], avg_busbw: Optional[float]) -> str:
    """nccl-tests' footer of one collective's table. Unchecked values are ``N/A``, never
    nccl-tests' ``0 OK`` (a check that did not run proves nothing)."""
    if wrong_total is None:
        bounds = "N/A (check disabled)"
    else:
        bounds = f"{wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}"
    avg = "N/A" if avg_busbw is None else f"{avg_busbw:g}"
    return "\n".join([f"# {'Out of bounds values':<20} : {bounds}",
                      f"# {'Avg bus bandwidth':<20} : {avg}", "#",
                      f"# Collective test concluded: {program(name)}"])


def opening(name: str, notes: list[str]) -> str:
    """What opens one collective's block: nccl-tests' ``Collective test starting`` line, this
    harness's notes on that op (comment lines, before the table), then the table header."""
    return "\n".join([f"# Collective test starting: {program(name)}",
                      *(f"# {name}: {note}" for note in notes), "#", table_header()])
