"""A workload kind's part of a run: its options become the script's arguments, binds and
environment, and the one plan path (``kind.plan``) puts them into the exact argv; the base kind
answers the gates with nothing of its own."""

from __future__ import annotations

import pytest

from containers.errors import ConfigError, UsageError
from containers.inputs.sites import load_sites
from containers.prove.kind import Invocation, WorkloadKind, plan
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from tests.fixtures.data import load_targets, pin_torch


@pytest.fixture
def data_cpu(data_world):
    targets, sites = data_world
    return targets["cpu"], sites["local"]


def test_the_plan_is_the_kinds_script_with_its_arguments(data_cpu, data_settings,
                                                         data_runtime) -> None:
    target, site = data_cpu
    workload = plan(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                    options=SmokeOptions(gpus=2, iters=3, extra_env={"X": "1"}))
    assert workload.out_dir == data_settings.results_dir / "smoke" / "cpu-r"
    assert workload.launch.script == "/opt/containers/jobs/allreduce.py"
    assert workload.launch.args[:4] == ("--sizes", "1K:128M", "--iters", "3")
    assert workload.launch.env["X"] == "1" and workload.report_name == "allreduce.json"
    train = plan(target, site, settings=data_settings, runtime=data_runtime, run_id="r",
                 options=TrainOptions(example="fsdp", gpus=2))
    assert train.out_dir.parent.name == "train-fsdp" and train.report_name == "train.json"


def test_an_example_the_images_torch_cannot_run_is_refused(data_settings, data_runtime,
                                                          factory_project) -> None:
    """compat.check_example runs for any kind whose options name an example."""
    root = factory_project()
    pin_torch(root, "2.1.0")  # FSDP2's fully_shard came later
    targets = load_targets(root)
    with pytest.raises((ConfigError, UsageError), match="fsdp"):
        plan(targets["lumi-rocm"], load_sites(root)["lumi"], settings=data_settings,
             runtime=data_runtime, run_id="r", options=TrainOptions(example="fsdp", gpus=8))


def test_the_base_kind_has_no_rules_of_its_own() -> None:
    kind = WorkloadKind()
    with pytest.raises(NotImplementedError):
        kind.launch(SmokeOptions(gpus=1), site=None, settings=None, nodes=1)  # type: ignore
    assert kind.failures(None) == [] and kind.performance(None) is None  # type: ignore
    assert kind.perflog_records({"a": 1}) == []
    assert Invocation(args=["--x"]).binds == [] and Invocation(args=[]).env == {}


def test_the_results_folder_is_named_by_the_kind_not_its_announcement() -> None:
    class Renamed(WorkloadKind):
        name = "smoke"

        def title(self, options) -> str:  # type: ignore[override]
            return "all-reduce smoke test"

    assert Renamed().folder(SmokeOptions(gpus=1)) == "smoke"
    train = TrainOptions(example="ddp", gpus=1)
    assert train.kind.folder(train) == "train-ddp" and train.kind.title(train) == "train ddp"
