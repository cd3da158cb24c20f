"""The package's shape, enforced: each stage imports only the stages before it, and nothing in
the engine imports the application layer. (The layout is described in README's Layout section.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures import ROOT

PACKAGE = ROOT / "containers"
#: Each part of the package, in pipeline order, and the parts it may import (besides itself).
ALLOWED = {
    "shared": set(),
    "inputs": set(),
    "host": {"inputs"},
    "image": {"inputs", "host"},
    "run": {"inputs", "host", "image"},
    "prove": {"inputs", "host", "image", "run"},
    "batch": {"inputs", "host", "image", "run", "prove"},
    "publish": {"inputs", "host", "image", "run", "prove"},
    "app": {"inputs", "host", "image", "run", "prove", "batch", "publish"},
}


def part_of(module: str) -> str:
    """``containers.run.workload`` -> ``run``; top-level modules (errors, files, …) -> ``shared``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else "shared"


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        found.append((".".join(relative.parts), path))
    return found


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] == "containers"}


def test_every_module_belongs_to_a_known_part() -> None:
    unknown = sorted(m for m, _ in modules() if part_of(m) not in ALLOWED)
    assert not unknown, f"modules outside the known stages: {unknown}"


@pytest.mark.parametrize("module,path", modules(), ids=[m for m, _ in modules()])
def test_stage_imports_only_earlier_stages(module: str, path: Path) -> None:
    own = part_of(module)
    allowed = ALLOWED[own] | {own, "shared"}
    wrong = sorted(name for name in imported(path)
                   if name != "containers" and part_of(name) not in allowed)
    assert not wrong, f"{module} ({own}) imports {wrong}; it may import only {sorted(allowed)}"


def test_the_check_can_fail() -> None:
    assert part_of("containers.app.project") == "app"
    assert "app" not in ALLOWED["publish"] and "app" not in ALLOWED["prove"]
