"""The package's shape, enforced: each stage imports only the stages before it, and nothing in
the engine imports the application layer. (The layout: docs/architecture.md, The layout.)"""

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
    """``containers.run.workload`` -> ``run``; top-level modules (errors, files, records, …) -> ``shared``."""
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


def wrong_imports(module: str, path: Path) -> list[str]:
    """The imports of ``module`` (its source at ``path``) that its stage may not make."""
    allowed = ALLOWED[part_of(module)] | {part_of(module), "shared"}
    return sorted(name for name in imported(path)
                  if name != "containers" and part_of(name) not in allowed)


@pytest.mark.parametrize("module,path", modules(), ids=[m for m, _ in modules()])
def test_stage_imports_only_earlier_stages(module: str, path: Path) -> None:
    wrong = wrong_imports(module, path)
    assert not wrong, (f"{module} ({part_of(module)}) imports {wrong}; it may import only "
                       f"{sorted(ALLOWED[part_of(module)])} and the shared modules")


def test_the_check_can_fail(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from containers.app.project import Project\n"
                      "import containers.run.workload\n"
                      "from containers.errors import ConfigError\n"
                      "from containers.image import provenance\n")
    assert wrong_imports("containers.publish.m", source) == [
        "containers.app.project", "containers.app.project.Project"]
    assert wrong_imports("containers.image.m", source) == [
        "containers.app.project", "containers.app.project.Project", "containers.run.workload"]
    assert wrong_imports("containers.app.m", source) == []


def missing_tests(package: Path, tests: Path) -> list[str]:
    """The modules of ``package`` with no mirrored test file: ``<stage>/<m>.py`` is tested in
    ``tests/<stage>/test_<m>.py``, a top-level ``<m>.py`` in ``tests/test_<m>.py``."""
    return sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                  if path.name != "__init__.py"
                  and not (tests / path.relative_to(package).parent
                           / f"test_{path.name}").is_file())


def test_every_module_has_its_mirrored_test_file() -> None:
    missing = missing_tests(PACKAGE, ROOT / "tests")
    assert not missing, f"modules without their tests/<stage>/test_<m>.py: {missing}"


def test_the_mirror_check_can_fail(tmp_path: Path) -> None:
    for name in ("package/run/a.py", "package/run/b.py", "package/run/__init__.py",
                 "package/c.py", "package/d.py", "tests/run/test_a.py", "tests/test_c.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert missing_tests(tmp_path / "package", tmp_path / "tests") == ["d.py", "run/b.py"]


def long_docstrings(package: Path, most: int = 8) -> list[str]:
    """The modules whose docstring spans more than ``most`` lines, quotes included: a longer
    explanation belongs in docs/architecture.md."""
    found = []
    for path in sorted(package.rglob("*.py")):
        first = ast.parse(path.read_text()).body[:1]
        if first and isinstance(first[0], ast.Expr) and isinstance(first[0].value, ast.Constant) \
                and first[0].end_lineno - first[0].lineno >= most:
            found.append(str(path.relative_to(package)))
    return found


def test_module_docstrings_are_at_most_eight_lines() -> None:
    assert long_docstrings(PACKAGE) == []


def test_the_docstring_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.py").write_text('"""One.\n' + "more\n" * 7 + '"""\n')
    (tmp_path / "b.py").write_text('"""One.\n' + "more\n" * 6 + '"""\nx = 1\n')
    assert long_docstrings(tmp_path) == ["run/a.py"]
