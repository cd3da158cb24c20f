"""The software stack a run ran on (from the ranks' device reports, NCCL's log and the runtime)
and what changed between two runs of one image."""

from __future__ import annotations

from containers.host.runtime import Runtime
from containers.prove import stack

RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


def test_the_stack_joins_what_ranks_disagree_on() -> None:
    reports = [{"torch": "2.5.1", "build": "cuda", "cuda": "12.4", "driver": "550.54",
                "name": "NVIDIA H100"},
               {"torch": "2.5.1", "build": "cuda", "cuda": "12.4", "driver": "560.35",
                "name": "NVIDIA H100", "hip": None, "nccl": ""}]
    found = stack.of_run(reports, [], runtime=RUNTIME)
    assert found == {"torch": "2.5.1", "build": "cuda", "cuda": "12.4",
                     "driver": "550.54 / 560.35", "devices": "NVIDIA H100",
                     "runtime": "apptainer 1.4.5"}


def test_changes_name_each_compared_part_and_skip_old_records() -> None:
    before = {"torch": "2.5.1", "driver": "550.54", "devices": "a", "runtime": "apptainer 1.4"}
    after = {"torch": "2.5.1", "driver": "560.35", "devices": "a / b", "net_plugin": "ofi",
             "runtime": "apptainer 1.4"}
    assert stack.changes(before, after) == ["driver 550.54 -> 560.35", "net_plugin - -> ofi"]
    assert stack.changes(None, after) == [] and stack.changes(before, {}) == []
