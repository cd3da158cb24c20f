"""A strict well-formedness check of the pages publish writes, on Python's own ``html.parser``
(no HTML library is installed, and browsers forgive what this refuses):

- every element but the void ones is closed, in order (``</td>`` never closes a ``<tr>``);
- no block element opens inside a ``<p>`` (a browser would end the paragraph there, silently
  moving what follows out of it);
- ids are unique;
- every link and image source stays in the publish folder and resolves: ``#id`` to an id of
  the page, a relative path to a file under ``root`` (its ``#id`` to an id of that page when it
  is HTML); no scheme, host or absolute path (a ``data:`` image is the one exception).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
#: Elements a browser never keeps inside a ``<p>``.
BLOCK = {"address", "article", "aside", "blockquote", "div", "dl", "fieldset", "figure",
         "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main", "nav",
         "ol", "p", "pre", "section", "table", "ul"}


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, int]] = []
        self.ids: list[str] = []
        self.refs: list[tuple[str, str, int]] = []  # (tag, value, line)
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        line = self.getpos()[0]
        if tag in BLOCK and any(name == "p" for name, _ in self.open):
            self.problems.append(f"line {line}: <{tag}> inside a <p>")
        for name, value in attrs:
            if name == "id":
                self.ids.append(value or "")
            if name in ("href", "src"):
                self.refs.append((tag, value or "", line))
        if tag not in VOID:
            self.open.append((tag, line))

    def handle_endtag(self, tag: str) -> None:
        line = self.getpos()[0]
        if tag in VOID:
            self.problems.append(f"line {line}: </{tag}> closes a void element")
        elif not self.open:
            self.problems.append(f"line {line}: </{tag}> closes nothing")
        elif self.open[-1][0] != tag:
            opened, at = self.open[-1]
            self.problems.append(f"line {line}: </{tag}> closes <{opened}> (line {at})")
        else:
            self.open.pop()


def _parsed(text: str) -> _Parser:
    parser = _Parser()
    parser.feed(text)
    parser.close()
    parser.problems += [f"line {at}: <{tag}> never closed" for tag, at in parser.open]
    return parser


def _ref_problem(tag: str, value: str, page: Path, root: Path, ids: set[str]) -> str | None:
    """Why one href/src of ``page`` does not resolve inside ``root``, else None."""
    if tag == "img" and value.startswith("data:image/"):
        return None
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value.strip()) or value.startswith(("/", "\\")):
        return f"{value!r} leaves the publish folder"
    path, _, fragment = value.partition("#")
    if not path:
        return None if fragment in ids else f"{value!r}: no element has that id"
    target = (page.parent / path).resolve()
    if not target.is_relative_to(root.resolve()):
        return f"{value!r} leaves the publish folder"
    if not target.is_file():
        return f"{value!r}: no such file"
    if fragment and target.suffix == ".html" and fragment not in _parsed(target.read_text()).ids:
        return f"{value!r}: {path} has no element with that id"
    return None


def problems(page: Path, root: Path) -> list[str]:
    """Every way ``page`` (a file under ``root``, the publish folder) is not well formed."""
    text = page.read_text()
    parser = _parsed(text)
    found = [] if text.startswith("<!DOCTYPE html>") else ["no <!DOCTYPE html> first"]
    found += parser.problems
    seen: set[str] = set()
    for name in parser.ids:
        if name in seen or not name or re.search(r"\s", name):
            found.append(f"id {name!r} is empty, has a space or is used twice")
        seen.add(name)
    for tag, value, line in parser.refs:
        problem = _ref_problem(tag, value, page, root, seen)
        if problem:
            found.append(f"line {line}: <{tag}> {problem}")
    return [f"{page.name}: {problem}" for problem in found]


def text_of(page: str) -> str:
    """What a reader sees of ``page``: its text, entities decoded, tags gone."""
    parts: list[str] = []
    parser = HTMLParser(convert_charrefs=True)
    parser.handle_data = parts.append  # type: ignore[method-assign]
    parser.feed(page)
    parser.close()
    return "".join(parts)
