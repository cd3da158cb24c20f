"""What changed between two images: packages, stack, labels, size, and their latest smoke runs."""

from __future__ import annotations

from typing import Mapping

from containers.image.inspect import summary
from containers.records import Judged, SmokeSummary
from containers.report import human_bytes

#: Labels that differ on every build and say nothing about what is inside.
NOISY_LABELS = ("org.label-schema.build-date", "containers.build-date", "containers.pip-freeze",
                "containers.inputs-hash", "containers.git-revision")


def shown(value: object) -> str:
    """A value as people read it in a line: ``-`` for nothing, never a repr."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {shown(item)}" for key, item in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(shown(item) for item in value) or "-"
    return str(value)


def where_run(site: object, partition: object) -> str:
    """Where a smoke run ran, as people read it: ``site lumi, partition standard-g``."""
    return f"site {shown(site)}" + (f", partition {partition}" if partition else "")


def packages(facts: Mapping) -> dict[str, str]:
    """``deb:NAME`` / ``pip:NAME`` -> version, for every package the image holds."""
    found = {f"deb:{p['name']}": str(p.get("version"))
             for p in facts.get("debian_packages") or []}
    found.update({f"pip:{p['name'].lower()}": str(p.get("version"))
                  for p in facts.get("pip_packages") or []})
    return found


def busbw(smoke: SmokeSummary | None) -> dict | None:
    """The busbw a smoke summary measured at its reference size, with where it ran."""
    if smoke is None:
        return None
    performance = smoke.performance or Judged(state="")
    return {"passed": smoke.passed, "state": performance.state or None,
            "busbw": performance.measured,
            "bytes": performance.reference.bytes if performance.reference else None,
            "site": smoke.site, "partition": smoke.partition, "ranks": smoke.ranks,
            "nodes": smoke.nodes, "date": smoke.date}


def side(name: str, facts: Mapping, *, size: int, smoke: SmokeSummary | None) -> dict:
    return {"name": name, "stack": summary(facts), "packages": packages(facts),
            "labels": {k: v for k, v in (facts.get("labels") or {}).items()
                       if k not in NOISY_LABELS},
            "size_bytes": size, "smoke": busbw(smoke)}


def _changed(old: Mapping, new: Mapping) -> dict[str, list]:
    return {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)}


def diff(old: Mapping, new: Mapping) -> dict:
    before, after = old["packages"], new["packages"]
    return {
        "old": old["name"], "new": new["name"],
        "packages": {
            "added": {k: after[k] for k in sorted(set(after) - set(before))},
            "removed": {k: before[k] for k in sorted(set(before) - set(after))},
            "changed": {k: [before[k], after[k]] for k in sorted(set(before) & set(after))
                        if before[k] != after[k]},
        },
        "stack": _changed(old["stack"], new["stack"]),
        # a published version's catalogue entry keeps no labels: nothing to compare then
        "labels": _changed(old["labels"], new["labels"]) if old["labels"] and new["labels"]
        else {},
        "size_bytes": [old["size_bytes"], new["size_bytes"]],
        "smoke": [old["smoke"], new["smoke"]],
    }


def lines(result: Mapping) -> list[str]:
    out = [f"diff {result['old']} -> {result['new']}"]
    pkgs = result["packages"]
    for sign, change in (("+", "added"), ("-", "removed")):
        out += [f"  {sign} {key} {shown(version)}" for key, version in pkgs[change].items()]
    for key, (was, now) in pkgs["changed"].items():
        out.append(f"  ~ {key} {shown(was)} -> {shown(now)}")
    if not any(pkgs.values()):
        out.append("  packages: no change")
    for what, part in (("stack", "stack"), ("label", "labels")):
        out += [f"  {what} {key}: {shown(was)} -> {shown(now)}"
                for key, (was, now) in result[part].items()]
    old_size, new_size = result["size_bytes"]
    out.append(f"  size: {human_bytes(old_size)} -> {human_bytes(new_size)} "
               f"({new_size - old_size:+d} B)")
    for label, smoke in zip(("old", "new"), result["smoke"]):
        if smoke is None:
            out.append(f"  smoke ({label}): no verdict")
        else:
            out.append(f"  smoke ({label}): {'PASS' if smoke['passed'] else 'FAIL'}, busbw "
                       f"{shown(smoke['busbw'])} GB/s at {shown(smoke['bytes'])} B "
                       f"({where_run(smoke.get('site'), smoke.get('partition'))}, "
                       f"{shown(smoke['ranks'])} ranks, {shown(smoke['date'])})")
    return out
