"""Helpers shared by the benchmark scripts: run a command with progress, print a ratio table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from containers.errors import WriteRefused  # noqa: E402
from containers.files import atomic_write_text  # noqa: E402
from containers.host.process import run  # noqa: E402
from containers.report import show_table  # noqa: E402


def parser(doc: str, *, out_name: str) -> argparse.ArgumentParser:
    """The flags every side-by-side benchmark has: ranks, interleaved repeats, image, JSON file."""
    parsed = argparse.ArgumentParser(description=doc.splitlines()[0])
    parsed.add_argument("--ranks", type=int, default=2, help="ranks (CPU processes)")
    parsed.add_argument("--repeat", type=int, default=2, help="interleaved repetitions")
    parsed.add_argument("--target", default="cpu", help="image target (must be built)")
    parsed.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / out_name,
                        help="JSON result file")
    return parsed


def run_shown(argv: list[str], *, label: str, timeout: float, env=None):
    """Run ``argv`` showing each output line prefixed by ``label``: (its result, its lines)."""
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        print(f"[{label}] {line}", flush=True)

    return run(argv, timeout=timeout, on_line=on_line, env=env), lines


def run_checked(argv: list[str], *, label: str, timeout: float = 1800, env=None) -> list[str]:
    """Run ``argv`` showing its output prefixed by ``label``; fail the benchmark on error."""
    result, lines = run_shown(argv, label=label, timeout=timeout, env=env)
    if not result.ok:
        raise SystemExit(f"benchmark step '{label}' failed (exit {result.returncode})")
    return lines


def report(title: str, columns: list[str], rows: list[list[object]], out: Path,
           data: dict) -> None:
    """The table, and its JSON mirror written to ``out`` by the package's rule (a refusal is
    one line, exit 1)."""
    show_table(title, columns, rows)
    try:
        atomic_write_text(out, json.dumps(data, indent=2) + "\n")
    except WriteRefused as exc:
        raise SystemExit(f"benchmark: --out {exc}") from None
    print(f"json: {out}")
