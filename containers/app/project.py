"""The project folder, its settings, and the targets, sites and runtime a command works with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from containers.errors import (ConfigError, ContainersError, Problems, RuntimeNotFound,
                               raise_all)
from containers.host.runtime import Runtime, assumed_runtime, find_runtime
from containers.inputs import validate
from containers.inputs.recipes import Target, get_target
from containers.inputs.settings import Settings, environment_settings, load_settings
from containers.inputs.sites import Site, detect_site, get_site, load_sites
from containers.inputs.yamlsource import LocatedDict, load_yaml_file

if TYPE_CHECKING:
    from containers.batch.job import JobNeeds
    from containers.prove.kind import WorkloadKind


@dataclass(frozen=True)
class ConfigSource:
    """One layer of the invoke configuration: its values and file (None: environment)."""

    data: Mapping[str, Any]
    path: Path | None = None


def settings_of(config: Any, environ: Mapping[str, str] | None = None
                ) -> tuple[dict[str, Any], list[ConfigSource]]:
    """The ``containers`` settings of an invoke ``Config`` and their layers, every variable read
    by its setting's own type (invoke casts ``false`` to true); ``-f`` still wins, as in invoke."""
    merged = dict(config.get("containers", None) or {})
    runtime = (getattr(config, "_runtime", None) or {}).get("containers") or {}
    env = {key: value for key, value in environment_settings(
        os.environ if environ is None else environ, merged).items() if key not in runtime}
    return {**merged, **env}, config_sources(config, env={"containers": env} if env else {})


def config_sources(config: Any, env: Mapping[str, Any] | None = None) -> list[ConfigSource]:
    """The layers of an invoke ``Config`` that set values, the winner first, from the data and
    path invoke keeps of each (it records no key's layer itself)."""
    found = []
    for layer in ("runtime", "env", "project", "user", "system"):
        data = env if layer == "env" and env is not None else getattr(config, f"_{layer}", None)
        if not isinstance(data, Mapping) or not data:
            continue
        path = getattr(config, f"_{layer}_path", None) if layer != "env" else None
        found.append(ConfigSource(data=data, path=Path(path) if path else None))
    return found


def _source_error(exc: ConfigError, sources: Sequence[ConfigSource]) -> ConfigError:
    """``exc`` naming the layer that sets its key (and the line, in a YAML file)."""
    if not exc.key:
        return exc
    keys = exc.key.split(".")
    for source in sources:
        value: Any = source.data
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        if source.path is None:  # invoke reads INVOKE_CONTAINERS_RUNTIME as containers.runtime
            variable = "INVOKE_" + "_".join(keys).upper()
            return ConfigError(exc.detail, path=f"environment variable {variable}", key=exc.key)
        return ConfigError(exc.detail, path=source.path, line=_line_of(source.path, keys),
                           key=exc.key)
    return exc


def _line_of(path: Path, keys: Sequence[str]) -> int | None:
    try:
        data = load_yaml_file(path)
    except ContainersError:
        return None
    for key in keys[:-1]:
        data = data.get(key) if isinstance(data, LocatedDict) else None
    return data.line_of(keys[-1]) if isinstance(data, LocatedDict) else None


@dataclass
class Project:
    """The project folder and its settings; targets and sites load (and validate) on first use."""

    root: Path
    settings: Settings
    #: The layers the settings were merged from (empty: given directly, as tests do).
    sources: Sequence[ConfigSource] = ()

    def setting_error(self, exc: ConfigError) -> ConfigError:
        """``exc``, about a setting found wrong after loading, naming the layer that set it."""
        return _source_error(exc, self.sources)

    @classmethod
    def load(cls, root: Path, config: Mapping[str, Any] | None = None,
             sources: Sequence[ConfigSource] = ()) -> "Project":
        """``sources``: the layers ``config`` merged, so a bad one is named in its file."""
        try:
            return cls(root=root, settings=load_settings(root, config), sources=sources)
        except ConfigError as exc:
            if not sources:
                raise
            if isinstance(exc, Problems):  # named where set: by layer (the winning first), line
                layers = [str(s.path) if s.path else "environment variable" for s in sources]
                raise Problems(sorted((_source_error(p, sources) if isinstance(p, ConfigError)
                                       else p for p in exc.problems), key=lambda p: (
                    next((i for i, layer in enumerate(layers)
                          if str(getattr(p, "path", "")).startswith(layer)), len(layers)),
                    getattr(p, "line", 0) or 0))) from exc
            raise _source_error(exc, sources) from exc

    @cached_property
    def _targets_apart(self) -> tuple[dict[str, Target], dict[str, list[ContainersError]]]:
        return validate.targets_apart(self.root)

    @property
    def targets(self) -> dict[str, Target]:
        """The usable targets; a bad manifest's problems are in :attr:`target_problems`."""
        return self._targets_apart[0]

    @property
    def target_problems(self) -> dict[str, list[ContainersError]]:
        return self._targets_apart[1]

    @cached_property
    def sites(self) -> dict[str, Site]:
        return load_sites(self.root)

    def target(self, name: str) -> Target:
        """The target ``name``; its own problems (every one) when its manifest is not usable."""
        if name in self.target_problems:
            raise_all(self.target_problems[name])
        return get_target(self.targets, name)

    def site_of(self, target: Target) -> Site:
        return validate.site_of(target, self.sites)

    def default_target(self) -> str:
        """The detected site's default target, else the configured default (``cpu``)."""
        site = detect_site(self.sites)
        return site.default_target if site and site.default_target else self.settings.default_target

    def runtime(self, *, required: bool = True, flavour: str = "apptainer") -> Runtime:
        try:
            return find_runtime(self.settings.runtime)
        except RuntimeNotFound:
            if required:
                raise
            return assumed_runtime(flavour)

    def current_site(self) -> Site:
        return detect_site(self.sites) or get_site(self.sites, "local")

    def runtime_for(self, site: Site, *, dry_run: bool) -> Runtime:
        """The runtime a command for ``site`` uses (a dry run: as it would be called there)."""
        if dry_run and site.name != self.current_site().name:
            return assumed_runtime(site.runtime)
        return self.runtime(required=not dry_run, flavour=site.runtime)

    def job_needs(self, target: str | None, site: str | None, *, kind: WorkloadKind,
                  host_arch: str, venv: Path | None) -> JobNeeds:
        from containers.batch import judgeenv
        from containers.batch.job import JobNeeds

        item = self.target(target or self.default_target())
        where = get_site(self.sites, site) if site else self.site_of(item)
        home = self.targets.get(where.default_target or "")
        off_host, builds = (kind.judged_off_host(item.arch, host_arch),
                            kind.needs_node_tool(item.arch, host_arch))
        judge = judgeenv.of_image(item, self.settings) if off_host else None
        tool = judgeenv.build_plans(self.settings.root, arch=item.arch) if builds else ()
        return JobNeeds(target=item, site=where, settings=self.settings, host_arch=host_arch,
                        site_arch=home.arch if home else None, venv=venv, judge=judge,
                        tool=tool, ready=judge is not None or not off_host)
