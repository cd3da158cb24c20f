"""Checks that span files: a manifest's site must have a profile, a site's default target must
exist, every ``{{ ARG }}`` of a definition must get a value; and the names that become paths
(site and partition names: perflog folders, batch scripts) follow the one name rule. Each file
is valid on its own when it loads; these are the references between them."""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from containers.errors import ConfigError
from containers.inputs.definition import read_definition
from containers.inputs.recipes import Target
from containers.inputs.schema import check_file_name, check_name, suggest
from containers.inputs.sites import Site


def check_site_names(site: Site) -> None:
    """A site's name (its file's stem) and its partitions' names pass the one name rule."""
    check_file_name("site", site.path)
    for partition in site.partitions:
        check_name("partition", partition, path=site.path, line=site.lines.get("partitions"),
                   key="partitions")


def check_sites(sites: Mapping[str, Site], targets: Mapping[str, Target]) -> None:
    for site in sites.values():
        check_site_names(site)
        if site.default_target and site.default_target not in targets:
            raise ConfigError(f"default_target '{site.default_target}' is not a target"
                              f"{suggest(site.default_target, list(targets))}", path=site.path,
                              line=site.lines.get("default_target"), key="default_target")


def site_of(target: Target, sites: Mapping[str, Site]) -> Site:
    """The site a manifest names; a :class:`ConfigError` at its ``site:`` line when none has
    that name (the manifest is wrong, not a flag)."""
    if target.site not in sites:
        raise ConfigError(f"site '{target.site}' has no profile in sites/"
                          f"{suggest(target.site, list(sites))}", path=target.manifest,
                          line=target.line("site"), key="site")
    return sites[target.site]


def check_target(target: Target, sites: Mapping[str, Site], *,
                 tool_args: Collection[str]) -> None:
    """``tool_args`` are the build arguments the tool fills itself (context, provenance)."""
    site_of(target, sites)
    if target.definition is None:
        return
    definition = read_definition(target.definition)
    missing = [a for a in definition.missing_args(target.build_args) if a not in tool_args]
    if missing:
        raise ConfigError(f"build argument {{{{ {missing[0]} }}}} has no value (no default in "
                          "%arguments, none in the manifest's build_args)",
                          path=target.definition, line=definition.arg_lines.get(missing[0]),
                          key=missing[0])


def check_targets(targets: Iterable[Target], sites: Mapping[str, Site], *,
                  tool_args: Collection[str]) -> None:
    for target in targets:
        check_target(target, sites, tool_args=tool_args)
