"""Image targets: ``recipes/<target>.yaml`` manifests, validated into :class:`Target` objects.
The files they name must be the project's own, so no host file is ever read or staged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Callable, Literal, Mapping

from pydantic import ConfigDict, Field

from containers.errors import ConfigError
from containers.files import resolves_outside
from containers.inputs.builders import BUILDERS
from containers.inputs.envspec import is_https
from containers.inputs.names import Gpu
from containers.inputs.schema import (Bool, Declared, GpuKind, Str, StrList, StrMap,
                                      check_file_name, line_of, pick, refuse, suggest,
                                      validate_model)
from containers.inputs.yamlsource import load_yaml_file, read_input_text


def _unknown_example(names: list[str]) -> str | None:
    from containers.inputs.names import EXAMPLES  # the examples jobs/train.py knows
    wrong = next((name for name in names if name not in EXAMPLES), None)
    return None if wrong is None else f"'{wrong}' is not an example (one of {', '.join(EXAMPLES)})"


TorchVersion = Annotated[Str, refuse(lambda torch: None if re.match(r"^\d+\.\d+", torch) else (
    f"{torch!r} is not a torch version (e.g. 2.8.0)"))]


#: What an image is, in one line: ``module whatis`` and the catalogue page show it as such.
OneLine = Annotated[Str, refuse(lambda text: None if text.strip() and len(text.splitlines()) == 1
                                else "must be one line of text (not empty, no line breaks)")]


class Manifest(Declared):
    """A target manifest as written in ``recipes/<target>.yaml``."""

    model_config = ConfigDict(title="hpc-containers recipe manifest (recipes/<target>.yaml)")

    description: OneLine = Field(description="one line: what the image is (torch for which "
                                 "GPUs, from what), shown by module whatis and on the catalogue "
                                 "page")
    license: OneLine | None = Field(None, description="the image's license as people should "
                                    "read it (an SPDX expression, e.g. GPL-2.0-or-later AND "
                                    "BSD-3-Clause), shown on the catalogue page")
    site: Str = "local"
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    gpu: GpuKind = Gpu.NONE
    builder: Literal[tuple(BUILDERS)] = next(iter(BUILDERS))  # type: ignore[valid-type]
    definition: Str | None = None
    base: Str | None = None
    base_image: Str | None = None
    env: Str | None = None
    build_args: StrMap = {}
    test: Bool = True
    pip_extra_index_urls: StrList = Field([], description="package indexes the env spec may "
                                          "add with --extra-index-url (https only)")
    host_paths: Literal["warn", "forbid"] = Field(
        "warn", description="%setup / %files lines reading host paths outside the build "
                            "context: a warning in invoke check (warn), or an error (forbid)")
    torch: TorchVersion | None = Field(
        None, description="the torch the base image provides (NGC images), when the env spec "
                          "does not pin torch: what invoke check compares with each example's "
                          "minimum")
    examples: Annotated[StrList, refuse(_unknown_example)] = Field(
        [], description="the training examples this image is meant for (left out: every one "
                        "its environment can run; [] says none); any other is refused at run "
                        "time")
    torchrun: Str | None = Field(None, description="the torchrun command in the image, where "
                                 "it is not the site's (an image with a venv has its own)")


class Target(Manifest):
    """One buildable image, as its manifest (the file, named by its stem) declares it."""

    name: str
    manifest: Path
    definition: Path | None
    env: Path | None
    build_args: dict[str, str] = {}
    pip_extra_index_urls: tuple[str, ...] = ()
    examples: tuple[str, ...] | None = None
    #: Why ``torch`` no longer says the image's (set by :func:`compat.as_built`, not a manifest).
    torch_unknown: str | None = None
    lines: dict[str, int] = {}

    def line(self, key: str) -> int | None:
        return self.lines.get(key)


def _outside(what: str, path: Path, resolved: Path, root: Path) -> str:
    via = "" if path == resolved else f" (it leads to {resolved})"
    return f"{what} is outside the project {root}{via}: inputs must be the project's own files"


def project_file(value: str, *, root: Path, manifest: Path, line: int | None, key: str) -> Path:
    """The file a manifest's ``key`` names: the project's own regular UTF-8 file."""
    if "\0" in value:
        raise ConfigError(f"{value!r} holds a NUL byte, which no path can", path=manifest,
                          line=line, key=key)
    candidate = root / value
    try:
        outside = resolves_outside(candidate, root)
        found = candidate.exists()
    except OSError as exc:
        raise ConfigError(f"cannot use {value!r}: {exc.strerror}", path=manifest, line=line,
                          key=key) from exc
    if outside is not None:
        raise ConfigError(_outside(repr(value), candidate, outside, root), path=manifest,
                          line=line, key=key)
    if not found:
        raise ConfigError(f"file {value!r} not found (paths are relative to the project root "
                          f"{root})", path=manifest, line=line, key=key)
    resolved = candidate.resolve()
    read_input_text(resolved)
    return resolved


def named_scripts(text: str, folder: Path,
                  check: Callable[[Path, str], None] = lambda script, by: None) -> dict[str, Path]:
    """The files of ``folder`` ``text`` names, and those they name (what a build stages)."""
    found = sorted(folder.iterdir()) if folder.is_dir() else []
    seen: set[str] = set()
    named: dict[str, Path] = {}
    texts = [("the definition", text)]
    while texts:
        by, body = texts.pop()
        for script in found:
            if script.name in seen or script.name not in body:
                continue
            seen.add(script.name)
            check(script, by)
            if script.is_file():
                named[script.name] = script
                texts.append((script.name, read_input_text(script)))
    return dict(sorted(named.items()))


def check_scripts(definition: Path, *, root: Path, manifest: Path, line: int | None) -> None:
    """The helper scripts a definition runs must be the project's own files too."""
    def inside(script: Path, by: str) -> None:
        outside = resolves_outside(script, root)
        if outside is not None:
            runner = (definition.name if by == "the definition"
                      else f"{by}, run by {definition.name}")
            raise ConfigError(_outside(f"{script} (run by {runner})", script, outside, root),
                              path=manifest, line=line, key="definition")

    named_scripts(read_input_text(definition), definition.parent / "scripts", inside)


def load_target(path: Path, *, root: Path) -> Target:
    """One manifest; its name is its file's stem, which must pass the name rule."""
    check_file_name("target", path)
    data = load_yaml_file(path)
    values = dict(validate_model(Manifest, data, path=path, what="target manifest"))
    lines = {key: line_of(data, key) for key in data}
    BUILDERS[values["builder"]].check_manifest(values, path=path, line=line_of(data),
                                               lines=lines)
    paths = {key: project_file(values[key], root=root, manifest=path, line=lines.get(key),
                               key=key) if values[key] else None for key in ("definition", "env")}
    if paths["definition"] is not None:
        check_scripts(paths["definition"], root=root, manifest=path,
                      line=lines.get("definition"))
    for index, url in enumerate(values["pip_extra_index_urls"]):
        if not is_https(url):
            raise ConfigError(f"{url!r} is not an https URL without credentials (an extra index "
                              "over http could have its packages swapped in transit)", path=path,
                              line=line_of(data["pip_extra_index_urls"], index),
                              key="pip_extra_index_urls")
    return Target.model_construct(name=path.stem, manifest=path, lines=lines, **{
        **values, **paths, "build_args": {str(k): str(v) for k, v in values["build_args"].items()},
        "pip_extra_index_urls": tuple(values["pip_extra_index_urls"]),
        "examples": tuple(values["examples"]) if "examples" in data else None})


def base_names(targets: Mapping[str, Target], name: str) -> list[str]:
    """``name`` and its bases, base-most first, to a base that did not load or a loop."""
    chain: list[str] = []
    current: str | None = name
    while current is not None and current not in chain:
        chain.insert(0, current)
        item = targets.get(current)
        current = item.base if item is not None else None
    return chain


def base_problems(targets: dict[str, Target]) -> list[ConfigError]:
    """Every manifest whose ``base`` names no target, or whose base chain loops."""
    problems: list[ConfigError] = []
    for target in targets.values():
        where = {"path": target.manifest, "line": target.line("base"), "key": "base"}
        if target.base is not None and target.base not in targets:
            problems.append(ConfigError(f"base target '{target.base}' does not exist"
                                        f"{suggest(target.base, list(targets))}", **where))
            continue
        chain = base_names(targets, target.name)
        first = targets.get(chain[0])
        if first is not None and first.base is not None:  # the walk came back to a listed one
            problems.append(ConfigError("base chain loops: " + " -> ".join(
                [*reversed(chain), first.base]), **where))
    return problems


def get_target(targets: dict[str, Target], name: str) -> Target:
    return pick(targets, name, what="target", flag="--target")


def base_chain(targets: dict[str, Target], name: str) -> list[Target]:
    """The target and its bases, base-most first: the order they must be built in."""
    return [targets[n] for n in base_names(targets, get_target(targets, name).name)]
