"""The performance gate: a measured busbw against the site's reference for it. Apart from sanity
(a run can be correct and slow, or fast and wrong), a performance failure exits 3, not 2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # judged by the smoke kind, declared when the command line starts: light
    from containers.inputs.references import Reference


@dataclass(frozen=True)
class Judgement:
    """``state`` is pass, fail, xfail (failed as expected), xpass, no-reference, not-measured
    or not-judged (one rank: no link to measure)."""

    state: str
    message: str
    measured: float | None = None
    reference: Reference | None = None

    @property
    def failed(self) -> bool:
        return self.state in ("fail", "xpass")

    def record(self) -> dict:
        """The judgement as ``verdict.json`` and the perflog hold it."""
        return {"state": self.state, "message": self.message, "failed": self.failed,
                "measured": self.measured, "reference": None if self.reference is None else {
                    key: getattr(self.reference, key) for key in
                    ("op", "bytes", "value", "lower", "upper", "unit", "xfail", "source")}}


def judge(reference: Reference | None, results: Sequence[dict]) -> Judgement:
    """Out-of-place busbw at the reference's size against its bounds."""
    if reference is None:
        return Judgement("no-reference", "no reference for this partition, node and rank count")
    row = next((r for r in results if r["bytes"] == reference.bytes), None)
    if row is None:
        return Judgement("not-measured", f"the reference is at {reference.bytes} B, which this "
                         f"run did not measure (extend --sizes)", reference=reference)
    measured = float(row["oop"]["busbw"])
    low, high = reference.bounds
    within = (low is None or measured >= low) and (high is None or measured <= high)
    if within:
        state = "xpass" if reference.xfail else "pass"
        message = f"busbw {measured:g} {reference.unit} within {reference.describe()}"
    else:
        state = "xfail" if reference.xfail else "fail"
        if low is not None and measured < low:
            shortfall = (reference.value - measured) / reference.value * 100
            message = (f"busbw {measured:g} {reference.unit} is below the reference "
                       f"{reference.describe()}: {shortfall:.1f}% short of {reference.value:g}")
        else:
            message = f"busbw {measured:g} {reference.unit} is above {reference.describe()}"
    if reference.xfail:
        message += f" [expected to fail: {reference.xfail}]"
    return Judgement(state, message, measured=measured, reference=reference)
