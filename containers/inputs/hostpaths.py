"""What a definition reads on the build host, outside the build context the tool stages. Such a
line (``%setup``, ``%pre``, ``%files``, ``%appfiles``, localimage) ties the image to the host."""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass

from containers.inputs.definition import (GO_SPACE, Definition, Section, Stage, apptainer_lines,
                                          files_source_stage, line_text)

#: The blanks a POSIX shell splits a command at (``%setup`` and ``%pre`` run in one): form feed,
#: ``\v`` or ``\x1c`` are part of a word there, so ``\f# ...`` is a command, not a comment.
SHELL_BLANKS = " \t"
#: Paths a %setup script may name without reading the build host.
_SETUP_SAFE = ("/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr")
_CONTEXT_SOURCE = re.compile(r"^\{\{\s*BUILD_CONTEXT\s*\}\}")
#: A build argument: Apptainer substitutes it before it splits a line, so it is one word.
_ARG_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
#: Folders a path may start from without being a host path (the build context, the image's root
#: as Apptainer passes it to %setup), unless it climbs out (``{{ BUILD_CONTEXT }}/../etc``).
_ANCHORED = re.compile(r"(\{\{\s*BUILD_CONTEXT\s*\}\}|\$\{?(?:APPTAINER|SINGULARITY)_ROOTFS\}?)"
                       r"""([^\s'";|&<>()]*)""")


@dataclass(frozen=True)
class HostPathUse:
    """A ``%setup`` or ``%files`` line that reads host paths outside the build context."""

    section: str
    line: int
    paths: tuple[str, ...]


def _body_lines(section: Section, blanks: str = GO_SPACE) -> list[tuple[int, str]]:
    """``blanks``: Go's where Apptainer reads the line (``%files``), else the shell's; a line's
    end is kept (``\\`` then a space is no continuation to the shell)."""
    lines = ((section.line + offset, line_text(raw).lstrip(blanks))
             for offset, raw in enumerate(apptainer_lines(section.body), start=1))
    return [(number, text) for number, text in lines
            if text.strip(blanks) and not text.startswith("#")]


def _commands(section: Section) -> list[tuple[int, str]]:
    """A shell section's commands (continuation lines joined), each with its first line."""
    joined: list[tuple[int, str]] = []
    going_on = False
    for number, text in _body_lines(section, SHELL_BLANKS):
        if going_on:
            joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + text)
        else:
            joined.append((number, text))
        going_on = (len(text) - len(text.rstrip("\\"))) % 2 == 1
    return joined


def _without_comment(text: str) -> str:
    """``text`` up to a ``#`` that starts a word outside quotes (shlex would also cut ``a#b``,
    hiding ``; cat /etc/hostname`` after it)."""
    quote, escaped = "", False
    for at, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or text[at - 1] in SHELL_BLANKS + ";&|<>()"):
            return text[:at]
    return text


def shell_words(text: str) -> list[str]:
    """``text`` as the shell's words, a ``{{ ARG }}`` one (an open quote: split at spaces)."""
    marked = _ARG_PLACEHOLDER.sub(lambda m: f"\0{m.group(1)}\0", _without_comment(text))
    lexer = shlex.shlex(marked, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split, lexer.commenters = True, ""
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
    """``word`` (or its ``=value``) when it names a path of the build host."""
    assigned = _ASSIGNMENT.match(word)
    value = assigned.group(1) if assigned else word
    if value.startswith(("/", "~/")) and value not in (*_SETUP_SAFE, "/", "~/"):
        return value
    return None


#: Builtins after which a relative path may name a host file (``cd / && cat etc/hostname``).
_CD_COMMANDS = frozenset({"cd", "pushd"})


def _cd_outside(command: str, words: list[str]) -> str | None:
    """``cd DIR`` when ``DIR`` (``/``, relative, ``~``, ``-``, none) leaves image and context."""
    words = list(itertools.takewhile(lambda w: not (_OPERATOR.match(w) or _REDIRECT.match(w)),
                                     words))
    target = next((word for word in words if word == "-" or not word.startswith("-")), "~")
    return None if _ANCHORED.fullmatch(target) else f"{command} {target}"


def setup_paths(code: str) -> tuple[str, ...]:
    """The host paths one ``%setup`` command line reads or writes; what ``echo`` prints is data."""
    found: list[str] = []
    command, text, redirect = True, False, False
    words = shell_words(code)
    for at, word in enumerate(words):
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
            if word in _CD_COMMANDS:  # its folder is judged here, not as a path it reads
                path, text = _cd_outside(word, words[at + 1:]), True
        elif text and not redirect:
            path = None
        redirect = False
        found += [path] if path else [  # from the build context or the image's root, out
            match.group(0) for match in _ANCHORED.finditer(word) if climbs_out(match.group(2))]
    return tuple(found)


def climbs_out(rest: str) -> bool:
    """Whether ``rest`` after an anchor climbs above it or names a sibling (``-other``)."""
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


def _outside_context(source: str) -> bool:
    """Whether ``source`` is not under ``{{ BUILD_CONTEXT }}``, or climbs out of it."""
    context = _CONTEXT_SOURCE.match(source)
    return not context or climbs_out(source[context.end():])


def appfiles_source(text: str) -> str:
    """As Apptainer's ``copyFiles`` takes it: no quotes, a ``{{ ARG }}`` one word."""
    marked = _ARG_PLACEHOLDER.sub(lambda m: f"\0{m.group(1)}\0", text.split("#", 1)[0])
    word = marked.strip(GO_SPACE).split(" ", 1)[0]
    return re.sub(r"\0(\w+)\0", r"{{ \1 }}", word)


#: The ``localimage`` bases the tool itself passes (its base target's image, its foreign root).
_TOOL_BASE = re.compile(r"\{\{\s*(BASE_IMAGE|FOREIGN_ROOT)\s*\}\}")


def _base_use(stage: Stage) -> HostPathUse | None:
    """A ``localimage`` stage whose ``From:`` is a host file (not the tool's, not staged)."""
    source = stage.header.get("from", "").strip(GO_SPACE)
    if stage.bootstrap.lower() != "localimage" or _TOOL_BASE.fullmatch(source) \
            or not _outside_context(source):
        return None
    return HostPathUse("From", stage.header_lines.get("from", stage.line), (source,))


def host_path_uses(definition: Definition) -> list[HostPathUse]:
    """Every line (any stage) that reads a host path outside the build context."""
    uses = [use for stage in definition.stages if (use := _base_use(stage)) is not None]
    for section in definition.sections:
        if section.name == "files" and files_source_stage(section) is None:
            for number, text in _body_lines(section):
                source = (shell_words(text) or [text])[0]  # as Apptainer splits the line
                if _outside_context(source):
                    uses.append(HostPathUse("%files", number, (source,)))
        elif section.name == "appfiles":
            for number, text in _body_lines(section):
                source = appfiles_source(text)
                if source and _outside_context(source):
                    uses.append(HostPathUse("%appfiles", number, (source,)))
        elif section.name in ("setup", "pre"):
            for number, code in _commands(section):
                paths = setup_paths(code)
                if paths:
                    uses.append(HostPathUse(f"%{section.name}", number, paths))
    return sorted(uses, key=lambda use: use.line)
