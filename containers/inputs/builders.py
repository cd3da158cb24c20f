"""The builder registry: how an image is built from a target's inputs (an Apptainer definition,
or cotainr from a base image and a Conda env spec). Code elsewhere never compares its name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from containers.errors import ConfigError, UsageError
from containers.inputs.definition import read_definition

if TYPE_CHECKING:  # envspec and recipes import this module
    from containers.inputs.envspec import EnvSpec
    from containers.inputs.recipes import Target
    from containers.inputs.sites import Site


@dataclass(frozen=True)
class Builder:
    """One way of building an image; the defaults are those of a builder that needs nothing."""

    name: str

    def check_manifest(self, values: Mapping[str, Any], *, path: Path, line: int | None,
                       lines: Mapping[str, int]) -> None:
        """Refuse a manifest whose keys this builder cannot build from."""

    def check_env(self, spec: EnvSpec) -> None:
        """Refuse an env spec this builder cannot install."""

    def check_build_args(self, target: Target, cli_args: Mapping[str, str]) -> None:
        """Refuse a ``--build-arg`` this builder has no use for, before anything is read."""

    def base_inputs(self, target: Target, user_args: Mapping[str, str]) -> dict[str, Any]:
        """What the inputs hash covers of the image it builds on, beyond the definition."""
        return {}

    def check_base_image(self, target: Target, inputs: Mapping[str, Any]) -> None:
        """Refuse a base image that is not on this machine, before the build runs."""

    def fakeroot_refusal(self, target: Target, site: Site) -> ConfigError | None:
        """Why ``site`` cannot build ``target`` for want of ``--fakeroot``, else None."""
        return None


@dataclass(frozen=True)
class ApptainerBuilder(Builder):
    """``apptainer build`` of the definition; ``pip:`` into a venv on the base's Python."""

    def check_manifest(self, values: Mapping[str, Any], *, path: Path, line: int | None,
                       lines: Mapping[str, int]) -> None:
        if not values["definition"]:
            raise ConfigError(f"builder '{self.name}' needs a definition file", path=path,
                              line=line, key="definition")
        if values["base_image"]:
            raise ConfigError(f"base_image is for {COTAINR.name} targets; a definition names "
                              "its base in its header", path=path, line=lines.get("base_image"),
                              key="base_image")

    def check_env(self, spec: EnvSpec) -> None:
        spec.check_venv_compatible()

    def fakeroot_refusal(self, target: Target, site: Site) -> ConfigError | None:
        """A build running a script in the image needs ``--fakeroot``, which the site lacks."""
        if site.fakeroot or target.definition is None \
                or not read_definition(target.definition).runs_in_image:
            return None
        return ConfigError(
            f"{target.definition.name} has a %post or %app* section (Apptainer runs them in the "
            f"image as it builds), which needs --fakeroot, and site "
            f"'{site.name}' has none; build it with a cotainr target (builder: cotainr) or on a "
            f"machine with fakeroot (invoke build --target {target.name} there), then copy "
            f"images/{target.name}.sif to the site", path=site.path,
            line=site.lines.get("fakeroot"), key="fakeroot")


@dataclass(frozen=True)
class CotainrBuilder(Builder):
    """cotainr: a base image plus the whole env spec installed with Conda; no ``--fakeroot``."""

    def check_manifest(self, values: Mapping[str, Any], *, path: Path, line: int | None,
                       lines: Mapping[str, int]) -> None:
        for key in ("env", "base_image"):
            if not values[key]:
                raise ConfigError(f"builder '{self.name}' needs {key}", path=path, line=line,
                                  key=key)
        for key in ("definition", "base"):
            if values[key]:
                raise ConfigError(f"builder '{self.name}' takes no {key} (it builds from "
                                  f"base_image and the env spec)", path=path,
                                  line=lines.get(key), key=key)

    def check_build_args(self, target: Target, cli_args: Mapping[str, str]) -> None:
        unknown = sorted(set(cli_args) - {"BASE_IMAGE"})
        if unknown:
            raise ConfigError(f"build argument '{unknown[0]}' does not apply to a {self.name} "
                              f"target (only BASE_IMAGE does)", path=target.manifest,
                              key=unknown[0])

    def base_inputs(self, target: Target, user_args: Mapping[str, str]) -> dict[str, Any]:
        return {"base_image": user_args.get("BASE_IMAGE", target.base_image)}

    def check_base_image(self, target: Target, inputs: Mapping[str, Any]) -> None:
        """A base image that is a path here must exist before cotainr runs."""
        base = inputs.get("base_image")
        if not base or "://" in base or Path(base).is_file():
            return
        message = (f"base image {base} is not a file on this machine: build {target.name} on "
                   f"site {target.site}, where it is, or pass --build-arg BASE_IMAGE=PATH")
        if base != target.base_image:  # from --build-arg, not the manifest
            raise UsageError(message, flag="--build-arg BASE_IMAGE")
        raise ConfigError(message, path=target.manifest, line=target.line("base_image"),
                          key="base_image")


APPTAINER = ApptainerBuilder("apptainer")
COTAINR = CotainrBuilder("cotainr")
#: Every builder by the name a manifest's ``builder:`` gives; the first is the default.
BUILDERS: dict[str, Builder] = {builder.name: builder for builder in (APPTAINER, COTAINR)}


def builder_of(target: Any) -> Builder:
    return BUILDERS[target.builder]
