"""A lossless reader for Apptainer definition files.

Definitions stay plain Apptainer files (``apptainer build --build-arg-file`` works on them without
this tool), so the tool must never rewrite them: :class:`Definition` keeps the header and every
section byte for byte (``definition.text == original``), finds ``{{ ARG }}`` build arguments and their
``%arguments`` defaults, and reports unknown sections and unset arguments. spython's recipe parser is
not used because it reorders and reformats sections (see the README).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import suggest

SECTIONS = (
    "setup", "files", "post", "environment", "runscript", "startscript", "test", "labels", "help",
    "arguments", "appinstall", "apprun", "appenv", "applabels", "appfiles", "apphelp", "apptest",
    "appstart",
)
BOOTSTRAP_AGENTS = (
    "debootstrap", "localimage", "docker", "docker-archive", "docker-daemon", "oci", "oci-archive",
    "library", "oras", "shub", "yum", "dnf", "zypper", "busybox", "arch", "scratch", "sif",
)
_SECTION_RE = re.compile(r"^%([A-Za-z_]+)(.*)$")
_ARG_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_HEADER_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*:\s*(.*?)\s*$")


@dataclass(frozen=True)
class Section:
    """One ``%name`` section: its header line and body exactly as written."""

    name: str
    args: str
    header_line: str
    body: str
    line: int


@dataclass(frozen=True)
class Definition:
    """A parsed definition that can give back its exact text."""

    path: Path | None
    preamble: str
    header: dict[str, str]
    header_lines: dict[str, int]
    sections: tuple[Section, ...]
    arg_lines: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.preamble + "".join(s.header_line + s.body for s in self.sections)

    @property
    def bootstrap(self) -> str:
        return self.header.get("bootstrap", "")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def has_section(self, name: str) -> bool:
        return self.section(name) is not None

    @property
    def argument_defaults(self) -> dict[str, str]:
        """``KEY=VALUE`` lines of ``%arguments``: the defaults Apptainer itself would use."""
        section = self.section("arguments")
        defaults: dict[str, str] = {}
        if section is None:
            return defaults
        for raw in section.body.splitlines():
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            defaults[key.strip()] = value.strip().strip('"').strip("'")
        return defaults

    @property
    def build_args(self) -> tuple[str, ...]:
        """Every ``{{ NAME }}`` used, in order of first use."""
        return tuple(self.arg_lines)

    def missing_args(self, given: dict[str, str]) -> list[str]:
        defaults = self.argument_defaults
        return [a for a in self.build_args if a not in given and a not in defaults]

    def render(self, args: dict[str, str]) -> str:
        """The text Apptainer builds from: ``{{ ARG }}`` replaced by given values or defaults."""
        values = {**self.argument_defaults, **args}
        missing = self.missing_args(args)
        if missing:
            first = missing[0]
            raise ConfigError(f"build argument {{{{ {first} }}}} has no value: give it with "
                              f"--build-arg {first}=VALUE or a default in %arguments",
                              path=self.path, line=self.arg_lines.get(first), key=first)
        return _ARG_RE.sub(lambda m: values[m.group(1)], self.text)

    def validate(self) -> None:
        """Reject what Apptainer would reject late: no bootstrap agent, unknown sections."""
        if "bootstrap" not in self.header:
            raise ConfigError("the header has no 'Bootstrap:' line", path=self.path, line=1,
                              key="Bootstrap")
        agent = self.bootstrap
        if agent not in BOOTSTRAP_AGENTS and not _ARG_RE.search(agent):
            raise ConfigError(f"unknown bootstrap agent '{agent}'"
                              f"{suggest(agent, BOOTSTRAP_AGENTS)}", path=self.path,
                              line=self.header_lines.get("bootstrap"), key="Bootstrap")
        for section in self.sections:
            if section.name not in SECTIONS:
                raise ConfigError(f"unknown section '%{section.name}'"
                                  f"{suggest(section.name, SECTIONS)}", path=self.path,
                                  line=section.line, key=f"%{section.name}")
        seen: set[str] = set()
        for section in self.sections:
            ident = section.name + (section.args.strip() if section.name.startswith("app") else "")
            if ident in seen:
                raise ConfigError(f"section '%{section.name}' appears twice", path=self.path,
                                  line=section.line, key=f"%{section.name}")
            seen.add(ident)


def parse_definition(text: str, *, path: Path | None = None) -> Definition:
    """Split ``text`` into preamble and sections without changing a byte."""
    lines = text.splitlines(keepends=True)
    preamble: list[str] = []
    header: dict[str, str] = {}
    header_lines: dict[str, int] = {}
    sections: list[Section] = []
    current: tuple[str, str, str, int] | None = None
    body: list[str] = []
    arg_lines: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        for match in _ARG_RE.finditer(raw):
            arg_lines.setdefault(match.group(1), number)
        match = _SECTION_RE.match(raw.rstrip("\r\n"))
        if match:
            if current is not None:
                sections.append(Section(current[0], current[1], current[2], "".join(body),
                                        current[3]))
            current, body = (match.group(1).lower(), match.group(2), raw, number), []
            continue
        if current is None:
            preamble.append(raw)
            stripped = raw.strip()
            if stripped and not stripped.startswith("#"):
                header_match = _HEADER_RE.match(raw)
                if not header_match:
                    raise ConfigError(f"header line is not 'Key: value': {stripped!r}",
                                      path=path, line=number)
                key = header_match.group(1).lower()
                header[key] = header_match.group(2)
                header_lines[key] = number
        else:
            body.append(raw)
    if current is not None:
        sections.append(Section(current[0], current[1], current[2], "".join(body), current[3]))
    return Definition(path=path, preamble="".join(preamble), header=header,
                      header_lines=header_lines, sections=tuple(sections), arg_lines=arg_lines)


def read_definition(path: Path) -> Definition:
    """Read a definition file exactly (newlines untranslated) and parse it."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except FileNotFoundError as exc:
        raise ConfigError("definition file not found", path=path) from exc
    return parse_definition(text, path=path)
