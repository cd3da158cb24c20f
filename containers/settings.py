"""Project settings: where images, temp files and results go, which runtime to use.

Defaults live in the project's ``invoke.yaml`` under ``containers:``; site admins override them the
invoke way (their own invoke config or ``INVOKE_CONTAINERS_*`` variables). Relative paths are taken
from the project root, so tasks work from any working directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .schema import Field, check_mapping

FIELDS = (
    Field("images_dir", default="images"),
    Field("results_dir", default="results"),
    Field("tmp_dir", default="/var/tmp/containers-build"),
    Field("cache_dir", default=""),
    Field("runtime", default="auto"),
    Field("default_target", default="cpu"),
    Field("jobs_mount", default="/opt/containers/jobs"),
    Field("results_mount", default="/opt/containers/results"),
)


@dataclass(frozen=True)
class Settings:
    root: Path
    images_dir: Path
    results_dir: Path
    tmp_dir: Path
    cache_dir: Path | None
    runtime: str
    default_target: str
    jobs_mount: str
    results_mount: str

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def image_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif"

    def provenance_path(self, target: str) -> Path:
        return self.images_dir / f"{target}.sif.json"


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
                    results_dir=resolve(values["results_dir"]), tmp_dir=resolve(values["tmp_dir"]),
                    cache_dir=resolve(values["cache_dir"]) if values["cache_dir"] else None,
                    runtime=values["runtime"], default_target=values["default_target"],
                    jobs_mount=values["jobs_mount"], results_mount=values["results_mount"])
