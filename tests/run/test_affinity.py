"""A site profile's CPU masks as each local rank's cores: read from hex, cut to the ranks a node
runs, and written as the ``--rank-cores`` text the workloads parse back (jobs/choices.py)."""

from __future__ import annotations

from containers.run import affinity
from jobs import choices

LUMI = ["0xfe000000000000", "0xfe00000000000000", "0xfe0000", "0xfe000000"]


def test_a_mask_is_the_cores_of_its_set_bits() -> None:
    assert affinity.mask_cores("0xfe") == frozenset(range(1, 8))
    assert affinity.mask_cores("0x1") == {0}
    assert affinity.mask_cores("0x0") == frozenset()
    assert affinity.mask_cores("0xfe000000000000") == frozenset(range(49, 56))


def test_only_the_ranks_the_node_runs_get_cores() -> None:
    assert affinity.rank_cores(LUMI, 2) == [frozenset(range(49, 56)), frozenset(range(57, 64))]
    assert len(affinity.rank_cores(LUMI, 8)) == len(LUMI)


def test_the_rank_cores_text_round_trips_through_the_workloads_parser() -> None:
    cores = affinity.rank_cores(LUMI, 4)
    text = affinity.rank_cores_arg(cores)
    assert text == "49-55:57-63:17-23:25-31"
    assert choices.parse_rank_cores(text) == cores


def test_the_plan_names_each_ranks_cores() -> None:
    assert affinity.describe(affinity.rank_cores(LUMI, 2)) == \
        "rank 0 cores 49-55, rank 1 cores 57-63"
    assert affinity.describe([]) == ""
