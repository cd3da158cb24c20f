"""Checks that span files: a manifest's site, a site's default target, each ``{{ ARG }}``'s value.
:func:`check_project` is ``invoke check``: every problem found in one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence, TypeVar

from containers.errors import ConfigError, ContainersError, flatten
from containers.inputs import compat
from containers.inputs.definition import Definition, read_definition
from containers.inputs.hostpaths import host_path_uses
from containers.inputs.envspec import EnvSpec, load_env_spec, load_target_env
from containers.inputs.names import EXAMPLES
from containers.inputs.recipes import (Target, base_names, base_problems, get_target,
                                       load_target)
from containers.inputs.schema import (candidate_files, check_file_name, check_input_file,
                                      check_name, suggest)
from containers.inputs.sites import Site, load_site

T = TypeVar("T")


def site_of(target: Target, sites: Mapping[str, Site]) -> Site:
    """The site a manifest names; a :class:`ConfigError` at its ``site:`` line if none."""
    if target.site not in sites:
        raise ConfigError(f"site '{target.site}' has no profile in sites/"
                          f"{suggest(target.site, list(sites))}", path=target.manifest,
                          line=target.line("site"), key="site")
    return sites[target.site]


def check_target(target: Target, sites: Mapping[str, Site | None], *,
                 tool_args: Collection[str], definition: Definition | None = None) -> None:
    """``sites``: None for a profile that failed to load (it exists, with its own error)."""
    site_of(target, sites)
    if target.definition is None:
        return
    if definition is None:
        definition = read_definition(target.definition)
    missing = {a: line for a, line in definition.missing_arg_lines(target.build_args).items()
               if a not in tool_args}
    if missing:
        name, line = next(iter(missing.items()))
        raise ConfigError(f"build argument {{{{ {name} }}}} has no value (no default in "
                          "%arguments of its stage, none in the manifest's build_args)",
                          path=target.definition, line=line, key=name)


def host_path_policy(target: Target, definition: Definition | None = None,
                     env: EnvSpec | None = None) -> tuple[list[ConfigError], list[ConfigError]]:
    """The manifest's ``host_paths`` rule as ``(errors, warnings)``: the one place."""
    forbid = target.host_paths == "forbid"
    switch = ("the manifest forbids them (host_paths: forbid)" if forbid
              else "the image depends on the build machine; host_paths: forbid in the manifest "
                   "makes this an error")
    uses = [] if target.definition is None else [
        ConfigError(f"reads host paths outside the build context: {', '.join(use.paths)}; "
                    f"{switch}", path=target.definition, line=use.line, key=use.section)
        for use in host_path_uses(definition or read_definition(target.definition))]
    spec = env if env is not None or target.env is None else load_env_spec(target.env)
    if spec is not None:
        uses += [ConfigError(f"reads host paths outside the build context: Conda channel "
                             f"{channel}; {switch}", path=spec.path, line=line, key="channels")
                 for channel, line in spec.local_channels()]
    errors, warnings = (uses, []) if forbid else ([], uses)
    ignored = spec.prefix_warning() if spec is not None else None
    return errors, warnings + ([ignored] if ignored else [])


def check_inputs_of(target: Target, definition: Definition | None = None) -> EnvSpec | None:
    """``definition``: the target's, read here when not given. Returns the env spec checked."""
    if target.definition is not None:
        (definition or read_definition(target.definition)).validate()
    return load_target_env(target)


@dataclass
class CheckReport:
    """What ``invoke check`` found: inputs loaded, errors, warnings, what passed."""

    targets: dict[str, Target] = field(default_factory=dict)
    sites: dict[str, Site] = field(default_factory=dict)
    errors: list[ContainersError] = field(default_factory=list)
    warnings: list[ConfigError] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)  # what the defaults chose (examples)
    ok_targets: list[str] = field(default_factory=list)
    ok_sites: list[str] = field(default_factory=list)
    failed_sites: list[str] = field(default_factory=list)

    def warn(self, warnings: Sequence[ConfigError]) -> None:
        """Record ``warnings``, each once (targets sharing a definition share its warnings)."""
        seen = {str(w) for w in self.warnings}
        self.warnings += [w for w in warnings if str(w) not in seen]

    def add(self, problems: Sequence[ContainersError]) -> bool:
        """Record ``problems`` (each once: two checks may find the same); True if none."""
        seen = {str(e) for e in self.errors}
        for problem in flatten(problems):
            if str(problem) not in seen:
                seen.add(str(problem))
                self.errors.append(problem)
        return not problems


def _value(produce: Callable[[], T]) -> tuple[T | None, list[ContainersError]]:
    """What ``produce`` returns, or None and every problem it raises."""
    try:
        return produce(), []
    except ContainersError as exc:
        return None, flatten([exc])


def _attempt(check: Callable[[], object]) -> list[ContainersError]:
    """The problems ``check`` raises (all of them, for :class:`~containers.errors.Problems`)."""
    return _value(check)[1]


def load_each(folder: Path, *, kind: str, root: Path, load: Callable[[Path], T]
              ) -> tuple[dict[str, T], dict[str, list[ContainersError]]]:
    """Every ``kind`` file of ``folder`` loaded on its own: the loaded, the problems by name."""
    loaded: dict[str, T] = {}
    failed: dict[str, list[ContainersError]] = {}
    for path in candidate_files(folder):
        try:
            loaded[path.stem] = load(check_input_file(path, kind=kind, root=root))
        except ContainersError as exc:
            failed[path.stem] = flatten([exc])
    return loaded, failed


def targets_apart(root: Path) -> tuple[dict[str, Target], dict[str, list[ContainersError]]]:
    """Every manifest loaded on its own: the usable targets, the others' problems."""
    targets, failed = load_each(root / "recipes", kind="target", root=root,
                                load=lambda p: load_target(p, root=root))
    sound = {n: t for n, t in targets.items()  # no link of its chain failed to load
             if not failed.keys() & set(base_names(targets, n))}
    for problem in base_problems(sound):
        failed[problem.path.stem] = [problem]
        del targets[problem.path.stem]
    for name in list(targets):  # a target on a base that failed fails too, down its chain
        for link in base_names(targets, name)[1:]:
            item = targets.get(link)
            if item is not None and item.base in failed:
                failed[link] = [ConfigError(f"base target '{item.base}' is not usable: "
                                            f"{failed[item.base][0]}", path=item.manifest,
                                            line=item.line("base"), key="base")]
                del targets[link]
    return targets, failed


def check_project(root: Path, *, target: str | None = None, tool_args: Collection[str] = (),
                  target_checks: Sequence[Callable[[Mapping[str, Target], str], object]] = (),
                  site_checks: Sequence[Callable[[Site], object]] = ()) -> CheckReport:
    """Check every input (or ``target``, its bases and every site); every problem."""
    report = CheckReport()
    report.targets, failed_targets = load_each(root / "recipes", kind="target", root=root,
                                               load=lambda p: load_target(p, root=root))
    report.sites, failed_sites = load_each(root / "sites", kind="site", root=root,
                                           load=load_site)
    report.failed_sites = sorted(failed_sites)
    names = all_names = sorted({*report.targets, *failed_targets})
    if target is not None:
        get_target(dict.fromkeys(names), target)  # an unknown name is a --target error
        names = base_names(report.targets, target)
    for name in names:
        report.add(failed_targets.get(name, []))
    # a base whose manifest failed exists: its own error says what is wrong
    report.add(base_problems({n: t for n, t in report.targets.items()
                              if n in names and t.base not in failed_targets}))
    for name in names:
        if name in report.targets:
            _check_target(report, report.targets[name], tool_args=tool_args,
                          target_checks=target_checks)
    for name in sorted({*report.sites, *failed_sites}):
        if name in failed_sites:
            report.add(failed_sites[name])
            continue
        site = report.sites[name]
        # a target whose manifest failed still exists: its own error says what is wrong
        found = _attempt(lambda: check_site(site, dict.fromkeys(all_names)))
        for site_check in site_checks:
            found += _attempt(lambda: site_check(site))
        if report.add(found):
            report.ok_sites.append(name)
    return report


def _check_target(report: CheckReport, target: Target, *, tool_args: Collection[str],
                  target_checks: Sequence[Callable[[Mapping[str, Target], str], object]]) -> None:
    found: list[ContainersError] = []
    # a site whose profile failed still exists: its own error says what is wrong
    known_sites = {**dict.fromkeys(report.failed_sites), **report.sites}
    # the definition and env spec are read once, here, for every check of this target
    definition, unreadable = (_value(lambda: read_definition(target.definition))
                              if target.definition is not None else (None, []))
    env: EnvSpec | None = None
    if unreadable:  # its own error; nothing more of its definition or env spec is checked
        found += _attempt(lambda: site_of(target, known_sites)) + unreadable
    else:
        found += _attempt(lambda: check_target(target, known_sites, tool_args=tool_args,
                                               definition=definition))
        env, problems = _value(lambda: check_inputs_of(target, definition))
        found += problems
    # the planning checks need the whole chain; else a base's own error says why
    chain = base_names(report.targets, target.name)
    chain_loaded = all(n in report.targets for n in chain) and \
        report.targets[chain[0]].base is None
    if chain_loaded:
        for check in target_checks:
            found += _attempt(lambda: check(report.targets, target.name))
    if not found:
        errors, warnings = host_path_policy(target, definition, env)
        found += errors
        report.warn(warnings)
    if not found:
        def examples_fit() -> None:  # the judgement invoke build's plan makes too
            errors, warnings, infos = example_findings(target, env)
            report.warn(warnings)
            report.infos += infos
            found.extend(errors)
        found += _attempt(examples_fit)
    if report.add(found) and chain_loaded:
        report.ok_targets.append(target.name)


def example_findings(target: Target, env: EnvSpec | None = None
                     ) -> tuple[list[ConfigError], list[ConfigError], list[str]]:
    """The findings on ``target``'s examples, as check and build report them."""
    if target.env is None and target.torch is None:
        return [], [], []
    plan = compat.example_plan(target, env, known=EXAMPLES)
    return (plan.errors, [ConfigError(note, path=target.manifest, key="torch")
                          for note in plan.notes], [plan.info] if plan.info else [])


def check_site(site: Site, targets: Collection[str]) -> None:
    """One site's own names and its default target (``targets``: the target names)."""
    check_file_name("site", site.path)
    for partition in site.partitions:
        check_name("partition", partition, path=site.path, line=site.lines.get("partitions"),
                   key="partitions")
    if site.default_target and site.default_target not in targets:
        raise ConfigError(f"default_target '{site.default_target}' is not a target"
                          f"{suggest(site.default_target, list(targets))}", path=site.path,
                          line=site.lines.get("default_target"), key="default_target")
