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
from dataclasses import dataclass, replace
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import suggest
from containers.inputs.yamlsource import read_input_text

#: Apptainer's sections (``validSections`` of pkg/build/types/parser/deffile.go; ``%pre`` is
#: still read and run by Apptainer 1.4) and its SCIF app sections (``appSections``: each takes an
#: app name, ``%apprun NAME``).
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
_ARG_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


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
        """The app a SCIF section belongs to (``%apprun NAME``); None for other sections and
        for an app section without a name (which Apptainer refuses)."""
        if self.name not in APP_SECTIONS or not self.args.startswith(" "):
            return None
        return self.args[1:].split(" ", 1)[0]


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

    def section(self, name: str, app: str | None = None) -> Section | None:
        """``%name`` as Apptainer reads it (``parseTokenSection``): every ``%name`` of this stage
        (of app ``app`` for a SCIF section) appended in file order, with the last arguments
        given; line and header of the first. None when the stage has none. ``%files`` groups by
        arguments instead: :meth:`files_groups`."""
        found = [s for s in self.sections
                 if s.name == name and (app is None or s.app == app)]
        if len(found) < 2:
            return found[0] if found else None
        args = next((s.args for s in reversed(found) if s.args.strip()), found[0].args)
        return replace(found[0], args=args, body="".join(s.body for s in found))

    def files_groups(self) -> list[tuple[str, list[Section]]]:
        """The ``%files`` sections grouped as Apptainer merges them: those with the same
        arguments (``%files``, ``%files from build``) form one list of copies, in order of
        first appearance."""
        groups: dict[str, list[Section]] = {}
        for section in self.sections:
            if section.name == "files":
                groups.setdefault(section.args.strip(), []).append(section)
        return list(groups.items())

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

    def render(self, args: dict[str, str]) -> str:
        values = {**self.argument_defaults, **args}
        return _ARG_RE.sub(lambda m: values[m.group(1)], self.text)

    def validate(self, *, path: Path | None, earlier: tuple[str, ...]) -> None:
        """Refuse what Apptainer refuses: an unknown header keyword or section (at parse time),
        an app section without an app name, no bootstrap agent, ``%files from`` a stage that is
        not an earlier one (named in ``earlier``). A repeated section is valid: Apptainer
        appends it to the first (:meth:`section`)."""
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
        for section in self.sections:  # each header as Apptainer's parser judges it
            where = {"path": path, "line": section.line, "key": f"%{section.name}"}
            if section.header_line[:1].isspace():
                raise ConfigError(f"the line {section.header_line.strip()!r} starts with '%' "
                                  "after spaces: Apptainer reads it as a section header with "
                                  "no name (invalid section)", path=path, line=section.line,
                                  key=section.header_line.split()[0])
            if section.name not in SECTIONS:
                raise ConfigError(f"unknown section '%{section.name}'"
                                  f"{suggest(section.name, SECTIONS)}", **where)
            if section.name in APP_SECTIONS and section.app is None:
                raise ConfigError(f"'%{section.name}' names no app (%{section.name} NAME)",
                                  **where)
            source = files_source_stage(section)
            if source is not None and source not in earlier:
                raise ConfigError(f"'%files from {source}': no earlier stage is named "
                                  f"'{source}'{suggest(source, earlier)}", path=path,
                                  line=section.line, key="%files")


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
        return self.missing_arg_lines(None)

    @property
    def build_args(self) -> tuple[str, ...]:
        """Every ``{{ NAME }}`` used, in order of first use."""
        return tuple(self.arg_lines)

    def missing_arg_lines(self, given: dict[str, str] | None) -> dict[str, int]:
        """Arguments some stage uses without a value, not ``given`` (``--build-arg``, shared by
        every stage) and not in that stage's own ``%arguments``, with the line of the first use
        that lacks one; every argument used when ``given`` is None."""
        found: dict[str, int] = {}
        for stage in self.stages:
            valued = {} if given is None else {**stage.argument_defaults, **given}
            for name, line in stage.arg_lines.items():
                if name not in valued:
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


def _commands(section: Section) -> list[tuple[int, str]]:
    """:func:`_body_lines` with a line ending in ``\\`` joined to the next, as the shell reads
    one command; each with the number of its first line."""
    joined: list[tuple[int, str]] = []
    going_on = False
    for number, text in _body_lines(section):
        if going_on:
            joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + text)
        else:
            joined.append((number, text))
        going_on = text.endswith("\\")
    return joined


def shell_words(text: str) -> list[str]:
    """``text`` split into shell words as the shell reads them (quotes group and are removed,
    ``#`` starts a comment, ``; & | < > ( )`` are words of their own), a ``{{ ARG }}`` kept as
    one word (Apptainer substitutes it first) and written back as ``{{ NAME }}``. A line the
    shell would not finish (an open quote) is split at spaces."""
    marked = _ARG_PLACEHOLDER.sub(lambda m: f"\0{m.group(1)}\0", text)
    lexer = shlex.shlex(marked, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: read it as plain words
        words = marked.split()
    return [re.sub(r"\0(\w+)\0", r"{{ \1 }}", word) for word in words]


#: Commands whose arguments are text they print, not files they read (``printf '%s/x'``).
_TEXT_COMMANDS = frozenset({"echo", "printf"})
#: Where the programs every build host has live: running ``/usr/bin/env`` reads no host data.
_SYSTEM_PROGRAMS = ("/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/")
_OPERATOR = re.compile(r"^[;&|()]+$")
_REDIRECT = re.compile(r"^[<>&]+$")
_ASSIGNMENT = re.compile(r"^-{0,2}[A-Za-z_][\w.-]*=(.*)$")


def _host_path(word: str) -> str | None:
    """``word`` (or the value of ``--opt=value`` / ``NAME=value``) when it names a path of the
    build host: absolute or under ``~``, not a standard stream."""
    assigned = _ASSIGNMENT.match(word)
    value = assigned.group(1) if assigned else word
    if value.startswith(("/", "~/")) and value not in (*_SETUP_SAFE, "/", "~/"):
        return value
    return None


def setup_paths(code: str) -> tuple[str, ...]:
    """The host paths one ``%setup`` command line reads or writes, judged on its shell words:
    an absolute or ``~`` word, a redirection's target, a path from the build context or the
    image's root that climbs out (:func:`climbs_out`). Text is not a path: a quoted URL is one
    word that does not start with ``/``, and what ``echo``/``printf`` print is data."""
    found: list[str] = []
    command, text, redirect = True, False, False
    for word in shell_words(code):
        if _OPERATOR.match(word):
            command, text, redirect = True, False, False
            continue
        if _REDIRECT.match(word):
            redirect = True
            continue
        path = _host_path(word)
        if command and not _ASSIGNMENT.match(word):
            command, text = False, word.rsplit("/", 1)[-1] in _TEXT_COMMANDS
            path = None if path and path.startswith(_SYSTEM_PROGRAMS) else path
        elif text and not redirect:
            path = None
        redirect = False
        found += [path] if path else [  # from the build context or the image's root, out
            match.group(0) for match in _ANCHORED.finditer(word) if climbs_out(match.group(2))]
    return tuple(found)


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
                source = (shell_words(text) or [text])[0]  # as Apptainer splits the line
                context = _CONTEXT_SOURCE.match(source)
                if not context or climbs_out(source[context.end():]):
                    uses.append(HostPathUse("%files", number, (source,)))
        elif section.name == "setup":
            for number, code in _commands(section):
                paths = setup_paths(code)
                if paths:
                    uses.append(HostPathUse("%setup", number, paths))
    return uses


#: Where Apptainer starts a new stage (``All`` in deffile.go): ``bootstrap:`` at a line's start.
_BOOTSTRAP_LINE = re.compile(r"^bootstrap:", re.IGNORECASE)


def section_header(raw: str) -> tuple[str, str] | None:
    """``(name, args)`` when ``raw`` starts a section as Apptainer's scanner sees it (its first
    word starts with ``%``), else None. The name is Apptainer's (``getSectionName``): the text
    after the leading ``%`` up to the first space, lower-cased, so ``%post`` with a tab after it or an indented
    ``%post`` get a name Apptainer refuses; ``args`` is the rest of the line."""
    line = raw.rstrip("\r\n")
    words = line.split()
    if not words or not words[0].startswith("%"):
        return None
    bare = line.lstrip("%")
    name = bare.split(" ", 1)[0]
    return name.lower(), bare[len(name):]


def _header(lines: list[str], start: int, path: Path | None
            ) -> tuple[dict[str, str], dict[str, int]]:
    """A stage's header values and their lines, read as Apptainer's ``doHeader`` reads them:
    blank and comment lines skipped, ``#`` ends a value, a value ending in ``\\`` goes on in the
    next line."""
    values: dict[str, str] = {}
    numbers: dict[str, int] = {}
    pending: str | None = None
    for number, raw in enumerate(lines, start=start):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            pending = None
            continue
        text = stripped.split("#", 1)[0]
        if pending is not None:
            key, value = pending, values[pending] + text.strip()
        else:
            if ":" not in text:
                raise ConfigError(f"header line is not 'Key: value': {stripped!r}",
                                  path=path, line=number)
            key, value = (part.strip() for part in text.split(":", 1))
            key = key.lower()
            numbers[key] = number
        pending = key if value.endswith("\\") else None
        if pending is not None:
            value = value[:-1]
            value = value[:-2] + "\n" if value.endswith("\\n") else value
        values[key] = value
    return values, numbers


def parse_definition(text: str, *, path: Path | None = None) -> Definition:
    """Split ``text`` into stages, each a preamble and sections, without changing a byte.

    As Apptainer does: ``bootstrap:`` at the start of a line begins a new stage (once the
    current one has a header line or a section; comments above the first are its preamble), and
    a line whose first word starts with ``%`` begins a section."""
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

    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        if _BOOTSTRAP_LINE.match(raw) and (current is not None or any(
                line.strip()[:1] not in ("", "#") for line in preamble)):
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
    """Read a definition file exactly (newlines untranslated) and parse it."""
    if not os.path.lexists(path):
        raise ConfigError("definition file not found", path=path)
    # a regular UTF-8 file of bounded size only: a FIFO or /dev/zero would block or grow
    return parse_definition(read_input_text(path), path=path)
