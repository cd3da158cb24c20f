"""Node and rank counts, checked once against a site, naming the flag the user typed and the
profile line that sets the limit."""

from __future__ import annotations


import pytest

from containers.errors import ConfigError, UsageError
from containers.inputs.sites import Gpus
from containers.inputs import flags
from containers.run.layout import check_ranks


def test_counts_must_be_positive() -> None:
    assert flags.POSITIVE_INT("--nodes", 3) == 3
    with pytest.raises(UsageError, match=r"^--nodes must be at least 1 \(got 0\)$") as error:
        flags.POSITIVE_INT("--nodes", 0)
    assert error.value.flag == "--nodes"


def test_ranks_within_a_node_and_a_job(data_world) -> None:
    _, sites = data_world
    olivia = sites["olivia"]
    check_ranks(olivia, 4, nodes=8)
    with pytest.raises(ConfigError, match="olivia nodes have 4 GPUs; --gpus-per-node 8 is "
                                          "more") as per_node:
        check_ranks(olivia, 8, flag="--gpus-per-node")
    assert per_node.value.path == olivia.path and per_node.value.key == "gpus.per_node"
    assert per_node.value.line == olivia.lines["gpus.per_node"]
    with pytest.raises(ConfigError, match=r"olivia allows at most 32 GPUs per job; --nodes 9 x "
                                          r"--gpus 4 = 36") as per_job:
        check_ranks(olivia, 4, nodes=9)
    assert per_job.value.key == "gpus.max_per_job"
    # CPU sites: ranks are processes, any number per node.
    check_ranks(sites["local"], 16, nodes=1)
    check_ranks(sites["local-slurm"].model_copy(update={"gpus": Gpus(max_per_job=2)}), 4, nodes=4)
