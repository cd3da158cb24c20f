"""Project settings: where images, temp files and results go, which runtime to use. Defaults are
in ``invoke.yaml``; relative paths are from the project root, so tasks work from any folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import AfterValidator, ConfigDict, Field

from containers.errors import ConfigError, raise_all
from containers.inputs.flags import ACCOUNT, GROUP, NON_NEGATIVE_INT, TARGET, FlagType
from containers.inputs.schema import (MAP_OF_SCALARS, Bool, Declared, Int, Scalar, Str,
                                      name_problem, refuse, suggest, validate_model)

#: mksquashfs's own gzip level, which Apptainer builds with when given no arguments.
SQUASHFS_DEFAULT_LEVEL = 9
#: ``auto``: zstd where the runtime is Apptainer (it passes mksquashfs the arguments; its
#: squashfuse reads zstd), else the runtime's own gzip, which every runtime and kernel reads.
SQUASHFS_CHOICES = ("auto", "zstd", "gzip")


def _by_flag(rule: FlagType) -> AfterValidator:
    """A setting that means what a flag means follows its rule, refused where it is set."""
    def check(value: Any) -> Any:
        if value not in ("", None):
            try:
                rule.parse(value if isinstance(value, int) else str(value))
            except ValueError as exc:
                raise ValueError(f"{str(value)!r} {exc}") from None
        return value
    return AfterValidator(check)


def _versions(value: Any) -> tuple[str, ...]:
    """A target's pinned versions: file names in the publish folder, so the one name rule."""
    if not isinstance(value, list):
        raise ValueError("must be a list of version names")
    for version in value:
        problem = name_problem("version", version)
        if problem:
            raise ValueError(problem)
    return tuple(value)


Group = Annotated[Str, _by_flag(GROUP)]
Account = Annotated[Str, _by_flag(ACCOUNT)]
Runtime = Annotated[Str, refuse(lambda value: None if value in ("auto", "apptainer", "singularity")
                                or Path(value).is_absolute()
                                else "must be auto, apptainer, singularity or an absolute path")]
Squashfs = Annotated[Str, refuse(lambda value: None if value in SQUASHFS_CHOICES else (
    f"must be one of {', '.join(SQUASHFS_CHOICES)}, got {value!r}"))]
Level = Annotated[Int, refuse(lambda level: None if 1 <= level <= SQUASHFS_DEFAULT_LEVEL else (
    f"must be a gzip level from 1 (fastest) to {SQUASHFS_DEFAULT_LEVEL} (smallest, Apptainer's "
    f"own), got {level}"))]


class SettingsFile(Declared):
    """The ``containers:`` settings of an invoke config (``invoke.yaml``)."""

    model_config = ConfigDict(title="hpc-containers settings (containers: in invoke.yaml)")

    images_dir: Str = "images"
    results_dir: Str = "results"
    perflog_dir: Str = "results/perflog"
    tmp_dir: Str = "/var/tmp/containers-build"
    cache_dir: Str = ""
    cache_group: Group = Field("", description="a package cache shared by a group of admins, on "
                             "purpose: the group's name (empty: the cache is this user's alone)")
    squashfs: Squashfs = "auto"
    squashfs_level: Level = SQUASHFS_DEFAULT_LEVEL
    keep_roots: Bool = Field(True, description="a full build keeps its root file system (about "
                             "the image's unpacked size) for a fast rebuild after an env spec "
                             "change; false: every build is full and keeps none")
    runtime: Runtime = "auto"
    default_target: Annotated[Str, _by_flag(TARGET)] = "cpu"
    jobs_mount: Str = "/opt/containers/jobs"
    results_mount: Str = "/opt/containers/results"
    sign_keysdir: Str = Field("", description="the PGP keyring invoke publish --sign uses "
                              "(empty: the one the runtime reads, APPTAINER_KEYSDIR else "
                              "~/.apptainer/keys)")
    sign_keyidx: Annotated[Int, _by_flag(NON_NEGATIVE_INT)] = Field(
        0, description="which secret key of the keyring signs")
    publish_group: Group = Field("", description="the group that reads published files")
    publish_world_readable: Bool = Field(True, description="others read published files too "
                                         "(0644/0755); false: only publish_group (0640/0750)")
    publish_pinned: dict[str, Annotated[Any, AfterValidator(_versions)]] = Field(
        {}, description="versions --keep never removes, per target (queued jobs or a site's "
                        "docs rely on them)")
    account: Account = Field("", description="the project (account) batch jobs charge")
    accounts: Annotated[dict[str, Annotated[Scalar, _by_flag(ACCOUNT)]], MAP_OF_SCALARS] = Field(
        {}, description="the account per site, over account")


class Settings(SettingsFile):
    """The settings as loaded (:class:`SettingsFile`'s), folders resolved from the project root."""

    root: Path
    images_dir: Path
    results_dir: Path
    perflog_dir: Path
    tmp_dir: Path
    cache_dir: Path | None
    sign_keysdir: Path | None
    publish_pinned: Mapping[str, tuple[str, ...]]
    accounts: Mapping[str, str]

    def account_for(self, site: str) -> str | None:
        return self.accounts.get(site) or self.account or None

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def image_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif"

    def provenance_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif.json"


#: Mappings: ``INVOKE_CONTAINERS_<KEY>`` sets one whole (YAML), ``..._<KEY>_<NAME>`` an entry.
_MAPS = ("publish_pinned", "accounts")
#: The prefix of the variables read into ``containers:`` settings.
ENV_PREFIX = "INVOKE_CONTAINERS_"
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0", "")


def _env_value(key: str, text: str) -> Any:
    """Setting ``key`` by its default's type (invoke's own cast read ``false`` as true)."""
    default = SettingsFile.model_fields[key].default
    if isinstance(default, bool):
        if text.strip().lower() not in _TRUE + _FALSE:
            raise ValueError(f"{text!r} is not true or false")
        return text.strip().lower() in _TRUE
    if isinstance(default, int):
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if isinstance(default, dict):
        return _yaml_value(text, mapping=True)
    return text


def _yaml_value(text: str, *, mapping: bool = False) -> Any:
    """``text`` read as YAML (a mapping's ``{lumi: p1}``, an entry's list ``[v1, v2]``)."""
    from containers.inputs.yamlsource import load_yaml_text  # yaml: only for a YAML value

    try:
        value = load_yaml_text(text)
    except ConfigError as exc:
        raise ValueError(f"{text!r} is not YAML ({exc.detail.removeprefix('invalid YAML: ')})"
                         ) from None
    if mapping and not isinstance(value, dict):
        raise ValueError(f"{text!r} is not a mapping such as {{lumi: project_1}}")
    return value


def _unknown(name: str, key: str) -> ConfigError:
    known = list(SettingsFile.model_fields)
    close = suggest(key, known)
    hint = f" (did you mean {ENV_PREFIX}{close.split(chr(39))[1].upper()}?)" if close else ""
    return ConfigError(f"names no setting, so it would be ignored{hint}; the settings: "
                       f"{', '.join(ENV_PREFIX + k.upper() for k in known)}",
                       path=f"environment variable {name}")


def environment_settings(environ: Mapping[str, str], config: Mapping[str, Any] | None = None,
                         ) -> dict[str, Any]:
    """The ``INVOKE_CONTAINERS_*`` settings, an entry (``..._ACCOUNTS_LUMI``) over ``config``'s."""
    known = list(SettingsFile.model_fields)
    found: dict[str, Any] = {}
    problems: list[ConfigError] = []
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX)):
        key = name[len(ENV_PREFIX):].lower()
        mapping = next((m for m in _MAPS if key.startswith(m + "_")), None)
        try:
            if key in known:
                found[key] = _env_value(key, environ[name])
            elif mapping is not None:
                base = found.get(mapping, (config or {}).get(mapping) or {})
                found[mapping] = {**base, key[len(mapping) + 1:]: _yaml_value(environ[name])}
            else:
                problems.append(_unknown(name, key))
        except ValueError as exc:
            problems.append(ConfigError(str(exc), path=f"environment variable {name}",
                                        key=f"containers.{key}"))
    raise_all(problems)
    return found


#: Settings that are folders (relative to the project root), and those that may be unset (empty).
FOLDERS = ("images_dir", "results_dir", "perflog_dir", "tmp_dir")
UNSET_FOLDERS = ("cache_dir", "sign_keysdir")


def load_settings(root: Path, config: Mapping[str, Any] | None = None) -> Settings:
    values = dict(validate_model(SettingsFile, dict(config or {}), path="invoke.yaml",
                                 what="containers settings", prefix="containers."))

    def resolve(value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else root / path

    folders = {key: resolve(values[key]) for key in FOLDERS}
    folders.update({key: resolve(values[key]) if values[key] else None for key in UNSET_FOLDERS})
    return Settings.model_construct(root=root, **{**values, **folders, "accounts": {
        site: str(account) for site, account in values["accounts"].items() if account}})
