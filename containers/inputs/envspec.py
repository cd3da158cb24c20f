"""Conda environment specs (``environment.yml``) as the image's package list. Package sources
are the build host's choice: pip options are refused but an https ``--extra-index-url`` the
manifest names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import ConfigDict

from containers.errors import ConfigError, raise_all
from containers.inputs.builders import builder_of
from containers.inputs.schema import Declared, Str, StrList, StrMap, line_of, validate_model
from containers.inputs.versions import major_minor
from containers.inputs.yamlsource import load_yaml_text, read_input_text


if TYPE_CHECKING:  # recipes imports this module
    from containers.inputs.recipes import Target


class EnvFile(Declared):
    """An ``environment.yml`` as this tool reads it."""

    model_config = ConfigDict(title="hpc-containers environment spec (envs/<name>.yml)")

    name: Str | None = None
    channels: StrList = []
    dependencies: list[Any]
    variables: StrMap = {}
    prefix: Str | None = None

#: Conda packages the venv builder gets from the base image itself.
VENV_PROVIDED = frozenset({"python", "pip"})
#: pip options an env spec may use: they choose among packages, not where packages come from.
PIP_SAFE_OPTIONS = frozenset({"--pre", "--prefer-binary", "--only-binary", "--no-binary",
                              "--require-hashes", "--hash"})
#: The one option that may add a package source, and only as the manifest allows it.
PIP_EXTRA_INDEX = "--extra-index-url"
PIP_OPTION_RULE = (f"pip: entries are requirements; options allowed: "
                   f"{', '.join(sorted(PIP_SAFE_OPTIONS))}, "
                   f"and {PIP_EXTRA_INDEX} with an https URL listed in the manifest's "
                   "pip_extra_index_urls (package sources are the build host's pip.conf)")
_SHORT_OPTIONS = {"-i": "--index-url", "-f": "--find-links", "-e": "--editable",
                  "-r": "--requirement", "-c": "--constraint"}
#: The names torch goes by, and the pip operators whose version is the lowest torch allowed.
_TORCH_NAMES = frozenset({"torch", "pytorch"})
_FLOOR_OPERATORS = frozenset({"==", "===", "~=", ">="})
#: A Conda match spec's torch floor: ``pytorch=2.5.1=<build>``, ``pytorch>=2.1`` (not PEP 508).
_CONDA_TORCH_PIN = re.compile(r"^(?:torch|pytorch)\s*(?:==?|>=)\s*([^\s,|=]+)", re.IGNORECASE)


@dataclass(frozen=True)
class CondaDep:
    spec: str
    line: int | None

    @property
    def name(self) -> str:
        return _package_name(self.spec.split("::")[-1])  # conda-forge::numpy>=1


@dataclass(frozen=True)
class EnvSpec:
    path: Path
    conda: tuple[CondaDep, ...]
    pip: tuple[str, ...]
    text: str
    pip_lines: tuple[int | None, ...] = ()
    channels: tuple[tuple[str, int | None], ...] = ()
    prefix_line: int | None = None  # a prefix no builder uses (:meth:`prefix_warning`)

    def requirements_txt(self) -> str:
        """The ``pip:`` list as a requirements file; option lines (``--extra-index-url``) kept."""
        return "".join(line + "\n" for line in self.pip)

    def check_pip_options(self, extra_indexes: Collection[str] = (), *,
                          manifest: Path | None = None) -> None:
        """Refuse, all at once, every ``pip:`` entry that changes where packages come from."""
        problems = [ConfigError(message, path=self.path, line=self.pip_lines[index],
                                key="dependencies.pip")
                    for index, entry in enumerate(self.pip)
                    if (message := pip_entry_problem(entry, extra_indexes, manifest=manifest))]
        raise_all(problems)

    def all_channels(self) -> list[tuple[str, int | None]]:
        """``channels:`` and those a dependency names (``conda-forge::numpy``), with lines."""
        named = [(dep.spec.rsplit("::", 1)[0], dep.line) for dep in self.conda if "::" in dep.spec]
        return [*self.channels, *named]

    def check_channels(self) -> None:
        """Refuse, all at once, every channel packages could be swapped on the way from."""
        raise_all([ConfigError(message, path=self.path, line=line, key="channels")
                   for channel, line in self.all_channels()
                   if (message := channel_problem(channel))])

    def local_channels(self) -> list[tuple[str, int | None]]:
        """Folders of the build host, judged by the manifest's ``host_paths`` rule."""
        return [(channel, line) for channel, line in self.all_channels()
                if channel.lower().startswith("file:")]

    def prefix_warning(self) -> ConfigError | None:
        """A warning: cotainr/pack.py passes ``-n NAME``, so a ``prefix:`` is not what it does."""
        if self.prefix_line is None:
            return None
        return ConfigError("is ignored: cotainr creates the environment by name (conda env "
                           "create -n), the venv builder installs only the pip: list; remove it",
                           path=self.path, line=self.prefix_line, key="prefix")

    def torch_pin(self) -> tuple[tuple[int, int], int | None] | None:
        """The lowest torch (major, minor) the spec can install (``2.7.1+rocm6.3`` is 2.7)."""
        pins = [(_pip_torch_floor(entry), line) for entry, line in zip(self.pip, self.pip_lines)]
        pins += [(_conda_torch_floor(dep.spec.split("::")[-1]), dep.line) for dep in self.conda]
        return next(((floor, line) for floor, line in pins if floor is not None), None)

    def installs(self, package: str) -> bool:
        names = {_package_name(e) for e in self.pip} | {d.name for d in self.conda}
        return package.lower() in names

    def check_venv_compatible(self) -> None:
        for dep in self.conda:
            if dep.name not in VENV_PROVIDED:
                raise ConfigError(
                    f"'{dep.spec}' is a Conda package; the apptainer (venv) builder installs only "
                    f"the pip: list on the base image's python. Move it under pip:, or build this "
                    f"target with builder: cotainr", path=self.path, line=dep.line,
                    key="dependencies")


def _package_name(entry: str) -> str:
    return re.split(r"[=<>!~;@\s\[]", entry.strip(), maxsplit=1)[0].lower()


def is_https(url: str) -> bool:
    """An https URL with a host and no credentials (they would reach the image's provenance)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # a malformed netloc (an unclosed [ of an IPv6 host)
        return False
    return (parts.scheme.lower() == "https" and bool(hostname) and "@" not in parts.netloc
            and not any(c.isspace() for c in url))


#: ``name [extras] @ URL``: PEP 508's direct reference (the ``@`` after a name, not one in a URL).
_DIRECT = re.compile(r"^\s*[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[^\]]*\])?"
                     r"\s*@\s*(.+)$")
#: A URL's scheme (``https:``, ``git+ssh:``, ``file:``).
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def _source_problem(text: str) -> str | None:
    """Why a requirement naming its own source (``pkg @ URL``, a URL, a path) may not be used."""
    if text.startswith((".", "/", "~")):
        return f"{text!r} installs from a local path; {PIP_OPTION_RULE}"
    spec = text.split(";", 1)[0].strip()
    direct = _DIRECT.match(spec)
    url = direct.group(1).strip() if direct else spec
    if not _SCHEME.match(url):
        if direct or "@" in url or "://" in url:
            return (f"{text!r} names a source that is not an https URL: "
                    "packages from it could be swapped in transit")
        return _requirement_problem(text)  # a plain requirement: name, extras, version
    scheme = url.split(":", 1)[0].lower()
    if scheme == "file" or scheme.endswith("+file"):
        return f"{text!r} installs from a local path; {PIP_OPTION_RULE}"
    # a VCS URL (git+https://) is fetched over what follows the plus
    bare = url.split("+", 1)[1] if re.match(r"^[a-z]+\+", url, re.I) else url
    if not is_https(bare):
        return (f"{text!r} downloads from a URL that is not https or holds credentials: "
                "packages from it could be swapped in transit")
    return None


def channel_problem(channel: str) -> str | None:
    """Why a Conda channel may not be used: not a name, an https URL or a ``file://`` folder."""
    if not _SCHEME.match(channel):
        return None
    if channel.lower().startswith("file:"):
        try:
            parts = urlsplit(channel)
        except ValueError:
            parts = None
        if parts is None or parts.netloc not in ("", "localhost") or \
                not parts.path.startswith("/"):
            return f"channel {channel!r} is not a folder of the build host (file:///path)"
        return None
    if not is_https(channel):
        return (f"channel {channel!r} is not an https URL without credentials: packages from "
                "it could be swapped in transit")
    return None


def _requirement_text(entry: str) -> str:
    """A ``pip:`` entry without its per-requirement options (``--hash=...``: pip's to read)."""
    return re.split(r"\s+(?=--?[A-Za-z])", entry, maxsplit=1)[0]


def _pip_torch_floor(entry: str) -> tuple[int, int] | None:
    """The lowest torch a ``pip:`` entry allows, None when it pins none."""
    try:
        requirement = Requirement(_requirement_text(entry))
    except InvalidRequirement:
        return None
    if canonicalize_name(requirement.name) not in _TORCH_NAMES:
        return None
    floors = [major_minor(spec.version) for spec in requirement.specifier
              if spec.operator in _FLOOR_OPERATORS]
    return max((floor for floor in floors if floor is not None), default=None)


def _conda_torch_floor(spec: str) -> tuple[int, int] | None:
    match = _CONDA_TORCH_PIN.match(spec)
    return major_minor(match.group(1)) if match else None


def _requirement_problem(text: str) -> str | None:
    """Why a plain entry is not a requirement as pip reads one (``packaging``, pip's parser)."""
    try:
        Requirement(_requirement_text(text))
    except InvalidRequirement as exc:
        reason = " ".join(str(exc).split())[:160]
        return f"{text!r} is not a requirement pip can read ({reason})"
    return None


def _split_option(text: str) -> tuple[str, str]:
    """``("--opt", "value")`` from ``--opt value``, ``--opt=value`` or ``-rfile``."""
    match = re.match(r"^(--[A-Za-z0-9-]+|-[A-Za-z])(?:\s*=\s*|\s+)?(.*)$", text)
    if not match:
        return text, ""
    return _SHORT_OPTIONS.get(match.group(1), match.group(1)), match.group(2).strip()


#: Why each option that changes where packages come from is refused.
_REFUSED = {"--index-url": "replaces the package index for every package",
            "--trusted-host": "turns off TLS checks for a host",
            "--find-links": "reads packages from a folder or page the env spec names",
            "--no-index": "turns off the build host's package index",
            "--editable": "installs from a source tree outside the image",
            "--requirement": "reads another file, which is not staged into the build",
            "--constraint": "reads another file, which is not staged into the build"}


def pip_entry_problem(entry: str, extra_indexes: Collection[str] = (), *,
                      manifest: Path | None = None) -> str | None:
    """Why one ``pip:`` entry may not go into the image's requirements file, else None."""
    text = entry.strip()
    if not text.startswith("-"):
        return _source_problem(text)
    option, value = _split_option(text)
    if option in PIP_SAFE_OPTIONS:
        return None
    if option == "--editable" and _SCHEME.match(value):
        return (f"--editable {value} is an editable install of a checkout pip clones during the "
                "build (the image would hold a development copy, not the package); name it as "
                "a requirement instead (pkg @ git+https://...); " + PIP_OPTION_RULE)
    if option != PIP_EXTRA_INDEX:
        return f"{option} {_REFUSED.get(option, 'is not an option an env spec may set')}; " \
               f"{PIP_OPTION_RULE}"
    if not is_https(value):
        return (f"{PIP_EXTRA_INDEX} {value!r} is not an https URL without credentials: "
                "packages from it could be swapped in transit")
    if value.rstrip("/") not in {url.rstrip("/") for url in extra_indexes}:
        where = f" ({manifest})" if manifest is not None else ""
        return (f"{PIP_EXTRA_INDEX} {value} is not allowed: list it under pip_extra_index_urls "
                f"in the target's manifest{where} to use it")
    return None


def load_env_spec(path: Path) -> EnvSpec:
    """Read once, so the text hashed is the text checked (newlines as text mode reads them)."""
    text = read_input_text(path).replace("\r\n", "\n").replace("\r", "\n")
    data = load_yaml_text(text, path=path)
    validate_model(EnvFile, data, path=path, what="environment spec")
    deps = data["dependencies"]
    conda: list[CondaDep] = []
    pip: list[str] = []
    pip_lines: list[int | None] = []
    for index, item in enumerate(deps):
        line = line_of(deps, index)
        if isinstance(item, str):
            conda.append(CondaDep(item.strip(), line))
        elif isinstance(item, dict) and list(item) == ["pip"]:
            entries = item["pip"]
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                raise ConfigError("pip: must be a list of requirement strings", path=path,
                                  line=line, key="dependencies.pip")
            pip.extend(e.strip() for e in entries)
            pip_lines.extend(line_of(entries, i) for i in range(len(entries)))
        else:
            raise ConfigError("each dependency must be a Conda spec string or a 'pip:' list",
                              path=path, line=line, key="dependencies")
    channels = data.get("channels") or []
    return EnvSpec(path=path, conda=tuple(conda), pip=tuple(pip), text=text,
                   pip_lines=tuple(pip_lines),
                   channels=tuple((str(c).strip(), line_of(channels, i))
                                  for i, c in enumerate(channels)),
                   prefix_line=(line_of(data, "prefix") or line_of(data)) if "prefix" in data
                   else None)


def load_target_env(target: Target) -> EnvSpec | None:
    """``target``'s env spec (None when it has none), checked as every use of it needs."""
    if target.env is None:
        return None
    spec = load_env_spec(target.env)
    builder_of(target).check_env(spec)
    spec.check_pip_options(target.pip_extra_index_urls, manifest=target.manifest)
    spec.check_channels()
    return spec
