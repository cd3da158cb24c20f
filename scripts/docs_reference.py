"""The docs' reference, generated from the code so it cannot drift from it.

Hand-written pages under ``docs/`` hold markers (``<!-- generated: tasks -->``); this module
replaces each marker with Markdown made from the code itself: every invoke task and its flags
(from the tasks' own help, as ``invoke <task> -h`` prints it), every field of the input files
(from ``schemas/*.json``, the JSON Schemas of the loaders' models), every site's facts with the
comments that cite their sources, every module of ``containers/`` and ``jobs/`` with its
docstring's first sentence, and the error family.

It is the MkDocs hook of ``mkdocs.yml`` (``on_page_markdown``), so every build regenerates it,
and a script: ``python scripts/docs_reference.py tasks`` prints one generated block, and
``python scripts/docs_reference.py --write`` refills the blocks in the pages themselves (up to
``<!-- end generated: NAME -->``), which are committed so the reference reads whole where the
repository is read; a test fails when they are not current.
"""

from __future__ import annotations

import ast
import copy
import html
import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]


def importable() -> None:
    """The project importable (``tasks``, ``containers``) from the checkout this file is in:
    MkDocs restores ``sys.path`` after loading a hook, so this runs when a block is made."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

#: A generated block: its opening marker, what was generated last (committed, so the page reads
#: whole where the repository is read), and its closing marker.
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$\n?(?:(?:.*\n)*?<!-- end generated: \1 -->$)?",
                    re.M)


#: A Markdown code span: its text is shown as written, so it is never escaped.
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def prose(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped outside code spans: a placeholder such as
    ``<target>`` in a help text is shown, not read by the browser as a tag and lost."""
    parts, last = [], 0
    for span in CODE_SPAN.finditer(text):
        parts += [html.escape(text[last:span.start()], quote=False), span.group(0)]
        last = span.end()
    return "".join(parts) + html.escape(text[last:], quote=False)


def cell(text: object) -> str:
    """``text`` made safe for one Markdown table cell: one line, pipes escaped, and what it
    quotes kept (:func:`prose`)."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- tasks -------------------------------------------------------------------------------------

def task_collection():
    """The project's invoke tasks as invoke itself loads them: a copy, since invoke pops each
    help entry as it builds a task's arguments (the help of the module's own tasks stays)."""
    from invoke import Collection

    return copy.deepcopy(Collection.from_module(importlib.import_module("tasks")))


def task_flags() -> dict[str, list[tuple[str, str]]]:
    """``{task: [(flag, help), ...]}``: invoke's own help rows (what ``-h`` prints)."""
    return {ctx.name: list(ctx.help_tuples()) for ctx in task_collection().to_contexts()}


def tasks_markdown() -> str:
    collection = task_collection()
    flags = task_flags()
    parts = []
    for name in sorted(collection.task_names):
        doc = inspect.cleandoc(collection[name].body.__doc__ or "")
        parts.append(f"## invoke {name}\n\n{prose(doc)}\n\n"
                     + table(["flag", "what it does [type; default]"],
                             [(f"`{flag}`", text) for flag, text in flags[name]]))
    return "\n".join(parts)


# --- input fields ------------------------------------------------------------------------------

def _resolve(node: dict, root: dict) -> dict:
    """``node`` with a local ``$ref`` (``#/$defs/X``) replaced by what it names."""
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {**root["$defs"][ref.split("/")[-1]], **{k: v for k, v in node.items()
                                                         if k != "$ref"}}
    return node


def _kind(node: dict, root: dict) -> str:
    """A property's type in words: ``string``, ``integer/null``, ``Partition`` (a model)."""
    if "anyOf" in node:
        return "/".join(_kind(option, root) for option in node["anyOf"])
    if "$ref" in node:
        return node["$ref"].split("/")[-1]
    kind = node.get("type", "")
    kind = "/".join(kind) if isinstance(kind, list) else kind
    if kind == "array" and isinstance(node.get("items"), dict):
        return f"list of {_kind(node['items'], root) or 'values'}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"mapping of {_kind(node['additionalProperties'], root) or 'values'}"
    return kind


def _nested(node: dict, root: dict) -> list[tuple[str, dict]]:
    """The objects with properties below a property, each with the key suffix it takes."""
    found = []
    for option in node.get("anyOf", [node]):
        option = _resolve(option, root)
        if option.get("properties"):
            found.append((".", option))
        for key, suffix in (("items", "[]."), ("additionalProperties", ".<name>.")):
            inner = option.get(key)
            if isinstance(inner, dict) and _resolve(inner, root).get("properties"):
                found.append((suffix, _resolve(inner, root)))
    return found


def schema_rows(schema: dict, prefix: str = "", root: dict | None = None
                ) -> list[tuple[str, ...]]:
    """Rows of a JSON Schema's properties, nested objects (``$ref``, ``anyOf``, lists and
    mappings of them) as dotted keys."""
    root = root or schema
    rows: list[tuple[str, ...]] = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        resolved = _resolve(prop, root)
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop and \
            not isinstance(prop["default"], dict) else ""
        choices = ", ".join(f"`{c}`" for c in resolved.get("enum", []))
        doc = prop.get("description") or resolved.get("description", "")
        rows.append((f"`{prefix}{name}`", _kind(prop, root), "yes" if name in required else "",
                     default, choices, doc))
        for suffix, nested in _nested(prop, root):
            rows += schema_rows(nested, prefix + name + suffix, root)
    return rows


FIELD_HEADER = ("key", "type", "required", "default", "one of", "what it is")


def inputs_markdown() -> str:
    """One section per input file's JSON Schema (``schemas/*.json``), each key with its doc."""
    parts = []
    for path in sorted((ROOT / "schemas").glob("*.json")):
        schema = json.loads(path.read_text())
        title = schema.get("title") or path.stem
        anchor = path.name.split(".")[0]  # site, recipe, env-spec, settings: stable links
        parts.append(f"## JSON Schema: {prose(title)} (`schemas/{path.name}`) {{#{anchor}}}\n\n"
                     + (prose(schema["description"]) + "\n\n" if schema.get("description")
                        else "") + table(FIELD_HEADER, schema_rows(schema)))
    return "\n".join(parts)


# --- site facts --------------------------------------------------------------------------------

def comments_at(lines: list[str], line: int | None) -> str:
    """The comment block just above 1-based ``line`` and the comment at its end."""
    if not line:
        return ""
    above, index = [], line - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        text = lines[index].strip().lstrip("#").strip()
        if not text.startswith("yaml-language-server:"):  # an editor's schema line
            above.insert(0, text)
        index -= 1
    own = lines[line - 1]
    trailing = own.split(" #", 1)[1].strip() if " #" in own and "'" not in own.split(" #")[0] \
        and '"' not in own.split(" #")[0] else ""
    return " ".join([*above, trailing]).strip()


def site_facts(data: Any, lines: list[str], key: str = "") -> list[tuple[str, str, str]]:
    """``(key, value, source)`` per leaf of a located site profile."""
    from containers.inputs.yamlsource import LocatedDict, LocatedList

    rows: list[tuple[str, str, str]] = []
    items: Iterable[tuple[str, Any, int | None]]
    if isinstance(data, LocatedDict):
        items = ((f"{key}.{k}" if key else str(k), v, data.line_of(str(k)))
                 for k, v in data.items())
    elif isinstance(data, LocatedList) and any(isinstance(v, dict) for v in data):
        items = ((f"{key}[{i}]", v, data.line_of(i)) for i, v in enumerate(data))
    else:
        return []
    for name, value, line in items:
        if isinstance(value, dict) and value or (isinstance(value, list)
                                                 and any(isinstance(v, dict) for v in value)):
            note = comments_at(lines, line)
            if note:
                rows.append((name, "", note))
            rows += site_facts(value, lines, name)
        else:
            shown = json.dumps(value) if not isinstance(value, str) else value
            rows.append((name, shown, comments_at(lines, line)))
    return rows


def sites_markdown() -> str:
    from containers.inputs.yamlsource import load_yaml_file

    parts = []
    for path in sorted((ROOT / "sites").glob("*.yaml")):
        data = load_yaml_file(path)
        rows = [(f"`{k}`", f"`{v}`" if v else "", s)
                for k, v, s in site_facts(data, path.read_text().splitlines())]
        parts.append(f"## {path.stem}\n\n{cell(data.get('description', ''))}\n\n"
                     f"From `sites/{path.name}`.\n\n"
                     + table(["key", "value", "source and notes (the profile's comments)"], rows))
    return "\n".join(parts)


# --- layout and errors -------------------------------------------------------------------------

def first_sentence(doc: str | None) -> str:
    """A docstring's first paragraph cut after its first sentence: the module's one line."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "`")
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def modules() -> list[Path]:
    """Every module of ``containers/`` and ``jobs/``, relative to the project root."""
    found = [*ROOT.glob("containers/**/*.py"), *ROOT.glob("jobs/**/*.py")]
    return sorted(p.relative_to(ROOT) for p in found if "__pycache__" not in p.parts)


def layout_markdown() -> str:
    rows = []
    for path in modules():
        doc = ast.get_docstring(ast.parse((ROOT / path).read_text()))
        rows.append((f"`{path.as_posix()}`", first_sentence(doc) or "(no docstring)"))
    return table(["module", "what it is (its docstring's first sentence)"], rows)


def error_families() -> list[type]:
    from containers import errors

    return [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, errors.ContainersError) and obj.__module__ == errors.__name__]


def errors_markdown() -> str:
    rows = [(f"`{kind.__name__}`", kind.exit_code, first_sentence(kind.__doc__))
            for kind in sorted(error_families(), key=lambda k: (k.exit_code, k.__name__))]
    return table(["family", "exit", "what it means"], rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "tasks": tasks_markdown, "inputs": inputs_markdown, "sites": sites_markdown,
    "layout": layout_markdown, "errors": errors_markdown,
}


def fill(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: NAME -->`` marker replaced by its block."""
    importable()

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        return (f"<!-- generated: {name} -->\n{GENERATORS[name]().rstrip()}\n"
                f"<!-- end generated: {name} -->")
    return MARKER.sub(replace, markdown)


def pages() -> list[Path]:
    """The docs pages that hold a generated block."""
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if MARKER.search(p.read_text()))


def write_pages() -> list[Path]:
    """Refill every page's generated blocks in place; the pages changed."""
    changed = []
    for page in pages():
        text = page.read_text()
        if fill(text) != text:
            page.write_text(fill(text))
            changed.append(page)
    return changed


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: generated blocks are filled in as each page is read."""
    return fill(markdown)


if __name__ == "__main__":
    importable()
    if sys.argv[1:] == ["--write"]:
        for page in write_pages():
            print(f"rewrote {page.relative_to(ROOT)}")
    elif len(sys.argv) == 2 and sys.argv[1] in GENERATORS:
        print(GENERATORS[sys.argv[1]]())
    else:
        sys.exit(f"usage: {sys.argv[0]} --write | {'|'.join(GENERATORS)}")
