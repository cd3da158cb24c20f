"""The catalogue page: ``<dest>/index.html``, what is published, for people with a browser.

One self-contained static file: inline CSS, the busbw history plot embedded as a PNG data URI,
links only to files beside it (each version's SBOM and diff), no script and nothing fetched
from anywhere, so it reads the same from a file system, a web server or an air-gapped site.
Rendered from the catalogue alone (pure but for matplotlib drawing the plot); publish replaces
it atomically right after the catalogue.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path
from typing import Mapping

from containers.publish.catalogue import driver_needed
from containers.report import human_bytes, new_figure, save_figure

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
.pass { color: #060; } .fail { color: #a00; } .warn { color: #a60; }
code { font-size: 0.95em; }
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _stack(entry: Mapping) -> str:
    stack = entry.get("stack") or {}
    if not stack:
        return "-"
    parts = [f"torch {stack.get('torch')} ({stack.get('build')})"]
    for key, name in (("cuda", "CUDA"), ("hip", "HIP"), ("rocm", "ROCm"), ("nccl", "NCCL/RCCL"),
                      ("python", "Python"), ("glibc", "glibc"), ("arch", "")):
        if stack.get(key):
            parts.append(f"{name} {stack[key]}".strip())
    if stack.get("nccl_linkage"):
        parts.append(f"{stack['nccl_linkage']} NCCL")
    needed = driver_needed(entry)
    if needed:
        parts.append(f"needs {needed}")
    return "<br>".join(_e(p) for p in parts)


def _verdicts(entry: Mapping) -> str:
    checks = entry.get("checks") or {}
    if checks.get("skipped"):
        return '<span class="fail">checks skipped (--skip-checks)</span>'
    lines = []
    test = checks.get("apptainer_test") or {}
    if test.get("passed") is not None:
        lines.append(f"apptainer test: {'PASS' if test['passed'] else 'FAIL'}")
    smoke = checks.get("smoke") or {}
    if smoke:
        performance = smoke.get("performance") or {}
        lines.append(f"smoke: {'PASS' if smoke.get('passed') else 'FAIL'} "
                     f"({smoke.get('ranks')} ranks on {smoke.get('site')}"
                     f"/{smoke.get('partition') or '-'})")
        if performance.get("measured") is not None:
            lines.append(f"busbw {performance['measured']} GB/s "
                         f"({str(performance.get('state', '')).upper()})")
    out = [f'<span class="pass">{_e(line)}</span>' for line in lines]
    for finding in entry.get("fit") or []:
        if finding.get("level") in ("error", "warning"):
            out.append(f'<span class="warn">site fit {_e(finding["level"])}: '
                       f'{_e(finding.get("message"))}</span>')
    accepted = (entry.get("gate") or {}).get("accepted")
    if accepted:
        out.append(f'<span class="fail">accepted regression: {_e(accepted.get("why"))} '
                   f'(by {_e(accepted.get("by"))}, {_e(accepted.get("date"))}; '
                   f'{_e("; ".join(accepted.get("problems") or []))})</span>')
    return "<br>".join(out) or "-"


#: A file of the publish folder as the catalogue names one (``cpu/1.0.sif.cdx.json``): relative,
#: plain names, no ``..``, so no scheme (``javascript:``), host or absolute path gets a link.
_OWN_FILE = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*\Z")


def _link(path: object, text: str) -> str:
    """A link to a file of the publish folder; anything else the catalogue names (it is a file
    others may have edited) is shown as text, never linked."""
    if not path:
        return "-"
    if not isinstance(path, str) or not _OWN_FILE.match(path):
        return f"<code>{_e(path)}</code> (not a file of this folder)"
    return f'<a href="{_e(path)}">{_e(text)}</a>'


def history_png(catalogue: Mapping) -> bytes | None:
    """busbw at the reference size per published version, one line per target; None when no
    version has one."""
    series = {}
    for target, block in sorted(catalogue.get("targets", {}).items()):
        points = []
        for entry in block.get("versions", []):
            performance = ((entry.get("checks") or {}).get("smoke") or {}).get("performance")
            measured = (performance or {}).get("measured")
            if isinstance(measured, (int, float)):
                points.append((entry["version"], float(measured)))
        if points:
            series[target] = points
    if not series:
        return None
    fig, ax = new_figure((8, 3.5), dpi=100)
    for target, points in series.items():
        ax.plot(range(len(points)), [p[1] for p in points], "o-", label=target)
        for index, (version, value) in enumerate(points):
            ax.annotate(f"{value:g}", (index, value), fontsize=7,
                        textcoords="offset points", xytext=(0, 6))
    longest = max(series.values(), key=len)
    ax.set_xticks(range(len(longest)),
                  [p[0] for p in longest] if len(series) == 1 else range(len(longest)),
                  fontsize=7)
    ax.set_xlabel("published version (oldest first)")
    ax.set_ylabel("smoke busbw at reference size (GB/s)")
    ax.set_title("busbw history of published versions")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, io.BytesIO()).getvalue()


def render_page(catalogue: Mapping, dest: Path) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>Published images: {_e(dest.name)}</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>Published images</h1><p>Folder <code>{_e(dest)}</code>, catalogue "
             f"updated {_e(catalogue.get('updated'))}. Load one with <code>module use "
             f"{_e(dest / 'modules')}</code>.</p>"]
    for target, block in sorted(catalogue.get("targets", {}).items()):
        parts.append(f'<h2 id="{_e(target)}">{_e(target)}</h2>')
        parts.append("<table><tr><th>version</th><th>published</th><th>stack</th><th>size</th>"
                     "<th>signature</th><th>verdicts</th><th>SBOM</th><th>diff</th></tr>")
        for entry in reversed(block.get("versions", [])):
            version = entry["version"]
            latest = " (latest)" if version == block.get("latest") else ""
            signed = (f"signed by {_e(entry.get('key_fingerprint'))}" if entry.get("signed")
                      else "unsigned")
            parts.append(
                f"<tr><td><code>{_e(version)}</code>{_e(latest)}</td>"
                f"<td>{_e(entry.get('published'))}<br>{_e(entry.get('published_by'))}</td>"
                f"<td>{_stack(entry)}</td><td>{_e(human_bytes(entry.get('size_bytes') or 0))}"
                f"</td><td>{signed}</td><td>{_verdicts(entry)}</td>"
                f"<td>{_link(entry.get('sbom_file'), 'CycloneDX')}</td>"
                f"<td>{_link(entry.get('diff_file'), 'against previous latest')}</td></tr>")
        parts.append("</table>")
    png = history_png(catalogue)
    parts.append("<h2>busbw history</h2>")
    if png is None:
        parts.append("<p>No published version has a smoke busbw at a reference size yet.</p>")
    else:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<img alt="busbw history of published versions" '
                     f'src="data:image/png;base64,{data}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
