"""The training report's one shape: what train.py writes is what the judge reads, and anything
else is refused naming the key (jobs/trainreport.py, standard library only)."""

from __future__ import annotations

import json

import pytest

from containers.prove.train import TrainReport as HostReport
from tests.fixtures.reports import train_report
from tests.jobs.scripts import JOBS, sibling

trainreport = sibling("trainreport")


def test_a_written_report_reads_back_the_same() -> None:
    written = json.loads(json.dumps(train_report()))
    report = trainreport.TrainReport.from_dict(written)
    assert report.as_dict() == written
    assert isinstance(report.fast_path, trainreport.FastPath)


def test_the_judge_reads_the_file_the_workload_writes_with() -> None:
    """The host loads jobs/trainreport.py itself: one declaration of the shape, no copy."""
    import inspect

    assert inspect.getsourcefile(HostReport) == str(JOBS / "trainreport.py")


@pytest.mark.parametrize("change, message", [
    (dict(parameters=True), "train.json: parameters is bool, not int"),
    (dict(lr="0.1"), "train.json: lr is str, not float or null"),
    (dict(example=None), "train.json: example is null"),
    (dict(fast_path=[]), "train.json: fast_path is not an object"),
    (dict(fast_path={"channels_last": True}), "train.json: fast_path lacks autocast, "
                                               "data_on_device, compile, compile_s, host_sync"),
    (dict(final={"loss": 1, "accuracy": 1, "val_loss": 1, "val_accuracy": "x"}),
     "train.json: final: val_accuracy is str, not float"),
])
def test_anything_else_is_refused_naming_the_key(change, message) -> None:
    with pytest.raises(trainreport.ReportError) as refused:
        trainreport.TrainReport.from_dict(train_report(**change))
    assert str(refused.value) == message


def test_a_report_is_an_object_with_every_key() -> None:
    with pytest.raises(trainreport.ReportError, match="^train.json is not an object$"):
        trainreport.TrainReport.from_dict([1])
    partial = train_report()
    del partial["ok"], partial["finished"]
    with pytest.raises(trainreport.ReportError, match="^train.json lacks ok, finished$"):
        trainreport.TrainReport.from_dict(partial)


def test_update_takes_only_fields_of_the_shape() -> None:
    report = trainreport.TrainReport.from_dict(train_report())
    report.update(zero_stage=3, ds_config="/x.json")
    assert (report.zero_stage, report.ds_config) == (3, "/x.json")
    with pytest.raises(TypeError, match="not fields of the training report: zero_stag"):
        report.update(zero_stag=3)
