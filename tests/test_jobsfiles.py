"""The engine's edges into ``jobs/`` (files loaded by path), all in containers/jobsfiles.py."""

from __future__ import annotations

import ast
from pathlib import Path

from containers import jobsfiles
from tests.fixtures import ROOT

#: What loading a Python file by path takes: a module spec or a loader of a file, or running it.
BY_PATH = {"spec_from_file_location", "SourceFileLoader", "run_path", "exec_module",
           "load_source"}


def test_the_edges_are_this_checkouts_jobs_files() -> None:
    assert jobsfiles.JOBS_DIR == ROOT / "jobs"
    for name in ("choices", "cudadriver", "trainreport"):
        module = getattr(jobsfiles, name)
        assert module.__file__ == str(ROOT / "jobs" / f"{name}.py")
        assert module.__name__ == f"containers_jobs_{name}"


def loads_by_path(path: Path) -> list[str]:
    """The by-path loading calls (:data:`BY_PATH`) a source file makes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(node.attr if isinstance(node, ast.Attribute) else node.id
                  for node in ast.walk(tree)
                  if isinstance(node, (ast.Attribute, ast.Name))
                  and (node.attr if isinstance(node, ast.Attribute) else node.id) in BY_PATH)


def test_no_other_module_loads_a_file_by_path() -> None:
    """A new edge into jobs/ is a name in containers/jobsfiles.py, never a loader of its own."""
    sources = [ROOT / "tasks.py", *sorted((ROOT / "containers").rglob("*.py"))]
    found = {str(path.relative_to(ROOT)): loads_by_path(path) for path in sources}
    assert {path: calls for path, calls in found.items() if calls} == {
        "containers/jobsfiles.py": ["exec_module", "spec_from_file_location"]}


def test_the_check_can_fail(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import importlib.util, runpy\n"
                      "spec = importlib.util.spec_from_file_location('c', 'jobs/choices.py')\n"
                      "runpy.run_path('jobs/gate.py')\n")
    assert loads_by_path(source) == ["run_path", "spec_from_file_location"]
