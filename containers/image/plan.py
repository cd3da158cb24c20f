"""Build planning: pure functions from targets and host facts to an ordered :class:`BuildPlan`.

The plan is data (argv lists, staged files, inputs hashes): ``invoke build --dry-run`` prints it
and a build executes exactly it; an image whose recorded inputs hash matches is not rebuilt."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from containers import __version__
from containers.errors import ConfigError
from containers.host.runtime import BIND_SPECIALS, FILES_SPECIALS, Runtime, unsafe_characters
from containers.host.sources import PipConfig
from containers.image import cache as package_cache
from containers.image.arch import DEBIAN_ARCH
from containers.image.cache import PackageCache, RootKey
from containers.image.emulated import emulated_binds
from containers.image.identity import CONTEXT_ARGS, definition_scripts, describe_inputs
from containers.image.provenance import LABEL_PREFIX
from containers.inputs.builders import APPTAINER, COTAINR, Builder, builder_of
from containers.inputs.compat import as_built, has_torch
from containers.inputs.definition import Definition, parse_definition
from containers.inputs.envspec import EnvSpec
from containers.inputs.recipes import Target, base_chain
from containers.inputs.settings import SQUASHFS_DEFAULT_LEVEL, Settings
from containers.inputs.sites import Site

#: Where the staged build context appears inside the image during %post (not under /tmp).
CONTEXT_MOUNT = "/opt/build-context"
#: How HOST_PATHS joins the bound host folders: as PATH does, since no bind path holds a colon.
HOST_PATHS_SEPARATOR = ":"
#: The definition Apptainer builds from, in the build's work folder: the target's own file with
#: the tool's labels added (:func:`labelled`); the file itself is never written.
STAGED_DEFINITION = "definition.def"


@dataclass(frozen=True)
class HostFacts:
    """The build host as planning needs it, gathered once by the caller: ``host_paths`` are the
    local package folders the build binds (pip find-links, ``file://`` indexes) that exist."""

    runtime: Runtime
    pip: PipConfig = field(default_factory=PipConfig)
    mirror: str | None = None
    host_paths: tuple[str, ...] = ()
    ca_certificates: tuple[Path, ...] = ()
    git_revision: str = "unknown"
    build_date: str = ""
    arch: str = "x86_64"
    cotainr: str = "cotainr"
    built_hashes: Mapping[str, str] = field(default_factory=dict)
    #: The package cache (None: ``--no-cache``), and the real debootstrap its shim runs (or None).
    package_cache: PackageCache | None = None
    debootstrap: str | None = None
    #: The caller's environment: a step's runtime variable (a bind) adds to the user's, not over.
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StepInputs:
    """What a builder's plan step builds from (``definition`` None: a builder without one)."""

    target: Target
    definition: Definition | None
    env: EnvSpec | None
    user_args: Mapping[str, str]
    cli_args: Mapping[str, str]
    base: BuildStep | None


@dataclass(frozen=True)
class BuildStep:
    """Building one target: staged context, the build command, its test, and where it lands."""

    target: Target
    inputs_hash: str
    inputs: dict
    image: Path
    partial: Path
    workdir: Path
    build_argv: list[str]
    test_argv: list[str] | None
    inspect_argv: list[str]
    env: dict[str, str]
    staged: dict[str, str]
    copied: dict[str, Path]
    action: str  # "build", "up-to-date" or "not-needed" (a base of an up-to-date image)
    links: dict[str, str] = field(default_factory=dict)
    forced: bool = False  # --force: rebuild even if a concurrent build just produced it
    #: The package cache this build uses, and how ("": it fetches nothing the cache keeps).
    package_cache: PackageCache | None = None
    cache_use: str = ""
    #: Names the kept root file system this build may rebuild from and keep (None: none).
    kept_root: RootKey | None = None
    #: The build's ``--bind`` sources and destinations, and its definition as Apptainer
    #: renders it (a rebuild from a kept root runs its ``%post`` with them).
    binds: tuple[str, ...] = ()
    rendered: str | None = None
    #: The tool's own labels of this build (:func:`own_labels`), and the definition staged
    #: with them (:data:`STAGED_DEFINITION`; None: a builder without a definition).
    labels: dict[str, str] = field(default_factory=dict)
    definition: str | None = None

    @property
    def short_hash(self) -> str:
        return self.inputs_hash[:12]


@dataclass(frozen=True)
class BuildPlan:
    steps: tuple[BuildStep, ...]

    @property
    def pending(self) -> tuple[BuildStep, ...]:
        return tuple(s for s in self.steps if s.action == "build")


def plan_step(target: Target, *, settings: Settings, host: HostFacts, cli_args: Mapping[str, str],
              base_step: BuildStep | None, force: bool) -> BuildStep:
    """Plan one target on its planned ``base_step``, as ``cli_args`` build it."""
    target = as_built(target, cli_args, context=CONTEXT_ARGS)
    definition, env, user_args, inputs, inputs_hash = describe_inputs(
        target, cli_args=cli_args, base_hash=base_step.inputs_hash if base_step else None)
    short = inputs_hash[:12]
    workdir = settings.tmp_dir / f"{target.name}-{short}"
    image = settings.image_path(target.name)
    partial = settings.images_dir / f".{target.name}.sif.{short}.partial"
    up_to_date = (not force and image.is_file()
                  and host.built_hashes.get(target.name) == inputs_hash)
    env_vars = {"APPTAINER_TMPDIR": str(workdir / "tmp"),
                **squashfs_env(settings, host.runtime)}
    if settings.cache_dir:
        env_vars["APPTAINER_CACHEDIR"] = str(settings.cache_dir)
    common = dict(target=target, inputs_hash=inputs_hash, inputs=inputs, image=image,
                  partial=partial, workdir=workdir, labels=own_labels(target, inputs_hash, host),
                  inspect_argv=host.runtime.inspect_argv(partial),
                  action="up-to-date" if up_to_date else "build", forced=force)
    return PLAN_STEPS[builder_of(target)](
        StepInputs(target, definition, env, user_args, cli_args, base_step),
        host=host, env_vars=env_vars, common=common)


def own_labels(target: Target, inputs_hash: str, host: HostFacts) -> dict[str, str]:
    """The identity of an image from its own build (target, inputs hash, tool, revision, build
    date), whatever its base's labels say: an image built on another inherits them all."""
    labels = {"target": target.name, "inputs-hash": inputs_hash, "tool-version": __version__,
              "git-revision": host.git_revision, "build-date": host.build_date}
    return {LABEL_PREFIX + key: value for key, value in labels.items() if value}


def labelled(definition: Definition, labels: Mapping[str, str]) -> str:
    """Apptainer adds a repeated section to the final stage's, and the build's ``--force`` puts
    these over the labels a base image carries."""
    text = definition.text
    return (text + ("\n" if text and not text.endswith("\n") else "") + "%labels\n"
            + "".join(f"    {key} {value}\n" for key, value in labels.items()))


#: zstd's level for builds (benchmarks/squashfs.py, 2 cores, olivia-cuda-pip's 7 GB root): 1 in
#: 6.1 s (3299 MB), 3 in 13.8 s (3247 MB), gzip -1 in 39.4 s (3344 MB); both read back as fast.
ZSTD_LEVEL = 1


def squashfs_env(settings: Settings, runtime: Runtime) -> dict[str, str]:
    """``APPTAINER_MKSQUASHFS_ARGS`` for any compression but Apptainer's gzip -9 (a variable, so
    cotainr's own ``build`` call takes it too). SingularityCE is not known to take it: ``auto``
    leaves it its gzip, an explicit choice is refused there rather than ignored."""
    choice, level = settings.squashfs, settings.squashfs_level
    if choice == "auto":  # a gzip level set on its own keeps meaning gzip at that level
        fast = runtime.own.mksquashfs_args and level == SQUASHFS_DEFAULT_LEVEL
        choice = "zstd" if fast else "gzip"
    if choice == "gzip" and level == SQUASHFS_DEFAULT_LEVEL:
        return {}
    if not runtime.own.mksquashfs_args:
        key = "squashfs" if choice != "gzip" else "squashfs_level"
        raise ConfigError(f"{choice} at a level other than Apptainer's own gzip -9 is passed to "
                          f"mksquashfs through Apptainer, and the runtime is {runtime.label}",
                          path="invoke.yaml", key=f"containers.{key}")
    level = ZSTD_LEVEL if choice == "zstd" else level  # the setting's level is gzip's
    return {"APPTAINER_MKSQUASHFS_ARGS": f"-comp {choice} -Xcompression-level {level}"}


def check_carried_paths(context: Path, binds: list[str]) -> None:
    """Refuse, naming it, a path the build cannot carry intact: the context is a ``%files`` source
    (Apptainer expands shell characters there), each host folder a ``--bind`` source."""
    bad = unsafe_characters(str(context), FILES_SPECIALS)
    if bad:
        raise ConfigError(f"the build context {str(context)!r} holds {bad!r}, which Apptainer's "
                          f"%files would expand; choose a tmp_dir without them",
                          path="invoke.yaml", key="containers.tmp_dir")
    for path in binds:
        bad = unsafe_characters(path, BIND_SPECIALS)
        if bad:
            raise ConfigError(f"host folder {path!r} holds {bad!r}, which apptainer --bind "
                              f"cannot carry; move it or point pip's find-links / index-url "
                              f"elsewhere", key="HOST_PATHS")


def _build_args(target: Target, definition: Definition, user_args: Mapping[str, str],
                cli_args: Mapping[str, str], *, host: HostFacts, base_step: BuildStep | None,
                common: dict, context: Path, binds: list[str]) -> dict[str, str]:
    """The ``{{ ARG }}`` values the definition uses, the user's over the tool's; one given on the
    command line that it does not use is refused, and each it uses must have a value."""
    provided = {
        "BUILD_CONTEXT": str(context),
        "HOST_PATHS": HOST_PATHS_SEPARATOR.join(binds),
        "INPUTS_HASH": common["inputs_hash"],
        "TOOL_VERSION": __version__,
        "GIT_REVISION": host.git_revision,
        "BUILD_DATE": host.build_date,
        "TARGET": target.name,
    }
    if host.mirror:
        provided["MIRROR"] = host.mirror
    if base_step is not None:
        provided["BASE_IMAGE"] = str(base_step.image)
    provided["FOREIGN_ROOT"] = str(common["workdir"] / "rootfs")
    used = set(definition.build_args)
    args = {k: v for k, v in {**provided, **user_args}.items() if k in used}
    unknown = sorted(set(cli_args) - used)
    if unknown:
        raise ConfigError(f"build argument '{unknown[0]}' is not used by the definition (it uses: "
                          f"{', '.join(definition.build_args) or 'none'})",
                          path=target.definition, key=unknown[0])
    definition.render(args)
    return args


def _apptainer_step(given: StepInputs, *, host: HostFacts, env_vars: dict[str, str],
                    common: dict) -> BuildStep:
    """``apptainer build`` of the definition, its context staged and the package cache bound."""
    target, definition, env, base_step = given.target, given.definition, given.env, given.base
    user_args, cli_args = given.user_args, given.cli_args
    assert definition is not None and target.definition is not None
    context = common["workdir"] / "context"
    binds = list(host.host_paths)
    cert = "pip-cert.pem" if host.pip.cert else None
    staged = {"pip.conf": host.pip.pip_conf(cert_path=f"{CONTEXT_MOUNT}/{cert}" if cert else None),
              "uv.toml": host.pip.uv_toml()}
    if env is not None:
        staged["requirements.txt"] = env.requirements_txt()
    copied = {f"ca-certificates/{c.name}": c for c in host.ca_certificates}
    copied.update(definition_scripts(definition))
    if cert:
        copied[cert] = Path(host.pip.cert)
    used = set(definition.build_args)
    uses_context = "BUILD_CONTEXT" in used or "FOREIGN_ROOT" in used
    check_carried_paths(context if uses_context else Path("/"),
                        binds if "HOST_PATHS" in used else [])
    installs_pip = uses_context and "HOST_PATHS" in used and "install-python-packages.sh" in copied
    cached = apptainer_cache_use(definition, host, workdir=common["workdir"],
                                 installs_pip=installs_pip, foreign="FOREIGN_ROOT" in used,
                                 inputs=common["inputs"],
                                 base_image=base_step.image if base_step else None)
    # %setup makes the pip cache's mount point with or without the cache: both build the same
    mount = [package_cache.PIP_MOUNT] if installs_pip else []
    args = _build_args(target, definition, user_args, cli_args, host=host, base_step=base_step,
                       common=common, context=context, binds=[*binds, *mount])
    staged.update(cached.staged)
    env_vars = {**env_vars, **cached.env}
    partial = common["partial"]
    emulated = emulated_binds(target.arch, here=host.arch, write=False)  # %post/%test: torch
    all_binds = (*(binds if "HOST_PATHS" in used else ()), *cached.binds, *emulated)
    build_argv = host.runtime.build_argv(
        output=partial, spec=common["workdir"] / STAGED_DEFINITION, build_args=args,
        binds=all_binds, fakeroot=definition.runs_in_image,
        arch=pulled_arch(target, definition, host))
    if "FOREIGN_ROOT" in used:
        build_argv = foreign_root_argv(target, definition, user_args, host=host,
                                       context=context, root=args["FOREIGN_ROOT"],
                                       build_argv=build_argv)
    # The image is the definition's last stage: only its %test runs (apptainer test).
    has_test = target.test and definition.final.section("test") is not None
    staged_text = labelled(definition, common["labels"])
    return BuildStep(**common, build_argv=build_argv,
                     test_argv=host.runtime.test_argv(partial, binds=emulated)
                     if has_test else None,
                     env=env_vars, staged=staged if uses_context else {},
                     copied=copied if uses_context else {}, links=cached.links,
                     definition=staged_text, binds=all_binds,
                     rendered=parse_definition(staged_text).render(args),
                     package_cache=host.package_cache if cached.uses else None,
                     cache_use="; ".join(cached.uses),
                     kept_root=cached.kept_root if args.get("VENV") != "system" else None)


@dataclass
class CacheUse:
    """What an Apptainer build adds to use the package cache, and how, in words (none: unused)."""

    binds: list[str] = field(default_factory=list)
    staged: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    uses: list[str] = field(default_factory=list)
    kept_root: RootKey | None = None


def apptainer_cache_use(definition: Definition, host: HostFacts, *, workdir: Path,
                        installs_pip: bool, foreign: bool, inputs: Mapping,
                        base_image: Path | None) -> CacheUse:
    """How the build reaches the package cache: pip's folder bound at its mount point (which
    ``%setup`` makes from ``HOST_PATHS``) when ``%post`` runs the install script; the debootstrap
    shim first on ``PATH`` for a debootstrapped root. None of it enters the inputs hash."""
    cache, found = host.package_cache, CacheUse()
    if cache is None:
        return found
    if installs_pip and definition.runs_in_image:
        found.staged[package_cache.PIP_MARKER] = package_cache.PIP_MOUNT + "\n"
        found.binds.append(f"{cache.pip}:{package_cache.PIP_MOUNT}")
        found.uses.append(f"pip ({cache.pip} bound at {package_cache.PIP_MOUNT})")
        found.kept_root, why_not = kept_root_key(definition, inputs, base_image, host.host_paths)
        if not cache.keep_roots:  # a small quota: every build full
            found.kept_root, why_not = None, "containers.keep_roots is off"
        found.uses.append(f"kept root file systems ({cache.roots})"
                          if found.kept_root else f"no kept root file system ({why_not})")
    debootstraps = foreign or definition.stages[0].bootstrap.lower() == "debootstrap"
    if debootstraps and host.debootstrap:
        shim_dir = workdir / "bin"
        found.links[str(shim_dir / "debootstrap")] = str(package_cache.SHIM)
        found.env = {"PATH": f"{shim_dir}:$PATH",  # expanded by the builder, as for cotainr
                     "CONTAINERS_APT_CACHE": str(cache.apt),
                     "CONTAINERS_DEBOOTSTRAP": host.debootstrap}
        found.uses.append(f"debootstrap --cache-dir={cache.apt}")
    return found


_BASE_IMAGE_ARG = re.compile(r"\{\{\s*BASE_IMAGE\s*\}\}")


#: The only ``%files`` line and ``%post`` commands a rebuild from a kept root replays (context
#: in, env spec into a venv, context out); a final stage doing more is always built in full.
REPLAYED_FILES = ['"{{ BUILD_CONTEXT }}" ' + CONTEXT_MOUNT]
REPLAYED_POST = re.compile(r"set -eu|sh /opt/build-context/install-python-packages\.sh "
                           r"\"\{\{ VENV \}\}\"|rm -rf /opt/build-context")


def _replay_problem(definition: Definition) -> str:
    """Why a rebuild from a kept root could not replay the final stage (empty: it can)."""
    commands = {name: [line.strip() for line in section.body.splitlines()
                       if line.strip() and not line.strip().startswith("#")]
                for name in ("files", "post")
                if (section := definition.final.section(name)) is not None}
    if commands.get("files") != REPLAYED_FILES:
        return "its %files is not the build context alone"
    if not all(REPLAYED_POST.fullmatch(line) for line in commands.get("post", ["?"])):
        return "its %post does more than install the env spec into a venv"
    return ""


def kept_root_key(definition: Definition, inputs: Mapping, base_image: Path | None,
                  host_paths: tuple[str, ...] = ()) -> tuple[RootKey | None, str]:
    """The key of the kept root a build may rebuild from, or (None, why not). Only a base named
    by content qualifies (the chain's base image, by its record's sha256, or a registry image
    by digest): a tag or other local image could change under its name. The host folders
    ``%setup`` made mount points for are in the key: a root holds them."""
    for number, stage in enumerate(definition.stages, start=1):
        source = stage.header.get("from", "").strip()
        agent = stage.bootstrap.lower()
        if agent == "localimage" and base_image is not None \
                and _BASE_IMAGE_ARG.fullmatch(source):
            continue
        if agent in REGISTRY_BOOTSTRAPS and "@sha256:" in source and "{{" not in source:
            continue
        where = f"stage {number}'s" if len(definition.stages) > 1 else "the"
        return None, (f"{where} base, {agent or '?'} {source or '(none)'}, is not named by "
                      "content")
    problem = _replay_problem(definition)
    if problem:
        return None, problem
    parts = {key: value for key, value in inputs.items() if key not in ("env", "base")}
    record = base_image.with_name(base_image.name + ".json") if base_image else None
    return RootKey(parts={**parts, "host_paths": list(host_paths)}, base_record=record), ""


#: Bootstraps that pull an image from a registry, where ``apptainer build --arch`` picks the
#: architecture (Apptainer ignores it for ``debootstrap``: see :func:`foreign_root_argv`).
REGISTRY_BOOTSTRAPS = ("docker", "oras", "library")


def pulled_arch(target: Target, definition: Definition, host: HostFacts) -> str | None:
    """``--arch`` for a target of another architecture than the build host whose first stage
    pulls from a registry (else Apptainer pulls the host's architecture); None otherwise."""
    bootstraps = {stage.bootstrap.lower() for stage in definition.stages}
    if target.arch == host.arch or not bootstraps & set(REGISTRY_BOOTSTRAPS):
        return None
    return DEBIAN_ARCH.get(target.arch, target.arch)


def foreign_root_argv(target: Target, definition: Definition, user_args: Mapping[str, str], *,
                      host: HostFacts, context: Path, root: str, build_argv: list[str]
                      ) -> list[str]:
    """``build_argv`` behind ``recipes/scripts/foreign-root.sh``, which first makes a Debian root
    of the target's architecture (``FOREIGN_ROOT``: debootstrap --foreign, second stage emulated),
    as Apptainer's ``Bootstrap: debootstrap`` ignores ``--arch`` (it would bootstrap the host's)."""
    if not host.mirror:
        raise ConfigError("no Debian mirror found in this machine's apt sources for the foreign "
                          "root; pass --build-arg MIRROR=URL", path=target.definition,
                          key="FOREIGN_ROOT")
    suite = {**definition.argument_defaults, **user_args}.get("SUITE", "bookworm")
    return ["sh", str(context / "foreign-root.sh"), DEBIAN_ARCH.get(target.arch, target.arch),
            suite, host.mirror, root, "--", *build_argv]


#: What a cotainr-built image must be able to do: its Conda env is active on plain exec.
COTAINR_TEST = "import torch; print('torch', torch.__version__, 'ok')"
#: The same for an environment without torch (R, pandas, mpi4py): its python runs.
COTAINR_PYTHON_TEST = "import sys; print('python', sys.version.split()[0], 'ok')"


def _cotainr_step(given: StepInputs, *, host: HostFacts, env_vars: dict[str, str],
                  common: dict) -> BuildStep:
    """cotainr always calls ``singularity``: where only Apptainer exists, a link to it goes first
    on cotainr's PATH. Its prompt for an existing output never fires: the output is a new path."""
    target, env, base_image = given.target, given.env, common["inputs"]["base_image"]
    assert env is not None and target.env is not None
    if not base_image:
        raise ConfigError("a cotainr target needs base_image (or --build-arg BASE_IMAGE=...)",
                          path=target.manifest, line=target.line("builder"), key="base_image")
    partial = common["partial"]
    links, path = {}, {}
    if host.runtime.own.singularity_link:
        shim = common["workdir"] / "bin"
        links[str(shim / "singularity")] = host.runtime.binary
        path = {"PATH": f"{shim}:$PATH"}
    env_vars = {**env_vars, **path, "SINGULARITY_TMPDIR": env_vars["APPTAINER_TMPDIR"]}
    cache = host.package_cache
    if cache is not None:  # pip's cache only: see containers.image.cache for conda's
        # the runtime's bind variables (the user's kept) and PIP_CACHE_DIR reach the pip of
        # cotainr's singularity exec steps, as it passes no --cleanenv
        binds = host.runtime.bind_env(host.environ,
                                      [f"{cache.pip}:{package_cache.COTAINR_PIP_MOUNT}"])
        env_vars = {**env_vars, **binds, "PIP_CACHE_DIR": f"{package_cache.COTAINR_PIP_MOUNT}/pip"}
    build_argv = [host.cotainr, "build", str(partial), f"--base-image={base_image}",
                  f"--conda-env={target.env}", "--accept-licenses"]
    test = COTAINR_TEST if has_torch(target, env) else COTAINR_PYTHON_TEST
    emulated = emulated_binds(target.arch, here=host.arch, write=False)  # named, not written
    test_argv = host.runtime.exec_argv(image=partial, command=["python", "-c", test],
                                       binds=emulated)
    return BuildStep(**common, build_argv=build_argv,
                     test_argv=test_argv if target.test else None, env=env_vars, staged={},
                     copied={}, links=links, package_cache=cache,
                     cache_use=(f"pip ({cache.pip} bound at "
                                f"{package_cache.COTAINR_PIP_MOUNT} in cotainr's steps; not "
                                "conda's)" if cache else ""))


def plan_build(targets: Mapping[str, Target], name: str, *, settings: Settings, host: HostFacts,
               cli_args: Mapping[str, str] | None = None, force: bool = False) -> BuildPlan:
    """Plan ``name`` and its bases, base-most first (``force`` rebuilds ``name`` alone); an
    up-to-date image needs no base built (a stale base would have changed its inputs hash)."""
    steps: list[BuildStep] = []
    previous: BuildStep | None = None
    for target in base_chain(dict(targets), name):
        previous = plan_step(target, settings=settings, host=host,
                             cli_args=(cli_args or {}) if target.name == name else {},
                             base_step=previous, force=force and target.name == name)
        steps.append(previous)
    fresh = [index for index, step in enumerate(steps) if step.action == "up-to-date"]
    below = fresh[-1] if fresh else 0  # the topmost up-to-date image needs none of its bases
    return BuildPlan(steps=tuple(replace(step, action="not-needed") if index < below else step
                                 for index, step in enumerate(steps)))


#: Each builder's plan step (the rest of what a builder owns is in its registry,
#: :mod:`containers.inputs.builders`, which the layer rule keeps from naming image-stage code).
PLAN_STEPS: dict[Builder, Callable[..., BuildStep]] = {APPTAINER: _apptainer_step,
                                                       COTAINR: _cotainr_step}


def fakeroot_refusal(target: Target, site: Site) -> ConfigError | None:
    """The one rule for ``invoke build`` and build jobs, checked before anything runs."""
    return builder_of(target).fakeroot_refusal(target, site)
