"""Site profiles: ``sites/<site>.yaml``, every fact about WHERE images run.

Scheduler, GPUs per node, runtime flavour, GPU flag, binds and environment live in data, not in
code, so a new cluster is a new YAML file. A site may say how to recognise it from the environment
(``detect``) so ``invoke smoke`` on a login or compute node picks the right target by itself.
"""

from __future__ import annotations

import fnmatch
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .errors import ConfigError
from .schema import Field, check_mapping, line_of, suggest
from .yamlsource import load_yaml_file

FIELDS = (
    Field("description", required=True),
    Field("scheduler", default="none", choices=("none", "slurm", "pbs")),
    Field("gpu", default="none", choices=("none", "cuda", "rocm")),
    Field("runtime", default="apptainer", choices=("apptainer", "singularity")),
    Field("gpus_per_node", "int", default=0),
    Field("cores_per_node", "int", default=0),
    Field("fakeroot", "bool", default=True),
    Field("binds", "str_list", default=[]),
    Field("env", "str_map", default={}),
    Field("default_target"),
    Field("detect", "map", default={}),
)
DETECT_FIELDS = (Field("env", "str_list", default=[]), Field("hostname", "str_list", default=[]))
GPU_FLAGS = {"none": None, "cuda": "--nv", "rocm": "--rocm"}


@dataclass(frozen=True)
class Site:
    """One cluster (or the local machine) as its profile describes it."""

    name: str
    path: Path
    description: str
    scheduler: str
    gpu: str
    runtime: str
    gpus_per_node: int
    cores_per_node: int
    fakeroot: bool
    binds: tuple[str, ...]
    env: dict[str, str]
    default_target: str | None
    detect_env: tuple[str, ...] = ()
    detect_hostname: tuple[str, ...] = ()
    lines: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def gpu_flag(self) -> str | None:
        """``--nv`` for CUDA, ``--rocm`` for ROCm, nothing for CPU sites: never both."""
        return GPU_FLAGS[self.gpu]

    def matches(self, environ: Mapping[str, str], hostname: str) -> bool:
        """True when every ``detect`` rule holds (a site with no rules never matches)."""
        if not self.detect_env and not self.detect_hostname:
            return False
        for rule in self.detect_env:
            name, _, wanted = rule.partition("=")
            if name not in environ or (wanted and environ[name] != wanted):
                return False
        if self.detect_hostname:
            return any(fnmatch.fnmatch(hostname, p) for p in self.detect_hostname)
        return True


def load_site(path: Path) -> Site:
    data = load_yaml_file(path)
    values = check_mapping(data, FIELDS, what="site profile", path=path)
    detect = check_mapping(values["detect"], DETECT_FIELDS, what="detect rules", path=path,
                           prefix="detect.") if values["detect"] else {"env": [], "hostname": []}
    if values["gpu"] != "none" and values["gpus_per_node"] <= 0:
        raise ConfigError("a GPU site needs gpus_per_node > 0", path=path,
                          line=line_of(data, "gpus_per_node") or line_of(data), key="gpus_per_node")
    return Site(name=path.stem, path=path, description=values["description"],
                scheduler=values["scheduler"], gpu=values["gpu"], runtime=values["runtime"],
                gpus_per_node=values["gpus_per_node"], cores_per_node=values["cores_per_node"],
                fakeroot=values["fakeroot"], binds=tuple(values["binds"]),
                env={str(k): str(v) for k, v in values["env"].items()},
                default_target=values["default_target"], detect_env=tuple(detect["env"]),
                detect_hostname=tuple(detect["hostname"]),
                lines={key: line_of(data, key) for key in data})


def load_sites(root: Path) -> dict[str, Site]:
    return {p.stem: load_site(p) for p in sorted((root / "sites").glob("*.yaml"))}


def get_site(sites: dict[str, Site], name: str) -> Site:
    try:
        return sites[name]
    except KeyError:
        raise ConfigError(f"unknown site '{name}'{suggest(name, list(sites))}; known: "
                          f"{', '.join(sorted(sites))}") from None


def detect_site(sites: dict[str, Site], environ: Mapping[str, str] | None = None,
                hostname: str | None = None) -> Site | None:
    """The first site whose ``detect`` rules match this environment, if any."""
    environ = os.environ if environ is None else environ
    hostname = socket.gethostname() if hostname is None else hostname
    return next((s for s in sites.values() if s.matches(environ, hostname)), None)
