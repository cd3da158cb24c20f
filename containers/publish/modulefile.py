"""Lmod module files and the exec wrapper for published images: pure rendering, no I/O.

The wrapper holds no version's facts, so a new version never changes an older one; every value
is quoted (Lua, shell, comment), even a name the name rule missed."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from containers.host.runtime import FLAVOURS

#: ``\ddd`` for every control character, the short escape where Lua has one.
_LUA_ESCAPES = str.maketrans({chr(code): f"\\{code:03d}" for code in (*range(0x20), 0x7F)}
                             | {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def lua_string(value: str) -> str:
    """``\\ddd`` escapes take three digits, so a following digit cannot join one; no long
    brackets (``[[...]]``), which a ``]]`` in the value would end."""
    return '"' + value.translate(_LUA_ESCAPES) + '"'


def comment_text(value: str) -> str:
    """Non-printable characters as escapes (``\\n``), so a comment cannot end early."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in value)


@dataclass(frozen=True)
class ModuleSpec:
    target: str
    version: str
    description: str
    image: str                   # absolute path of the published .sif
    bin_dir: str                 # folder holding <target>-exec
    runtime: str                 # apptainer | singularity (the site's flavour)
    gpu_flag: str | None
    binds: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    #: The site's job modules (Derecho's ``cuda``, ``apptainer``): the runtime is one of them.
    modules: tuple[str, ...] = ()
    sha256: str = ""
    signed_by: str | None = None  # key fingerprint
    published: str = ""


#: The command the module help and the catalogue page show running in an image.
EXAMPLE_COMMAND = "python -c 'import torch; print(torch.__version__)'"


def exec_name(target: str) -> str:
    return f"{target}-exec"


def by_hand(runtime: str, gpu_flag: str | None, command: str = "COMMAND") -> str:
    """What ``<target>-exec`` runs, written out for the module help and the catalogue page."""
    words = [runtime, "exec", *([gpu_flag] if gpu_flag else [])]
    return " ".join(shlex.quote(word) for word in words) + f' "$SIF" {command}'


def _help_text(spec: ModuleSpec) -> str:
    lines = [
        f"{spec.target} {spec.version}: {spec.description}",
        "",
        f"Image: {spec.image}",
        f"sha256: {spec.sha256}" + (f", signed by {spec.signed_by}" if spec.signed_by else ""),
        f"Published: {spec.published}",
        "",
        "Run a command in the image (site binds and environment applied):",
        f"  {exec_name(spec.target)} {EXAMPLE_COMMAND}",
        f"or by hand: {by_hand(spec.runtime, spec.gpu_flag)}",
    ]
    if spec.binds:
        lines.append("Binds: " + ",".join(spec.binds))
    return "\n".join(lines)


def _bind_lines(runtime: str, binds: tuple[str, ...]) -> list[str]:
    """Lua that sets every bind variable the runtime reads to the user's binds then ``binds``
    (Apptainer would drop a user's SINGULARITY_BIND); ``pushenv``: unload restores them."""
    if not binds:
        return []
    names = FLAVOURS[runtime].bind_variables
    return ["local binds = {" + ", ".join(map(lua_string, binds)) + "}",
            "for _, name in ipairs({" + ", ".join(map(lua_string, names)) + "}) do",
            '    local own = os.getenv(name) or ""',
            '    if own ~= "" then table.insert(binds, 1, own) break end',
            "end",
            *(f'pushenv({lua_string(name)}, table.concat(binds, ","))' for name in names)]


def render_modulefile(spec: ModuleSpec) -> str:
    q = lua_string
    lines = [
        f"-- {comment_text(spec.target + '/' + spec.version)}: published container image "
        "(invoke publish).",
        "-- Generated: edits are lost when this version is published again.",
        f"help({q(_help_text(spec))})",
        f"whatis({q('Name: ' + spec.target)})",
        f"whatis({q('Version: ' + spec.version)})",
        f"whatis({q('Description: ' + spec.description)})",
        f"whatis({q('Image: ' + spec.image)})",
        'family("container_image")',
        *(f"depends_on({q(name)})" for name in spec.modules),
        "",
        f"local sif = {q(spec.image)}",
        'setenv("SIF", sif)',
        'setenv("CONTAINER_IMAGE", sif)',
        # what <target>-exec runs this version with: this version's own, not the newest's
        f"setenv(\"CONTAINER_RUNTIME\", {q(spec.runtime)})",
        f"setenv(\"CONTAINER_GPU_FLAG\", {q(spec.gpu_flag or '')})",
        # what <target>-exec names when the runtime is not on PATH
        f"setenv(\"CONTAINER_MODULES\", {q(' '.join(spec.modules))})",
    ]
    lines += _bind_lines(spec.runtime, spec.binds)
    # pushenv, not setenv: unload gives back what the user had set, not nothing
    lines += [f"pushenv({q(prefix + key)}, {q(value)})" for key, value in spec.env.items()
              for prefix in ("SINGULARITYENV_", "APPTAINERENV_")]
    lines.append(f"prepend_path(\"PATH\", {q(spec.bin_dir)})")
    return "\n".join(lines) + "\n"


def render_exec_wrapper(target: str) -> str:
    """A runtime not on PATH is named in one line with the modules that bring it."""
    name = exec_name(target)
    return f"""#!/usr/bin/env bash
# {comment_text(name)} COMMAND [ARGS...]: run COMMAND in the image of the loaded module
# (module load {comment_text(target)}[/VERSION]). Binds and environment come from the module's
# SINGULARITY_BIND / APPTAINER_BIND and SINGULARITYENV_* / APPTAINERENV_* variables; the
# runtime and GPU flag from its CONTAINER_RUNTIME and CONTAINER_GPU_FLAG (each version's own).
# Generated by invoke publish: edits are lost on the next publish.
set -euo pipefail
if [[ -z ${{SIF:-}} ]]; then
    echo {shlex.quote(f"{name}: no image; load a module first: module load {target}")} >&2
    exit 1
fi
if [[ -z ${{CONTAINER_RUNTIME:-}} ]]; then
    echo {shlex.quote(f"{name}: the loaded module names no runtime (CONTAINER_RUNTIME); it was "
                      f"published by an older version of the tool: publish it again")} >&2
    exit 1
fi
if [[ $# -eq 0 ]]; then
    echo {shlex.quote(f"usage: {name} COMMAND [ARGS...]")} >&2
    exit 2
fi
if ! command -v "$CONTAINER_RUNTIME" >/dev/null 2>&1; then
    missing={shlex.quote(f"{name}: ")}"$CONTAINER_RUNTIME"' not found on PATH: load '
    if [[ -n ${{CONTAINER_MODULES:-}} ]]; then
        echo "$missing"'the site'"'"'s modules first: module load '"$CONTAINER_MODULES" >&2
    else
        echo "$missing"'the module that provides it first (module load '"$CONTAINER_RUNTIME"')' >&2
    fi
    exit 127
fi
gpu=()
if [[ -n ${{CONTAINER_GPU_FLAG:-}} ]]; then
    gpu=("$CONTAINER_GPU_FLAG")
fi
exec "$CONTAINER_RUNTIME" exec "${{gpu[@]}}" "$SIF" "$@"
"""
