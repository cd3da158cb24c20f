"""Project settings: where images, temp files and results go, which runtime to use.

Defaults live in the project's ``invoke.yaml`` under ``containers:``; site admins override them the
invoke way (their own invoke config or ``INVOKE_CONTAINERS_*`` variables). Relative paths are taken
from the project root, so tasks work from any working directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from containers.errors import ConfigError
from containers.inputs.schema import Field, check_mapping, name_problem

FIELDS = (
    Field("images_dir", default="images"),
    Field("results_dir", default="results"),
    Field("perflog_dir", default="results/perflog"),
    Field("tmp_dir", default="/var/tmp/containers-build"),
    Field("cache_dir", default=""),
    Field("runtime", default="auto"),
    Field("default_target", default="cpu"),
    Field("jobs_mount", default="/opt/containers/jobs"),
    Field("results_mount", default="/opt/containers/results"),
    Field("sign_keysdir", default=""),
    Field("sign_keyidx", "int", default=0),
    Field("publish_group", default=""),
    Field("publish_world_readable", "bool", default=True),
    # Versions --keep never removes, per target (queued jobs or a site's docs rely on them).
    Field("publish_pinned", "map", default={}),
    # Batch jobs (invoke job): the project (account) to charge, for every site or per site.
    Field("account", default=""),
    Field("accounts", "str_map", default={}),
)


@dataclass(frozen=True)
class Settings:
    root: Path
    images_dir: Path
    results_dir: Path
    perflog_dir: Path
    tmp_dir: Path
    cache_dir: Path | None
    runtime: str
    default_target: str
    jobs_mount: str
    results_mount: str
    # Publishing (``invoke publish``): PGP keyring for ``apptainer sign`` (empty: the runtime's
    # default, ~/.apptainer/keys), which secret key in it, the group that reads published files,
    # and whether others may read them too (0644/0755) or only that group (0640/0750).
    sign_keysdir: Path | None = None
    sign_keyidx: int = 0
    publish_group: str = ""
    publish_world_readable: bool = True
    #: Per target, versions ``--keep`` must never remove (``containers.publish_pinned``).
    publish_pinned: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The account batch jobs charge: ``accounts[<site>]``, else ``account`` (empty: none).
    account: str = ""
    accounts: Mapping[str, str] = field(default_factory=dict)

    def account_for(self, site: str) -> str | None:
        """The configured account for ``site`` (``containers.accounts.<site>``, else
        ``containers.account``); None when neither is set."""
        return self.accounts.get(site) or self.account or None

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def image_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif"

    def provenance_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif.json"


def _pinned(value: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """``containers.publish_pinned``: target name to a list of version names, each checked by
    the one name rule (the versions are file names in the publish folder)."""
    pinned: dict[str, tuple[str, ...]] = {}
    for target, versions in value.items():
        key = f"containers.publish_pinned.{target}"
        if isinstance(versions, str) or not isinstance(versions, list):
            raise ConfigError("must be a list of version names", path="invoke.yaml", key=key)
        for version in versions:
            problem = name_problem("version", version)
            if problem:
                raise ConfigError(problem, path="invoke.yaml", key=key)
        pinned[str(target)] = tuple(str(v) for v in versions)
    return pinned


def load_settings(root: Path, config: Mapping[str, Any] | None = None) -> Settings:
    """Settings from a plain mapping (the ``containers`` part of the invoke config)."""
    values = check_mapping(dict(config or {}), FIELDS, what="containers settings",
                           path="invoke.yaml", prefix="containers.")

    def resolve(value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else root / path

    if values["runtime"] not in ("auto", "apptainer", "singularity") and \
            not Path(values["runtime"]).is_absolute():
        raise ConfigError("must be auto, apptainer, singularity or an absolute path",
                          path="invoke.yaml", key="containers.runtime")
    return Settings(root=root, images_dir=resolve(values["images_dir"]),
                    results_dir=resolve(values["results_dir"]),
                    perflog_dir=resolve(values["perflog_dir"]), tmp_dir=resolve(values["tmp_dir"]),
                    cache_dir=resolve(values["cache_dir"]) if values["cache_dir"] else None,
                    runtime=values["runtime"], default_target=values["default_target"],
                    jobs_mount=values["jobs_mount"], results_mount=values["results_mount"],
                    sign_keysdir=(resolve(values["sign_keysdir"]) if values["sign_keysdir"]
                                  else None),
                    sign_keyidx=values["sign_keyidx"], publish_group=values["publish_group"],
                    publish_world_readable=values["publish_world_readable"],
                    publish_pinned=_pinned(values["publish_pinned"]),
                    account=str(values["account"] or ""),
                    accounts={str(k): str(v) for k, v in values["accounts"].items() if v})
