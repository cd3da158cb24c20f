"""A lossless reader for Apptainer definition files. Every stage is kept byte for byte and lines
split as Apptainer splits them, so the checks see every line it runs (why not spython:
docs/architecture.md, Definitions)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import suggest
from containers.inputs.yamlsource import read_input_text

#: Apptainer's sections (``validSections`` of pkg/build/types/parser/deffile.go; Apptainer 1.4
#: still runs ``%pre``) and its SCIF app sections (``appSections``, ``%apprun NAME``).
STANDARD_SECTIONS = (
    "setup", "files", "post", "environment", "runscript", "startscript", "test", "labels", "help",
    "arguments", "pre",
)
APP_SECTIONS = (
    "appinstall", "apprun", "appenv", "applabels", "appfiles", "apphelp", "apptest", "appstart",
)
SECTIONS = STANDARD_SECTIONS + APP_SECTIONS
#: Apptainer's header keywords (``validHeaders``); ``otherurl`` takes a number (``OtherURL1``).
HEADER_KEYS = (
    "bootstrap", "from", "includecmd", "mirrorurl", "updateurl", "osversion", "include",
    "library", "registry", "namespace", "stage", "product", "user", "regcode", "productpgp",
    "registerurl", "modules", "otherurl", "fingerprints", "confurl", "setopt", "target",
    "frontend", "filename", "buildargs",
)
BOOTSTRAP_AGENTS = (
    "debootstrap", "localimage", "docker", "docker-archive", "docker-daemon", "oci", "oci-archive",
    "library", "oras", "shub", "yum", "dnf", "zypper", "busybox", "arch", "scratch", "sif",
)
#: Bootstraps whose base is ``From:`` (conveyorPacker_oci.go, _local.go, _library.go, _oras.go,
#: _shub.go of internal/pkg/build/sources; no parser check asks for it), and what Apptainer
#: 1.4.5 does without one (measured with ``apptainer build``: ``filepath.Clean("")`` is ``.``).
FROM_AGENTS = {
    **dict.fromkeys(("docker", "docker-archive", "docker-daemon", "oci-archive", "library",
                     "oras", "shub"), "fails to fetch an empty reference"),
    "oci": "reads the working folder as an OCI layout",
    "localimage": "builds the working folder as the image",
}
_ARG_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: Go's ``unicode.IsSpace`` (``bufio.ScanWords``, ``strings.TrimSpace`` in deffile.go); Python's
#: ``str.split()`` also splits at ``\x1c``-``\x1f``, which Go keeps in a word.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"
#: An app name Apptainer can hold: it becomes a folder, unquoted shell words and variable names
#: (apps.go), and ``..`` leaves ``/scif/apps`` (``%appinstall ../../etc`` installs in ``/etc``).
APP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def apptainer_lines(text: str) -> list[str]:
    """Cut as Apptainer's ``bufio.ScanLines`` cuts: ``str.splitlines`` also cuts at form feed,
    ``\x85``, U+2028..., so a ``%labels`` after a form feed would hide a line Apptainer runs."""
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]]
    return lines + [pieces[-1]] if pieces[-1] else lines


def line_text(raw: str) -> str:
    """As ``bufio.ScanLines`` reads it: a CRLF definition reads as an LF one."""
    line = raw[:-1] if raw.endswith("\n") else raw
    return line[:-1] if line.endswith("\r") else line


@dataclass(frozen=True)
class Section:
    """One ``%name`` section: its header line and body exactly as written."""

    name: str
    args: str
    header_line: str
    body: str
    line: int

    @property
    def app(self) -> str | None:
        """As Apptainer's ``parseTokenSection`` names it: ``%apprun my app`` is app ``my``."""
        if self.name not in APP_SECTIONS or not self.args.startswith(" "):
            return None
        return self.args[1:].split(" ", 1)[0]

    def app_problem(self) -> str | None:
        """Why Apptainer would not build this app section as written, else None."""
        name = self.app
        if not name:
            return f"'%{self.name}' names no app (%{self.name} NAME)"
        if not APP_NAME.fullmatch(name):
            return (f"app name {name!r} is not a plain name (letters, digits, '_', '.', '-'; "
                    "not starting with '.' or '-'): Apptainer makes it a folder under "
                    "/scif/apps and writes it into shell scripts")
        rest = self.args[1:].split(" ", 1)[1:]
        if rest and rest[0].strip(GO_SPACE):
            return (f"'%{self.name}{self.args}' names app {name!r}: Apptainer drops "
                    f"{rest[0].strip(GO_SPACE)!r} (an app name is one word)")
        return None


@dataclass(frozen=True)
class Stage:
    """One stage: its header (``Bootstrap:``, ``From:``, ``Stage:``…) and its sections."""

    preamble: str
    header: dict[str, str]
    header_lines: dict[str, int]
    sections: tuple[Section, ...]
    line: int = 1

    @property
    def name(self) -> str | None:
        return self.header.get("stage")

    @property
    def text(self) -> str:
        return self.preamble + "".join(s.header_line + s.body for s in self.sections)

    @property
    def bootstrap(self) -> str:
        return self.header.get("bootstrap", "")

    def section(self, name: str) -> Section | None:
        """``%name`` as ``parseTokenSection`` reads it: every ``%name`` of this stage appended,
        with the last arguments given; line and header of the first."""
        found = [s for s in self.sections if s.name == name]
        if len(found) < 2:
            return found[0] if found else None
        args = next((s.args for s in reversed(found) if s.args.strip()), found[0].args)
        return replace(found[0], args=args, body="".join(s.body for s in found))

    @property
    def arg_lines(self) -> dict[str, int]:
        """Each ``{{ NAME }}`` this stage uses and the line of its first use."""
        found: dict[str, int] = {}
        for number, raw in enumerate(apptainer_lines(self.text), start=self.line):
            for match in _ARG_RE.finditer(raw):
                found.setdefault(match.group(1), number)
        return found

    @property
    def argument_defaults(self) -> dict[str, str]:
        """This stage's ``%arguments`` defaults (a ``--build-arg`` serves every stage)."""
        defaults: dict[str, str] = {}
        section = self.section("arguments")
        for raw in apptainer_lines(section.body) if section is not None else ():
            line = line_text(raw).strip(GO_SPACE)
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            defaults[key.strip(GO_SPACE)] = value.strip(GO_SPACE).strip('"').strip("'")
        return defaults

    def render(self, args: dict[str, str]) -> str:
        values = {**self.argument_defaults, **args}
        return _ARG_RE.sub(lambda m: values[m.group(1)], self.text)

    def validate(self, *, path: Path | None, earlier: tuple[str, ...]) -> None:
        """Refuse what Apptainer refuses (a repeated section it appends to the first)."""
        for key, number in self.header_lines.items():
            if key not in HEADER_KEYS and re.sub(r"\d+$", "", key) != "otherurl":
                raise ConfigError(f"unknown header keyword '{key}'{suggest(key, HEADER_KEYS)}",
                                  path=path, line=number, key=key)
        if "bootstrap" not in self.header:
            raise ConfigError("the header has no 'Bootstrap:' line", path=path, line=self.line,
                              key="Bootstrap")
        agent = self.bootstrap
        if agent not in BOOTSTRAP_AGENTS and not _ARG_RE.search(agent):
            raise ConfigError(f"unknown bootstrap agent '{agent}'"
                              f"{suggest(agent, BOOTSTRAP_AGENTS)}", path=path,
                              line=self.header_lines.get("bootstrap"), key="Bootstrap")
        if agent in FROM_AGENTS and not self.header.get("from", "").strip(GO_SPACE):
            raise ConfigError(f"'Bootstrap: {agent}' takes its base from 'From:', and this "
                              f"stage has none: Apptainer {FROM_AGENTS[agent]}", path=path,
                              line=self.header_lines.get("from", self.header_lines.get(
                                  "bootstrap")), key="From")
        for section in self.sections:  # each header as Apptainer's parser judges it
            where = {"path": path, "line": section.line, "key": f"%{section.name}"}
            if section.header_line[:1] in GO_SPACE:
                raise ConfigError(f"the line {section.header_line.strip()!r} starts with '%' "
                                  "after spaces: Apptainer reads it as a section header with "
                                  "no name (invalid section)", path=path, line=section.line,
                                  key=section.header_line.split()[0])
            if section.name not in SECTIONS:
                raise ConfigError(f"unknown section '%{section.name}'"
                                  f"{suggest(section.name, SECTIONS)}", **where)
            problem = section.app_problem() if section.name in APP_SECTIONS else None
            if problem is not None:
                raise ConfigError(problem, **where)
            source = files_source_stage(section)
            if source is not None and source not in earlier:
                raise ConfigError(f"'%files from {source}': no earlier stage is named "
                                  f"'{source}'{suggest(source, earlier)}", **where)


def files_source_stage(section: Section) -> str | None:
    """``build`` for a ``%files from build`` section; None for any other section."""
    words = section.args.split()
    if section.name == "files" and len(words) == 2 and words[0] == "from":
        return words[1]
    return None


@dataclass(frozen=True)
class Definition:
    """A parsed definition (one stage or several) that can give back its exact text."""

    path: Path | None
    stages: tuple[Stage, ...]

    @property
    def text(self) -> str:
        return "".join(stage.text for stage in self.stages)

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    @property
    def sections(self) -> tuple[Section, ...]:
        return tuple(s for stage in self.stages for s in stage.sections)

    def section(self, name: str) -> Section | None:
        return self.final.section(name)

    @property
    def runs_in_image(self) -> bool:
        """Whether the build runs a script in the image (needing ``--fakeroot``): every app adds
        to ``%post`` (``HandlePost`` of apps.go); ``%test`` not, as builds run ``--notest``."""
        return any(s.name == "post" or s.name in APP_SECTIONS for s in self.sections)

    @property
    def argument_defaults(self) -> dict[str, str]:
        return self.final.argument_defaults

    @property
    def build_args(self) -> tuple[str, ...]:
        """Every ``{{ NAME }}`` used (any stage), in file order."""
        return tuple(self.missing_arg_lines(None))

    def missing_arg_lines(self, given: dict[str, str] | None) -> dict[str, int]:
        """Arguments used with no value, at their first line (``given`` None: every one used)."""
        found: dict[str, int] = {}
        for stage in self.stages:
            valued = {} if given is None else {**stage.argument_defaults, **given}
            for name, line in stage.arg_lines.items():
                if name not in valued:
                    found.setdefault(name, line)
        return found

    def render(self, args: dict[str, str]) -> str:
        """The text Apptainer builds from: ``{{ ARG }}`` given values, else the stage's defaults."""
        missing = self.missing_arg_lines(args)
        if missing:
            first, line = next(iter(missing.items()))
            raise ConfigError(f"build argument {{{{ {first} }}}} has no value: give it with "
                              f"--build-arg {first}=VALUE or a default in %arguments"
                              + (" of its stage" if len(self.stages) > 1 else ""),
                              path=self.path, line=line, key=first)
        return "".join(stage.render(args) for stage in self.stages)

    def validate(self) -> None:
        """Each stage valid on its own; stage names unique; ``%files from`` an earlier stage."""
        names: list[str] = []
        for stage in self.stages:
            stage.validate(path=self.path, earlier=tuple(names))
            if stage.name is not None:
                if stage.name in names:
                    raise ConfigError(f"stage name '{stage.name}' is used twice",
                                      path=self.path, line=stage.header_lines.get("stage"),
                                      key="Stage")
                names.append(stage.name)


#: Where Apptainer starts a new stage (``All`` in deffile.go): ``bootstrap:`` at a line's start.
_BOOTSTRAP_LINE = re.compile(r"^bootstrap:", re.IGNORECASE)


def section_header(raw: str) -> tuple[str, str] | None:
    """``(name, args)`` when ``raw`` starts a section; the name cut as ``getSectionName`` cuts it
    (to the first space, lower-cased: ``%post<TAB>`` gets a name Apptainer refuses)."""
    line = line_text(raw)
    if not line.lstrip(GO_SPACE).startswith("%"):  # its first word, as bufio.ScanWords cuts it
        return None
    bare = line.lstrip("%")
    name = bare.split(" ", 1)[0]
    return name.lower(), bare[len(name):]


def _header(lines: list[str], start: int, path: Path | None
            ) -> tuple[dict[str, str], dict[str, int]]:
    """A stage's header values and their lines, as Apptainer's ``doHeader`` reads them; a key
    given twice is refused (Apptainer keeps the last: a second ``From:`` would replace the base)."""
    values: dict[str, str] = {}
    numbers: dict[str, int] = {}
    pending: str | None = None
    for number, raw in enumerate(lines, start=start):
        stripped = line_text(raw).strip(GO_SPACE)
        if not stripped or stripped.startswith("#"):
            pending = None
            continue
        text = stripped.split("#", 1)[0]
        if pending is not None:
            key, value = pending, values[pending] + text.strip(GO_SPACE)
        else:
            if ":" not in text:
                raise ConfigError(f"header line is not 'Key: value': {stripped!r}",
                                  path=path, line=number)
            key, value = (part.strip(GO_SPACE) for part in text.split(":", 1))
            key = key.lower()
            if key in numbers:
                raise ConfigError(f"header key '{key}' is given twice (lines {numbers[key]} "
                                  f"and {number}); Apptainer uses only the last: give it once",
                                  path=path, line=number, key=key)
            numbers[key] = number
        pending = key if value.endswith("\\") else None
        if pending is not None:
            value = value[:-1]
            value = value[:-2] + "\n" if value.endswith("\\n") else value
        values[key] = value
    return values, numbers


def parse_definition(text: str, *, path: Path | None = None) -> Definition:
    """Split ``text`` as Apptainer does, byte for byte: ``bootstrap:`` at a line's start begins a
    stage (once the current one has a header line or a section)."""
    stages: list[Stage] = []
    preamble: list[str] = []
    sections: list[Section] = []
    current: Section | None = None
    body: list[str] = []
    start = 1

    def close_section() -> None:
        if current is not None:
            sections.append(replace(current, body="".join(body)))

    def close_stage() -> None:
        close_section()
        stages.append(Stage("".join(preamble), *_header(preamble, start, path),
                            tuple(sections), start))

    for number, raw in enumerate(apptainer_lines(text), start=1):
        if _BOOTSTRAP_LINE.match(raw) and (current is not None or any(
                line_text(line).strip(GO_SPACE)[:1] not in ("", "#") for line in preamble)):
            close_stage()
            preamble, sections, current, body, start = [], [], None, [], number
        found = section_header(raw)
        if found is not None:
            close_section()
            current, body = Section(*found, raw, "", number), []
        elif current is None:
            preamble.append(raw)
        else:
            body.append(raw)
    close_stage()
    return Definition(path=path, stages=tuple(stages))


def read_definition(path: Path) -> Definition:
    """Newlines untranslated; a regular UTF-8 file of bounded size (a FIFO would block)."""
    if not os.path.lexists(path):
        raise ConfigError("definition file not found", path=path)
    return parse_definition(read_input_text(path), path=path)
