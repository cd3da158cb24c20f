"""Performance references, ReFrame style: ``(value, lower, upper, unit)`` per site partition.
Thresholds are fractions of the value (``[125.0, -0.05, null, GB/s]``: at least 118.75 GB/s)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Sequence

from pydantic import ConfigDict

from containers.errors import ConfigError
from containers.inputs import names
from containers.inputs.schema import Declared, Int, Str, line_of, suggest, validate_model

#: The unit the benchmark reports busbw in (``allreduce.py``, as nccl-tests).
UNITS = ("GB/s",)
#: 1 TiB, more than any GPU holds: a larger size (a typo) would silently judge nothing.
MAX_BYTES = 1 << 40


class Entry(Declared):
    """A reference as a site profile writes it."""

    model_config = ConfigDict(title="reference")

    op: Str = "all_reduce"
    partition: Str = "*"
    nodes: Int
    ranks_per_node: Int
    bytes: Int
    gpu_model: Str | None = None
    busbw: list[Any]
    xfail: Str | None = None
    source: Str


@dataclass(frozen=True)
class Reference:
    partition: str
    nodes: int
    ranks_per_node: int
    bytes: int
    value: float
    lower: float | None
    upper: float | None
    unit: str
    source: str
    gpu_model: str | None = None
    xfail: str | None = None
    #: The collective it is a figure for (nccl-tests' binary: all_reduce_perf, ...).
    op: str = "all_reduce"

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        low = None if self.lower is None else self.value * (1 + self.lower)
        high = None if self.upper is None else self.value * (1 + self.upper)
        return low, high

    def describe(self) -> str:
        low, high = self.bounds
        span = (f">= {low:.3g}" if high is None else f"{low:.3g}..{high:.3g}" if low is not None
                else f"<= {high:.3g}")
        return f"{self.value:g} {self.unit} ({span} {self.unit}) at {self.bytes} B"


def parse_reference(item: Any, *, path: Any, index: int) -> Reference:
    """One reference from YAML; thresholds validated as ReFrame validates them."""
    prefix = f"references[{index}]."
    values = dict(validate_model(Entry, item, path=path, what="reference", prefix=prefix))
    spec = values["busbw"]

    def bad(message: str, key: str = "busbw") -> ConfigError:
        return ConfigError(message, path=path, line=line_of(item, key),
                           key=(prefix + key).rstrip("."))

    if len(spec) != 4 or not isinstance(spec[3], str):
        raise bad("must be [value, lower, upper, unit], e.g. [125.0, -0.05, null, GB/s]")
    value, lower, upper, unit = spec
    for name, number in (("value", value), ("lower", lower), ("upper", upper)):
        if number is not None and (isinstance(number, bool)
                                   or not isinstance(number, (int, float))):
            raise bad(f"{name} must be a number or null")
        if number is not None and not math.isfinite(number):
            # YAML's .nan / .inf: a NaN bound fails every comparison, so every run would fail
            raise bad(f"{name} {number} is not a finite number (use null for no bound)")
    if value is None or value <= 0:
        raise bad("value must be a positive number")
    if lower is not None and not -1 <= lower <= 0:
        raise bad(f"lower tolerance {lower} must be a fraction in [-1, 0] (e.g. -0.05 for 5% "
                  "below)")
    if upper is not None and upper < 0:
        raise bad(f"upper tolerance {upper} is negative: the upper bound would be below the "
                  "lower one")
    if values["op"] not in names.COLLECTIVES:
        raise bad(f"unknown collective '{values['op']}'{suggest(values['op'], names.COLLECTIVES)}"
                  f"; one of {', '.join(names.COLLECTIVES)}", "op")
    if values["nodes"] < 1 or values["ranks_per_node"] < 1 or values["bytes"] < 1:
        raise bad("nodes, ranks_per_node and bytes must be positive", "")
    if unit not in UNITS:
        raise bad(f"unit '{unit}' is not what the benchmark measures: busbw is in "
                  f"{' or '.join(UNITS)}, so this reference would never judge a run")
    if values["bytes"] > MAX_BYTES:
        raise bad(f"{values['bytes']} B is more than any GPU holds (at most {MAX_BYTES} B, "
                  "1 TiB): a run could never measure it", "bytes")
    del values["busbw"]
    return Reference(**values, value=float(value), unit=unit,
                     lower=None if lower is None else float(lower),
                     upper=None if upper is None else float(upper))


def select(references: Sequence[Reference], *, partition: str | None, nodes: int,
           ranks_per_node: int, gpu_model: str | None = None,
           measured: Collection[int] = (), op: str = "all_reduce") -> Reference | None:
    """The most specific reference for ``op``, then at the largest size ``measured``."""
    candidates = [r for r in references if r.op == op
                  and r.nodes == nodes and r.ranks_per_node == ranks_per_node
                  and r.partition in (partition, "*")
                  and (r.gpu_model is None or r.gpu_model == gpu_model)]
    candidates.sort(key=lambda r: (r.partition == "*", r.gpu_model is None,
                                   r.bytes not in measured, -r.bytes))
    return candidates[0] if candidates else None
