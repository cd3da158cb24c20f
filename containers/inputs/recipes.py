"""Image targets: ``recipes/<target>.yaml`` manifests, validated into :class:`Target` objects.

A manifest says WHAT to build (builder, definition, env spec, base target, build arguments) and
for which site, architecture and GPU kind; paths in it are relative to the project root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from containers.errors import ConfigError
from containers.inputs.schema import Field, check_mapping, line_of, pick, suggest
from containers.inputs.yamlsource import load_yaml_file

ARCHES = ("x86_64", "aarch64")
GPU_KINDS = ("none", "cuda", "rocm")
BUILDERS = ("apptainer", "cotainr")
FIELDS = (
    Field("description", required=True),
    Field("site", default="local"),
    Field("arch", default="x86_64", choices=ARCHES),
    Field("gpu", default="none", choices=GPU_KINDS),
    Field("builder", default="apptainer", choices=BUILDERS),
    Field("definition"),
    Field("base"),
    Field("base_image"),
    Field("env"),
    Field("build_args", "str_map", default={}),
    Field("test", "bool", default=True),
)


@dataclass(frozen=True)
class Target:
    """One buildable image, as its manifest declares it."""

    name: str
    manifest: Path
    description: str
    site: str
    arch: str
    gpu: str
    builder: str
    definition: Path | None
    base: str | None
    env: Path | None
    build_args: dict[str, str] = field(default_factory=dict)
    base_image: str | None = None
    test: bool = True
    lines: dict[str, int] = field(default_factory=dict, compare=False)

    def line(self, key: str) -> int | None:
        return self.lines.get(key)


def load_target(path: Path, *, root: Path) -> Target:
    data = load_yaml_file(path)
    values = check_mapping(data, FIELDS, what="target manifest", path=path)
    lines = {key: line_of(data, key) for key in data}
    if values["builder"] == "apptainer" and not values["definition"]:
        raise ConfigError("builder 'apptainer' needs a definition file", path=path,
                          line=line_of(data), key="definition")
    if values["builder"] == "cotainr":
        for key in ("env", "base_image"):
            if not values[key]:
                raise ConfigError(f"builder 'cotainr' needs {key}", path=path,
                                  line=line_of(data), key=key)
        for key in ("definition", "base"):
            if values[key]:
                raise ConfigError(f"builder 'cotainr' takes no {key} (it builds from base_image "
                                  f"and the env spec)", path=path, line=lines.get(key), key=key)
    elif values["base_image"]:
        raise ConfigError("base_image is for cotainr targets; a definition names its base in "
                          "its header", path=path, line=lines.get("base_image"), key="base_image")
    paths: dict[str, Path | None] = {}
    for key in ("definition", "env"):
        paths[key] = None
        if values[key]:
            candidate = (root / values[key]).resolve()
            if not candidate.is_file():
                raise ConfigError(f"file '{values[key]}' not found (paths are relative to the "
                                  f"project root {root})", path=path, line=lines.get(key), key=key)
            paths[key] = candidate
    build_args = {str(k): str(v) for k, v in values["build_args"].items()}
    return Target(name=path.stem, manifest=path, description=values["description"],
                  site=values["site"], arch=values["arch"], gpu=values["gpu"],
                  builder=values["builder"], definition=paths["definition"], base=values["base"],
                  env=paths["env"], build_args=build_args, base_image=values["base_image"],
                  test=values["test"], lines=lines)


def load_targets(root: Path) -> dict[str, Target]:
    """Every manifest under ``recipes/``, with base references checked and cycles refused."""
    targets = {p.stem: load_target(p, root=root) for p in sorted((root / "recipes").glob("*.yaml"))}
    for target in targets.values():
        if target.base is not None and target.base not in targets:
            raise ConfigError(f"base target '{target.base}' does not exist"
                              f"{suggest(target.base, list(targets))}", path=target.manifest,
                              line=target.line("base"), key="base")
    for target in targets.values():
        chain = [target.name]
        current = target
        while current.base is not None:
            if current.base in chain:
                raise ConfigError(f"base chain loops: {' -> '.join(chain + [current.base])}",
                                  path=target.manifest, line=target.line("base"), key="base")
            chain.append(current.base)
            current = targets[current.base]
    return targets


def get_target(targets: dict[str, Target], name: str) -> Target:
    return pick(targets, name, what="target", flag="--target")


def base_chain(targets: dict[str, Target], name: str) -> list[Target]:
    """The target and its bases, base-most first: the order they must be built in."""
    chain: list[Target] = []
    current: Target | None = get_target(targets, name)
    while current is not None:
        chain.insert(0, current)
        current = targets[current.base] if current.base else None
    return chain
