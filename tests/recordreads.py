"""Counting keyed reads (``record["x"]``, ``record.get("x")``) of the five cross-module records
(build record, catalogue entry, job record, verdict, smoke report) outside containers/records.py.

What the count covers, honestly: an expression counts as one of the records when it is
- a call of a record reader: ``provenance.read``, ``read_provenance``, ``cat.find``,
  ``verdict.record``, ``verdict_of``, ``_job_record``, ``read_smoke``, a record type's ``of`` or
  ``view``, or ``read_json_object``/``read_regular_json`` of a path naming ``verdict.json``,
  ``IMAGE_RECORD``, ``JOB_RECORD``, ``SMOKE_REPORT`` or ``allreduce.json``;
- an attribute ``.provenance`` (a publish plan's build record), ``.record`` (an image ref's) or
  ``.report`` (a run's report as it left it: the smoke report for smoke, read through
  ``records.RunReport`` as ``result.run_report``);
- a name bound, in the same function, to one of these (``x = ...``, ``x = ... or {}``), the
  loop name over ``cat.entries(...)``, the names unpacked from ``find_verdict``'s ``found``,
  or a parameter named ``provenance``, ``image_record`` (in publish/ also ``entry``: there it
  always names a catalogue entry) or annotated with a record type;
- the ``provenance`` key of a record (a catalogue entry's copy of the build record).
Reads with a computed key (``record.get(k) for k in SMOKE_KEYS``) and reads of a record after
it was handed to a function under another parameter name are not seen. The count is the same
function run on the base commit's tree and on this one (``.report`` counted since the run's
report got its reader: 10 keyed reads in prove/smoke.py and prove/verdict.py before it).
"""

from __future__ import annotations

import ast
from pathlib import Path

READERS = {"read_provenance", "verdict_of", "_job_record", "read_smoke", "find_verdict"}
QUALIFIED = {("provenance", "read"), ("cat", "find"), ("verdict", "record")}
RECORD_TYPES = {"BuildRecord", "CatalogueEntry", "JobRecord", "Verdict", "SmokeReport"}
FILE_NAMES = ("verdict.json", "IMAGE_RECORD", "JOB_RECORD", "SMOKE_REPORT", "allreduce.json")
ATTRS = {"provenance", "record", "report"}
PARAMS = {"provenance", "image_record"}
#: In publish/, ``entry`` always names a catalogue entry (the convention this count relies on).
PUBLISH_PARAMS = {"entry"}


def _is_reader_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in READERS or (func.id in ("read_json_object", "read_regular_json")
                                      and any(n in ast.unparse(node) for n in FILE_NAMES))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return ((func.value.id, func.attr) in QUALIFIED
                or (func.value.id in RECORD_TYPES and func.attr in ("of", "view")))
    return False


class _Function(ast.NodeVisitor):
    """One function's record names and keyed reads of them."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.reads = set(names), []

    def is_record(self, node: ast.AST) -> bool:
        if isinstance(node, ast.BoolOp):
            return self.is_record(node.values[0])
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            return node.attr in ATTRS
        if _is_reader_call(node):
            return True
        return self.keyed(node) == "provenance"

    def keyed(self, node: ast.AST) -> str | None:
        """The constant key ``node`` reads from a record, else None."""
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str) and self.is_record(node.value):
            return node.slice.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and self.is_record(node.func.value):
            return node.args[0].value
        return None

    def bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name) and self.is_record(value):
            self.names.add(target.id)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Name) \
                and value.id == "found" and len(target.elts) == 2 \
                and isinstance(target.elts[1], ast.Name):
            self.names.add(target.elts[1].id)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        for target in node.targets:
            self.bind(target, node.value)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._loop(node.target, node.iter)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._loop(node.target, node.iter)
        self.generic_visit(node)

    def _loop(self, target: ast.AST, over: ast.AST) -> None:
        if isinstance(target, ast.Name) and isinstance(over, ast.Call) \
                and isinstance(over.func, ast.Attribute) and over.func.attr == "entries":
            self.names.add(target.id)

    def generic_visit(self, node: ast.AST) -> None:
        key = self.keyed(node)
        if key is not None:
            self.reads.append((node.lineno, key))
        super().generic_visit(node)


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> set[str]:
    args = function.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
            if a.arg in names or (a.annotation is not None
                                   and any(t in ast.unparse(a.annotation) for t in RECORD_TYPES))}


def keyed_reads(root: Path) -> list[str]:
    """``path:line: key`` for each keyed read of a record in ``root/containers`` (less
    records.py), in functions and at module level."""
    found = []
    for path in sorted((root / "containers").rglob("*.py")):
        if path.name == "records.py" and path.parent.name == "containers":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        seen: set[tuple[int, str]] = set()
        names = PARAMS | (PUBLISH_PARAMS if path.parent.name == "publish" else set())
        for function in functions:
            visitor = _Function(_params(function, names))
            for statement in function.body:
                visitor.visit(statement)
            seen.update(visitor.reads)
        found += [f"{path.relative_to(root)}:{line}: {key}" for line, key in sorted(seen)]
    return found
