"""What an image is: its inputs, read and validated, and their hash.

The inputs hash covers what decides the image's content (not host plumbing such as the mirror),
the base target's hash included; an image whose recorded hash matches is not rebuilt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

from containers import __version__
from containers.errors import ConfigError, ContainersError, UsageError, raise_all
from containers.inputs.builders import builder_of
from containers.inputs.definition import Definition, read_definition
from containers.inputs.envspec import EnvSpec, load_target_env
from containers.inputs.recipes import Target, base_chain, named_scripts
from containers.inputs.validate import example_findings, host_path_policy
from containers.inputs.yamlsource import read_input_text

#: Arguments the tool fills from the build host; they locate inputs but do not change the image.
CONTEXT_ARGS = ("MIRROR", "BASE_IMAGE", "BUILD_CONTEXT", "HOST_PATHS", "FOREIGN_ROOT")

#: Arguments that only record provenance (as labels) and therefore stay out of the hash.
PROVENANCE_ARGS = ("INPUTS_HASH", "TOOL_VERSION", "GIT_REVISION", "BUILD_DATE", "TARGET")

def parse_build_args(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["K=V", …]`` from the command line into a dict; a pair without ``=`` is a user error."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"'{pair}' is not KEY=VALUE", flag="--build-arg")
        result[key.strip()] = value
    return result

#: Arguments only the tool may fill: provenance (labels, record) and the paths it stages. A
#: value given for one would make the image's labels and record lie, or escape the inputs hash.
RESERVED_ARGS = (*PROVENANCE_ARGS, "BUILD_CONTEXT", "HOST_PATHS", "FOREIGN_ROOT")

def reserved_arg_problems(target: Target, cli_args: Mapping[str, str]
                          ) -> list[ContainersError]:
    """A problem for each given build argument the tool fills itself (``BASE_IMAGE`` on a base
    target); ``MIRROR`` stays open: it says where packages come from, not what the image is."""
    reserved = (*RESERVED_ARGS, "BASE_IMAGE") if target.base else RESERVED_ARGS
    why = ("the tool fills it (provenance or a staged path); it cannot be set")
    found: list[ContainersError] = [
        ConfigError(f"build argument {key} is the tool's own: {why}", path=target.manifest,
                    line=target.line("build_args"), key=f"build_args.{key}")
        for key in target.build_args if key in reserved]
    found += [UsageError(f"{key} is the tool's own build argument: {why}"
                         + (f" (the image of base target {target.base})"
                            if key == "BASE_IMAGE" else ""), flag="--build-arg")
              for key in cli_args if key in reserved]
    return found

def target_inputs(target: Target, definition: Definition | None, env: EnvSpec | None,
                  user_args: Mapping[str, str], base_hash: str | None) -> dict:
    """What the inputs hash covers, also recorded in the provenance."""
    return {
        "tool_version": __version__,
        "target": target.name,
        "builder": target.builder,
        "arch": target.arch,
        "definition": definition.text if definition else None,
        "env": env.text if env else None,
        # the user's BASE_IMAGE (no base target): what an image is built on is part of what it is
        "build_args": {k: v for k, v in sorted(user_args.items())
                       if (k not in CONTEXT_ARGS or k == "BASE_IMAGE")
                       and k not in PROVENANCE_ARGS},
        "base": base_hash,
    }

def definition_scripts(definition: Definition) -> dict[str, Path]:
    """The helper scripts the definition names (and those they name): staged and hashed."""
    if definition.path is None:
        return {}
    return named_scripts(definition.text, definition.path.parent / "scripts")

def describe_inputs(target: Target, *, cli_args: Mapping[str, str], base_hash: str | None
                    ) -> tuple[Definition | None, EnvSpec | None, dict[str, str], dict, str]:
    """Read and validate a target's inputs: (definition, env spec, user args, inputs, hash)."""
    raise_all(reserved_arg_problems(target, cli_args))
    env = load_target_env(target)
    raise_all(example_findings(target, env)[0])  # the examples, judged as invoke check does
    user_args = {**target.build_args, **cli_args}
    builder = builder_of(target)
    builder.check_build_args(target, cli_args)
    # A cotainr target has no definition, an Apptainer one always has (the manifest's rule).
    definition = None if target.definition is None else read_definition(target.definition)
    if definition is not None:
        definition.validate()
    raise_all(host_path_policy(target, definition, env)[0])  # host_paths: forbid, as check says
    inputs = {**target_inputs(target, definition, env, user_args, base_hash),
              **builder.base_inputs(target, user_args)}
    if definition is not None and (scripts := definition_scripts(definition)):
        inputs["scripts"] = {name: read_input_text(path) for name, path in scripts.items()}
    canonical = json.dumps(inputs, sort_keys=True)  # the same hash on every run and machine
    return definition, env, user_args, inputs, hashlib.sha256(canonical.encode()).hexdigest()

def chain_hashes(targets: Mapping[str, Target], name: str,
                 known: dict[str, str] | None = None) -> dict[str, str]:
    """Inputs hash of ``name`` and its bases, pure; ``known`` caches them across calls."""
    hashes: dict[str, str] = {}
    known = {} if known is None else known
    base_hash = None
    for target in base_chain(dict(targets), name):
        if target.name not in known:
            known[target.name] = describe_inputs(target, cli_args={}, base_hash=base_hash)[4]
        base_hash = hashes[target.name] = known[target.name]
    return hashes
