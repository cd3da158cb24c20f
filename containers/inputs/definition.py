"""A lossless reader for Apptainer definition files.

Definitions stay plain Apptainer files (``apptainer build --build-arg-file`` works on them without
this tool), so the tool must never rewrite them: :class:`Definition` keeps the header and every
section byte for byte (``definition.text == original``), finds ``{{ ARG }}`` build arguments and their
``%arguments`` defaults, and reports unknown sections and unset arguments. spython's recipe parser is
not used because it reorders and reformats sections (see the README).

A definition may have several stages (Apptainer's multi-stage builds): each starts with its own
``Bootstrap:`` header (and a ``Stage: name``), has its own sections, and a later stage copies
files out of an earlier one with ``%files from <stage>``. A ``{{ ARG }}`` given with
``--build-arg`` serves every stage, while a ``%arguments`` default serves only its own stage (as
Apptainer reads them). The image is the last stage. The build passes the file to Apptainer
unchanged, so stages cost the tool nothing but reading them right.

``%setup`` runs on the build host as the building user and ``%files`` copies from the host: a
line there that reads a host path outside the build context the tool stages makes the image
depend on the build machine. :func:`host_path_uses` lists them for ``invoke check``.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import suggest
from containers.inputs.yamlsource import read_input_text

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
class Stage:
    """One stage: its header (``Bootstrap:``, ``From:``, ``Stage:``…) and its sections."""

    preamble: str
    header: dict[str, str]
    header_lines: dict[str, int]
    sections: tuple[Section, ...]
    line: int = 1

    @property
    def name(self) -> str | None:
        """The ``Stage:`` name (what ``%files from <stage>`` refers to), if it has one."""
        return self.header.get("stage")

    @property
    def text(self) -> str:
        return self.preamble + "".join(s.header_line + s.body for s in self.sections)

    @property
    def bootstrap(self) -> str:
        return self.header.get("bootstrap", "")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    @property
    def arg_lines(self) -> dict[str, int]:
        """Each ``{{ NAME }}`` this stage uses and the line of its first use."""
        found: dict[str, int] = {}
        for number, raw in enumerate(self.text.splitlines(), start=self.line):
            for match in _ARG_RE.finditer(raw):
                found.setdefault(match.group(1), number)
        return found

    @property
    def argument_defaults(self) -> dict[str, str]:
        """``KEY=VALUE`` lines of this stage's ``%arguments``: Apptainer's defaults for it (a
        default serves only its own stage; a ``--build-arg`` serves every stage)."""
        defaults: dict[str, str] = {}
        section = self.section("arguments")
        for raw in section.body.splitlines() if section is not None else ():
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            defaults[key.strip()] = value.strip().strip('"').strip("'")
        return defaults

    def missing_args(self, given: dict[str, str]) -> dict[str, int]:
        """The arguments this stage uses that neither ``given`` nor its defaults set, with the
        line of their first use."""
        defaults = self.argument_defaults
        return {a: n for a, n in self.arg_lines.items() if a not in given and a not in defaults}

    def render(self, args: dict[str, str]) -> str:
        values = {**self.argument_defaults, **args}
        return _ARG_RE.sub(lambda m: values[m.group(1)], self.text)

    def validate(self, *, path: Path | None, earlier: tuple[str, ...]) -> None:
        """Reject what Apptainer would reject late: no bootstrap agent, unknown or repeated
        sections, ``%files from`` a stage that is not an earlier one (named in ``earlier``)."""
        if "bootstrap" not in self.header:
            raise ConfigError("the header has no 'Bootstrap:' line", path=path, line=self.line,
                              key="Bootstrap")
        agent = self.bootstrap
        if agent not in BOOTSTRAP_AGENTS and not _ARG_RE.search(agent):
            raise ConfigError(f"unknown bootstrap agent '{agent}'"
                              f"{suggest(agent, BOOTSTRAP_AGENTS)}", path=path,
                              line=self.header_lines.get("bootstrap"), key="Bootstrap")
        seen: set[str] = set()
        for section in self.sections:
            if section.name not in SECTIONS:
                raise ConfigError(f"unknown section '%{section.name}'"
                                  f"{suggest(section.name, SECTIONS)}", path=path,
                                  line=section.line, key=f"%{section.name}")
            source = files_source_stage(section)
            if source is not None and source not in earlier:
                raise ConfigError(f"'%files from {source}': no earlier stage is named "
                                  f"'{source}'{suggest(source, earlier)}", path=path,
                                  line=section.line, key="%files")
            ident = section.name + (section.args.strip()
                                    if section.name.startswith("app") or source else "")
            if ident in seen:
                raise ConfigError(f"section '%{section.name}{section.args.rstrip()}' appears "
                                  "twice in one stage", path=path, line=section.line,
                                  key=f"%{section.name}")
            seen.add(ident)


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
        """The stage that becomes the image (its %test, %environment, %runscript count)."""
        return self.stages[-1]

    @property
    def header(self) -> dict[str, str]:
        """The final stage's header: the image's own base."""
        return self.final.header

    @property
    def sections(self) -> tuple[Section, ...]:
        """Every section of every stage, in file order."""
        return tuple(s for stage in self.stages for s in stage.sections)

    def section(self, name: str) -> Section | None:
        """The final stage's ``%name`` section: what the image gets."""
        return self.final.section(name)

    def has_section(self, name: str) -> bool:
        """Whether any stage has ``%name`` (a ``%post`` in any stage needs --fakeroot)."""
        return any(s.name == name for s in self.sections)

    @property
    def argument_defaults(self) -> dict[str, str]:
        """The final stage's ``%arguments`` defaults (each stage has its own:
        :meth:`Stage.argument_defaults`)."""
        return self.final.argument_defaults

    @property
    def arg_lines(self) -> dict[str, int]:
        """Every ``{{ NAME }}`` used (any stage) and the line of its first use, in file order."""
        found: dict[str, int] = {}
        for stage in self.stages:
            for name, line in stage.arg_lines.items():
                found.setdefault(name, line)
        return found

    @property
    def build_args(self) -> tuple[str, ...]:
        """Every ``{{ NAME }}`` used, in order of first use."""
        return tuple(self.arg_lines)

    def missing_args(self, given: dict[str, str]) -> list[str]:
        """Arguments some stage uses without a value: not ``given`` (``--build-arg``, shared by
        every stage) and not in that stage's own ``%arguments``."""
        return list(self.missing_arg_lines(given))

    def missing_arg_lines(self, given: dict[str, str]) -> dict[str, int]:
        """:meth:`missing_args` with the line of the first use that lacks a value."""
        found: dict[str, int] = {}
        for stage in self.stages:
            for name, line in stage.missing_args(given).items():
                found.setdefault(name, line)
        return found

    def render(self, args: dict[str, str]) -> str:
        """The text Apptainer builds from: ``{{ ARG }}`` replaced by given values or, per
        stage, that stage's defaults."""
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


#: Paths a %setup script may name without reading the build host: the image's root as Apptainer
#: passes it, and the null and standard streams.
_SETUP_SAFE = ("/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr")
_SETUP_PATH = re.compile(r"""(?:^|(?<=[\s'"=<>|;(:]))(~?/[^\s'";|&<>():]*)""")
_CONTEXT_SOURCE = re.compile(r"^\{\{\s*BUILD_CONTEXT\s*\}\}")
#: A build argument written in a line (``{{ BUILD_CONTEXT }}``): Apptainer substitutes it before
#: it splits a %files line into words, so it is read here as one word, not as ``{{``.
_ARG_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
#: Folders a path may start from without being a host path: the build context (``%files`` and
#: ``%setup``) and the image's root as Apptainer passes it to %setup. A path from them that climbs
#: out (``{{ BUILD_CONTEXT }}/../../etc/shadow``) is a host path all the same.
_ANCHORED = re.compile(r"(\{\{\s*BUILD_CONTEXT\s*\}\}|\$\{?(?:APPTAINER|SINGULARITY)_ROOTFS\}?)"
                       r"""([^\s'";|&<>()]*)""")


@dataclass(frozen=True)
class HostPathUse:
    """A ``%setup`` or ``%files`` line that reads host paths outside the build context."""

    section: str
    line: int
    paths: tuple[str, ...]


def _body_lines(section: Section) -> list[tuple[int, str]]:
    """``(line number, text)`` of each non-blank, non-comment line of a section's body."""
    found = []
    for offset, raw in enumerate(section.body.splitlines(), start=1):
        text = raw.strip()
        if text and not text.startswith("#"):
            found.append((section.line + offset, text))
    return found


def _first_word(text: str) -> str:
    """The first word of a ``%files`` line as Apptainer reads it (quotes group words; a
    ``{{ ARG }}`` is one word, as Apptainer substitutes it before splitting), with each build
    argument written back as ``{{ NAME }}``."""
    marked = _ARG_PLACEHOLDER.sub(lambda m: f"\0{m.group(1)}\0", text)
    try:
        words = shlex.split(marked, comments=True)
    except ValueError:  # an unbalanced quote: Apptainer would refuse the line anyway
        words = marked.split()
    word = words[0] if words else marked
    return re.sub(r"\0(\w+)\0", r"{{ \1 }}", word)


def climbs_out(rest: str) -> bool:
    """Whether ``rest``, the part of a path after an anchor folder (``{{ BUILD_CONTEXT }}``),
    names something outside that folder: a ``..`` that climbs above it, or a sibling name
    glued to it (``{{ BUILD_CONTEXT }}-other``)."""
    if not rest:
        return False
    if not rest.startswith("/"):  # a variable (``${dir}``) joins a path below; a name, beside
        return re.match(r"[\w.-]", rest) is not None
    depth = 0
    for part in rest.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _escapes(code: str) -> list[str]:
    """Paths in ``code`` that start at the build context or the image's root and climb out."""
    return [match.group(0) for match in _ANCHORED.finditer(code) if climbs_out(match.group(2))]


def host_path_uses(definition: Definition) -> list[HostPathUse]:
    """Every ``%setup`` / ``%files`` line (any stage) that reads a host path outside the build
    context: a ``%files`` source not under ``{{ BUILD_CONTEXT }}`` (``%files from <stage>``
    copies between stages, not from the host), or an absolute or ``~`` path in ``%setup`` that
    is not under ``$APPTAINER_ROOTFS`` (the image being built). A path that starts in either
    and climbs out with ``..`` (:func:`climbs_out`) is a host path too. Here-document bodies of
    %setup are read as lines too: a path there is as likely to be read."""
    uses: list[HostPathUse] = []
    for section in definition.sections:
        if section.name == "files" and files_source_stage(section) is None:
            for number, text in _body_lines(section):
                source = _first_word(text)
                context = _CONTEXT_SOURCE.match(source)
                if not context or climbs_out(source[context.end():]):
                    uses.append(HostPathUse("%files", number, (source,)))
        elif section.name == "setup":
            for number, text in _body_lines(section):
                code = text.split(" #", 1)[0]
                paths = tuple(p for p in _SETUP_PATH.findall(code)
                              if p not in _SETUP_SAFE and p not in ("/", "~/")) + tuple(
                    _escapes(code))
                if paths:
                    uses.append(HostPathUse("%setup", number, paths))
    return uses


_BOOTSTRAP_LINE = re.compile(r"^bootstrap\s*:", re.IGNORECASE)


def parse_definition(text: str, *, path: Path | None = None) -> Definition:
    """Split ``text`` into stages, each a preamble and sections, without changing a byte.

    A ``Bootstrap:`` line at the start of a line begins a new stage once the current one has
    its own bootstrap or a section (as Apptainer splits a multi-stage file)."""
    stages: list[Stage] = []
    preamble: list[str] = []
    header: dict[str, str] = {}
    header_lines: dict[str, int] = {}
    sections: list[Section] = []
    current: tuple[str, str, str, int] | None = None
    body: list[str] = []
    start = 1

    def close_section() -> None:
        if current is not None:
            sections.append(Section(current[0], current[1], current[2], "".join(body),
                                    current[3]))

    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        if _BOOTSTRAP_LINE.match(raw) and ("bootstrap" in header or current is not None):
            close_section()
            stages.append(Stage("".join(preamble), header, header_lines, tuple(sections),
                                start))
            preamble, header, header_lines, sections = [], {}, {}, []
            current, body, start = None, [], number
        match = _SECTION_RE.match(raw.rstrip("\r\n"))
        if match:
            close_section()
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
    close_section()
    stages.append(Stage("".join(preamble), header, header_lines, tuple(sections), start))
    return Definition(path=path, stages=tuple(stages))


def read_definition(path: Path) -> Definition:
    """Read a definition file exactly (newlines untranslated) and parse it."""
    if not os.path.lexists(path):
        raise ConfigError("definition file not found", path=path)
    # a regular UTF-8 file of bounded size only: a FIFO or /dev/zero would block or grow
    return parse_definition(read_input_text(path), path=path)
