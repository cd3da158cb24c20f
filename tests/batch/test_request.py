"""What ``invoke job`` is asked for: the request checks its own values by the flags' rules and
asks its kind (resolved once) what it takes; ``job.json`` gives back the request it describes."""

from __future__ import annotations

import pytest

from containers.batch.request import (JobRequest, RecordOptionsError, job_options,
                                      request_from_record)
from containers.errors import UsageError
from containers.inputs import flags
from containers.prove import registry
from containers.prove.registry import kind_of
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions
from containers.records import Malformed


# ------------------------------------------------------------- one validation layer
@pytest.mark.parametrize("account", ["proj@x", "-proj", "a b", "."])
def test_the_request_refuses_an_account_as_the_flag_does(account: str) -> None:
    """``--account proj@x`` and ``-proj`` are refused by the request as by the flag (one rule:
    :data:`containers.inputs.flags.ACCOUNT`), whoever builds it."""
    with pytest.raises(UsageError) as refused:
        JobRequest(kind=kind_of("smoke"), account=account)
    with pytest.raises(UsageError) as flagged:
        flags.ACCOUNT("--account", account)
    assert str(refused.value) == str(flagged.value)


def test_the_request_turns_the_flags_text_into_its_values_once() -> None:
    """invoke job hands its flags over as invoke gives them (text): the request's declarations
    convert each, and the run options given by name become the kind's options."""
    request = JobRequest(kind=kind_of("smoke"), nodes="2", gpus_per_node="4", time="01:30:00",
                         options={"iters": "7"})
    assert (request.nodes, request.gpus_per_node, request.time) == (2, 4, 5400)
    assert request.options == SmokeOptions(gpus=4, iters=7)
    with pytest.raises(UsageError, match="^--nodes takes a whole number >= 1 \\(got 'two'\\)"):
        JobRequest(kind=kind_of("smoke"), nodes="two")


def test_the_request_refuses_a_qos_that_is_an_option() -> None:
    """(A directive is judged where the site's scheduler is known: test_directives.py.)"""
    with pytest.raises(UsageError, match=r"^--qos .*\(got '--x'\)"):
        JobRequest(kind=kind_of("smoke"), qos="--x")


def test_the_kind_decides_the_command_and_the_nodes() -> None:
    assert JobRequest(kind=registry.RUN, command=("python", "x.py")).command == (
        "python", "x.py")
    with pytest.raises(UsageError, match="a command after -- goes with --workload run, not "
                                         "--workload smoke"):
        JobRequest(kind=kind_of("smoke"), command=("hostname",))
    with pytest.raises(UsageError, match=r"a build job runs on one node \(got --nodes 2\)"):
        JobRequest(kind=kind_of("build"), nodes=2)


def test_a_record_gives_back_its_request_with_its_options() -> None:
    options = TrainOptions(example="ddp", gpus=4, epochs=3)
    record = {"target": "cpu", "site": "local-slurm", "workload": "ddp", "nodes": 2,
              "gpus_per_node": 4, "launcher": "torchrun", "options": job_options(options)}
    ddp = kind_of("ddp")
    request = request_from_record(record, ddp)
    assert (request.nodes, request.launcher, request.options) == (2, "torchrun", options)
    with pytest.raises(Malformed, match="^job.json: key 'options': Input should be a valid "
                                        "dictionary"):
        request_from_record({**record, "options": [1]}, ddp)
    with pytest.raises(RecordOptionsError, match="options are not the job's"):
        request_from_record({**record, "options": {"iters": 3}}, ddp)
