"""The release gate: a new version must not be slower than the one it replaces, nor misfit its site.

``invoke publish`` compares the new image's smoke (its catalogue summary,
:func:`containers.publish.checks.smoke_summary`) with the current ``latest``'s. The busbw both
measured at the reference size is compared only when the runs are alike (same site, partition,
nodes and ranks, same reference size): a regression is a new busbw below the old one by more
than the reference's own tolerance (its ``lower`` fraction, e.g. -0.05). A site-fit error
(:mod:`containers.image.sitefit`) refuses too. ``--accept-regression WHY`` publishes anyway and
the catalogue entry records who accepted what, when and why.

Pure: plain summaries in, reasons out.
"""

from __future__ import annotations

from typing import Mapping

#: What must match for two smoke runs' busbw to be compared.
ALIKE = ("site", "partition", "nodes", "ranks")


def _measured(smoke: Mapping | None) -> tuple[float, Mapping] | None:
    performance = (smoke or {}).get("performance")
    if not isinstance(performance, Mapping):
        return None
    measured, reference = performance.get("measured"), performance.get("reference")
    if not isinstance(measured, (int, float)) or isinstance(measured, bool) \
            or not isinstance(reference, Mapping):
        return None
    return float(measured), reference


def busbw_check(old: Mapping | None, new: Mapping | None) -> dict:
    """``{"regression": reason or None, "note": why not compared or None, ...figures}``."""
    before, after = _measured(old), _measured(new)
    if before is None or after is None:
        which = "the current latest" if before is None else "the new version"
        return {"regression": None, "note": f"not compared: {which} has no busbw at a "
                                            "reference size"}
    unlike = [k for k in ALIKE if (old or {}).get(k) != (new or {}).get(k)]
    if before[1].get("bytes") != after[1].get("bytes"):
        unlike.append("reference size")
    if unlike:
        return {"regression": None, "note": "not compared: the runs differ in "
                                            + ", ".join(unlike)}
    lower = after[1].get("lower")
    if not isinstance(lower, (int, float)) or isinstance(lower, bool):
        return {"regression": None, "note": "not compared: the reference has no lower "
                                            "tolerance"}
    floor = before[0] * (1 + float(lower))
    figures = {"old_busbw": before[0], "new_busbw": after[0], "floor": round(floor, 6),
               "tolerance": float(lower), "bytes": after[1].get("bytes")}
    if after[0] < floor:
        drop = (before[0] - after[0]) / before[0] if before[0] else 0.0
        return {**figures, "note": None, "regression": (
            f"busbw fell from {before[0]:g} to {after[0]:g} GB/s at {after[1].get('bytes')} B "
            f"({drop:.0%} lower; the reference allows {-float(lower):.0%}) on "
            f"{(new or {}).get('site')}/{(new or {}).get('partition')}, "
            f"{(new or {}).get('ranks')} ranks")}
    return {**figures, "note": None, "regression": None}
