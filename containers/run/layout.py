"""How many nodes and ranks per node a run spans: the one check of those counts against a site."""

from __future__ import annotations

from containers.errors import ConfigError
from containers.inputs.sites import Gpu, Site


def check_ranks(site: Site, ranks: int, *, nodes: int = 1, flag: str = "--gpus") -> None:
    """Ranks per node and GPUs per job within the site's limits, naming the line."""
    if site.gpus.kind == Gpu.NONE:
        return
    if site.gpus.per_node and ranks > site.gpus.per_node:
        raise ConfigError(f"{site.name} nodes have {site.gpus.per_node} GPUs; {flag} {ranks} is "
                          "more (for more GPUs, use more nodes: --nodes)", path=site.path,
                          line=site.lines.get("gpus.per_node"), key="gpus.per_node")
    total = ranks * nodes
    if site.gpus.max_per_job and total > site.gpus.max_per_job:
        raise ConfigError(f"{site.name} allows at most {site.gpus.max_per_job} GPUs per job; "
                          f"--nodes {nodes} x {flag} {ranks} = {total}", path=site.path,
                          line=site.lines.get("gpus.max_per_job"), key="gpus.max_per_job")
