"""The site's rules for a batch job, each on its own: the wall time within the partition's
limit, nodes and GPUs within it (naming a partition that allows them), the account's sources
in their order, a transport across nodes the container can load."""

from __future__ import annotations

import pytest

from containers.batch.request import JobRequest
from containers.batch.siterules import (check_site, check_size, check_transport, chosen_site,
                                        fit_time, resolve_account)
from containers.errors import ConfigError, UsageError
from containers.inputs.settings import load_settings
from containers.prove.registry import kind_of


@pytest.fixture
def lumi(data_world):
    return data_world[1]["lumi"]


def test_the_time_is_the_kinds_estimate_capped_by_the_partition(lumi) -> None:
    dev = lumi.partition("dev-g")
    assert fit_time(JobRequest(kind=kind_of("smoke")), lumi, dev) == 1800
    assert fit_time(JobRequest(kind=kind_of("build")), lumi, dev) == 7200
    assert fit_time(JobRequest(kind=kind_of("ddp"), time="10:00:00"), lumi,
                    lumi.partition("standard-g")) == 36000
    with pytest.raises(UsageError, match="--time 04:00:00 is more than partition dev-g of "
                                         "site lumi allows \\(03:00:00\\)"):
        fit_time(JobRequest(kind=kind_of("smoke"), time="04:00:00"), lumi, dev)


def test_a_size_over_the_partition_names_one_that_allows_it(lumi) -> None:
    check_size(lumi, lumi.partition("dev-g"), None, nodes=32, gpus_per_node=8)
    with pytest.raises(UsageError, match="--nodes 8 is more than partition small-g of site "
                                         "lumi allows \\(4\\); partition standard-g allows it"):
        check_size(lumi, lumi.partition("small-g"), None, nodes=8, gpus_per_node=8)


def test_the_account_comes_from_the_flag_the_settings_then_the_environment(lumi,
                                                                           tmp_path) -> None:
    settings = load_settings(tmp_path, {"accounts": {"lumi": "project_1"}})
    plain = load_settings(tmp_path, {})
    assert resolve_account(JobRequest(kind=kind_of("smoke"), account="p2"), lumi, settings, {}) == (
        "p2", "--account")
    assert resolve_account(JobRequest(kind=kind_of("smoke")), lumi, settings, {}) == (
        "project_1", "containers.accounts.lumi")
    assert resolve_account(JobRequest(kind=kind_of("smoke")), lumi, plain,
                           {"SBATCH_ACCOUNT": "p3"}) == (None, "SBATCH_ACCOUNT")
    with pytest.raises(UsageError, match="site lumi requires an account"):
        resolve_account(JobRequest(kind=kind_of("smoke")), lumi, plain, {})


def test_an_image_of_another_architecture_is_refused_with_the_kinds_hint(data_world) -> None:
    targets, sites = data_world
    olivia = targets["olivia-cuda"]
    with pytest.raises(UsageError, match="nodes are x86_64; build it on an aarch64 machine"):
        check_site(JobRequest(kind=kind_of("build")), olivia, sites["olivia"], "x86_64")
    with pytest.raises(UsageError, match="nodes are x86_64$"):
        check_site(JobRequest(kind=kind_of("smoke")), olivia, sites["olivia"], "x86_64")


def test_sockets_replace_a_transport_only_across_nodes(data_world) -> None:
    derecho = data_world[1]["derecho"]
    with pytest.raises(ConfigError, match="a 2-node job on site derecho needs the host's"):
        check_transport(derecho, 2)
    check_transport(derecho, 1)
    across = chosen_site(derecho, JobRequest(kind=kind_of("smoke"), nodes=2, transport="socket"))
    check_transport(across, 2)
    with pytest.raises(UsageError, match="leave --transport out"):
        chosen_site(derecho, JobRequest(kind=kind_of("smoke"), transport="socket"))
