"""The project folder, its settings, and the targets, sites and runtime a command works with."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from containers.errors import RuntimeNotFound
from containers.host.runtime import Runtime, assumed_runtime, find_runtime
from containers.inputs import validate
from containers.inputs.recipes import Target, get_target, load_targets
from containers.inputs.settings import Settings, load_settings
from containers.inputs.sites import Site, detect_site, get_site, load_sites


@dataclass
class Project:
    """The project folder and its settings; targets and sites load (and validate) on first use."""

    root: Path
    settings: Settings

    @classmethod
    def load(cls, root: Path, config: Mapping[str, Any] | None = None) -> "Project":
        return cls(root=root, settings=load_settings(root, config))

    @cached_property
    def targets(self) -> dict[str, Target]:
        return load_targets(self.root)

    @cached_property
    def sites(self) -> dict[str, Site]:
        return load_sites(self.root)

    def target(self, name: str) -> Target:
        return get_target(self.targets, name)

    def site_of(self, target: Target) -> Site:
        return validate.site_of(target, self.sites)

    def default_target(self) -> str:
        """The detected site's default target, else the configured default (``cpu``)."""
        site = detect_site(self.sites)
        if site is not None and site.default_target:
            return site.default_target
        return self.settings.default_target

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
        """The runtime a command for ``site`` uses: this machine's, or for a dry run planned for
        another site, that site's flavour (``singularity`` on LUMI) as it would be called there."""
        if dry_run and site.name != self.current_site().name:
            return assumed_runtime(site.runtime)
        return self.runtime(required=not dry_run, flavour=site.runtime)
