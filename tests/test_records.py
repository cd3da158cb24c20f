"""containers/records.py: files earlier versions wrote still read (tests/fixtures/records/, in
the shape each writer writes, without ``schema``), the writer adds the version and keeps every
key, and the models are strict: a wrong type, a NaN, a negative size or a newer version is one
line naming the file and the dotted key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from containers import records
from containers.image import provenance
from containers.publish import catalogue as cat
from containers.records import (BuildRecord, CatalogueEntry, JobRecord, Malformed, RunStatus,
                                SmokeReport, Verdict)
from tests.fixtures import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "records"
SHA = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
MODELS = (BuildRecord, CatalogueEntry, JobRecord, Verdict, SmokeReport, RunStatus)


def test_todays_build_record_reads_as_version_1() -> None:
    record = provenance.read(FIXTURES / "cpu.sif.json")
    assert (record.schema_, record.target, record.sha256, record.arch) == \
        (1, "cpu", SHA, "x86_64")
    assert (record.tested, record.squashfs, record.stack["python"]) == (True, "gzip", "3.11.9")
    assert record.as_dict()["fit"] == {"site": "local", "findings": []}, "unknown keys are kept"
    assert provenance.read(FIXTURES / "none.sif.json") == BuildRecord(), "no file: an empty one"


def test_todays_job_record_reads_and_renders_as_it_was_written() -> None:
    text = (FIXTURES / "job.json").read_text().strip()
    record = JobRecord.of(json.loads(text), source="job.json")
    assert (record.schema_, record.workload, record.nodes, record.transport) == \
        (1, "smoke", 1, "socket")
    with pytest.raises(Malformed, match="^job.json: key 'site': Field required$"):
        JobRecord.of({"target": "cpu"}, source="job.json")
    assert record.as_json() == text, "the job script's line is version 1's, byte for byte"


def test_todays_verdict_reads() -> None:
    record = Verdict.of(json.loads((FIXTURES / "verdict.json").read_text()), source="v")
    assert (record.schema_, record.kind, record.sha256, record.ranks, record.passed) == \
        (1, "smoke", SHA, 2, True)
    assert record.collectives["all_reduce"].wrong_total == 0 and record.reasons == []
    assert record.performance.state == "pass"


def test_a_run_status_from_before_runs_named_their_image_reads() -> None:
    """It reads (version 1) and names no image, so it proves none (publish's rule)."""
    record = RunStatus.of(json.loads((FIXTURES / "status.json").read_text()), source="s")
    assert (record.schema_, record.command, record.exit_status, record.sha256, record.date) == \
        (1, ["python", "-c", "print(1)"], 0, None, None)


def test_todays_catalogue_entry_reads() -> None:
    data = cat.load(FIXTURES / "catalogue.json")
    entry = cat.find(data, "cpu", "2026.11.21-1e9c228c")
    assert isinstance(entry, CatalogueEntry)
    assert (entry.schema_, entry.file, entry.sha256, entry.signed) == \
        (1, "cpu/2026.11.21-1e9c228c.sif", SHA, False)
    assert entry.provenance.tested is True


@pytest.mark.parametrize("name", ["allreduce.json", "all_reduce.json"])
def test_todays_smoke_reports_read(name: str) -> None:
    report = SmokeReport.of(json.loads((FIXTURES / name).read_text()), source=name)
    assert (report.ok, report.wrong_total, report.world_size, report.rows()[0].bytes) == \
        (True, 0, 2, 1024)


def test_the_writer_adds_the_version_first_and_keeps_every_key(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "verdict.json").read_text())
    written = records.write(tmp_path / "verdict.json", data, Verdict)
    again = json.loads((tmp_path / "verdict.json").read_text())
    assert list(again)[0] == "schema" and again == {"schema": Verdict.SCHEMA, **data}
    assert Verdict.of(again, source="v").sha256 == written.sha256 == SHA


@pytest.mark.parametrize("model", MODELS)
def test_records_are_frozen_models_not_mappings(model: type) -> None:
    made = model.model_construct()
    assert not isinstance(made, Mapping)
    with pytest.raises(Exception, match="frozen"):
        made.target = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        made["target"]  # type: ignore[index]


@pytest.mark.parametrize(("model", "data", "key"), [
    (BuildRecord, {"tested": "yes"}, "tested"),
    (BuildRecord, {"size_bytes": -1}, "size_bytes"),
    (BuildRecord, {"size_bytes": True}, "size_bytes"),
    (BuildRecord, {"labels": {"containers.target": 1}}, "labels.containers.target"),
    (CatalogueEntry, {"provenance": {"sha256": 5}}, "provenance.sha256"),
    (Verdict, {"ranks": "2"}, "ranks"),
    (Verdict, {"performance": {"message": "no state"}}, "performance.state"),
    (SmokeReport, {"results": [{"bytes": 8, "oop": {"busbw": -1.0}}]}, "results.0.oop.busbw"),
    (SmokeReport, {"results": [{"oop": {}}]}, "results.0.bytes"),
    (JobRecord, {**json.loads((FIXTURES / "job.json").read_text()), "options": []}, "options"),
    (RunStatus, {"exit_status": "0"}, "exit_status"),
    (RunStatus, {"command": "true"}, "command"),
    (CatalogueEntry, {"checks": {"run": {"sha256": 5}}}, "checks.run.sha256"),
])
def test_a_wrong_type_is_one_line_naming_file_and_key(model: type, data: dict,
                                                       key: str) -> None:
    with pytest.raises(Malformed,
                       match=rf"^f\.json: key '{re.escape(key)}': [^(]+( \(got .+\))?$"):
        model.of(data, source="f.json")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize(("model", "data", "key"), [
    (BuildRecord, lambda v: {"arch": v}, "arch"),
    (BuildRecord, lambda v: {"build_seconds": v}, "build_seconds"),
    (Verdict, lambda v: {"seconds": 1.0, "kept": [1, {"x": v}]}, "kept.1.x"),
    (SmokeReport, lambda v: {"results": [{"bytes": 8, "oop": {"busbw": v}}]},
     "results.0.oop.busbw"),
])
def test_no_number_is_nan_or_infinite(model: type, data, key: str, value: float) -> None:
    with pytest.raises(Malformed, match=rf"^f\.json: key '{re.escape(key)}': Input should be a "
                                        r"(finite number|valid string) \(got -?(nan|inf)\)$"):
        model.of(data(value), source="f.json")


def test_a_build_record_with_a_nan_arch_is_refused(tmp_path: Path) -> None:
    """The file as JSON gives it (``NaN`` is what Python's json writes and reads)."""
    path = tmp_path / "cpu.sif.json"
    path.write_text('{"sha256": "%s", "arch": NaN}' % SHA)
    with pytest.raises(Exception, match=rf"^the image record {path} is unreadable: key 'arch': "
                                        r"Input should be a valid string \(got nan\); rebuild"):
        provenance.read(path)


def test_other_versions_and_shapes_are_refused() -> None:
    with pytest.raises(Malformed, match=r"^v: key 'schema' is 9; this checkout reads verdict "
                                        r"versions 1 to 2$"):
        Verdict.of({"schema": 9}, source="v")
    with pytest.raises(Malformed, match=r"^j: the job record is not a JSON object$"):
        JobRecord.of([], source="j")


def test_the_in_image_writer_writes_the_smoke_reports_version() -> None:
    """jobs/allreduce.py imports nothing of the engine: its number is kept equal here."""
    text = (ROOT / "jobs" / "allreduce.py").read_text()
    assert re.search(rf"^REPORT_SCHEMA = {SmokeReport.SCHEMA}$", text, re.M)
    assert '"schema": REPORT_SCHEMA' in text


def test_a_smoke_report_a_run_left_partial_reads_with_defaults() -> None:
    partial = SmokeReport.of({"results": [{"op": "all_reduce", "bytes": 1024,
                                           "oop": {"wrong": 0}}], "cycles": 3,
                              "backend": "gloo"})
    assert (partial.rows()[0].bytes, partial.cycles, partial.finished, partial.ops,
            partial.nodes, partial.ok) == (1024, 3, None, None, 1, False)


def test_a_catalogue_entrys_checks_and_gate_record_are_typed() -> None:
    entry = CatalogueEntry.of({"checks": {"skipped": False, "apptainer_test": {"passed": True},
                                          "smoke": {"passed": True, "ranks": 2, "performance": {
                                              "state": "pass", "measured": 1.5,
                                              "reference": {"bytes": 4096, "lower": -0.05}}}},
                               "gate": {"against": "1", "accepted": {"why": "x",
                                                                     "problems": ["slow"]}}})
    assert entry.checks.smoke.performance.reference.lower == -0.05
    assert (entry.checks.apptainer_test.passed, entry.gate.accepted.problems) == (True, ["slow"])
    for bad, key in (({"checks": {"skipped": "no"}}, "checks.skipped"),
                     ({"checks": {"smoke": {"ranks": -2}}}, "checks.smoke.ranks"),
                     ({"gate": {"accepted": {"problems": "slow"}}}, "gate.accepted.problems")):
        with pytest.raises(Malformed, match=rf"^c: key '{re.escape(key)}': "):
            CatalogueEntry.of(bad, source="c")


def test_a_record_nested_too_deep_is_one_line() -> None:
    deep = json.loads('{"checks": {"smoke": {"x": ' + '{"a": ' * 900 + "1" + "}" * 903)
    with pytest.raises(Malformed, match=r"^catalogue.json: key 'checks\.smoke\.x\.a\.a[.a]*': "
                                        "Recursion error - maximum validation depth exceeded"):
        CatalogueEntry.of(deep, source="catalogue.json")


def test_a_run_jobs_verdict_reads(tmp_path: Path) -> None:
    """jobs/runverdict.py writes it in the image, in its own shape (``transport.proven``)."""
    out = subprocess.run([sys.executable, str(ROOT / "jobs" / "runverdict.py"), "--out",
                          str(tmp_path), "--exit-status", "0", "--gate", "none",
                          "--transport-name", "Slingshot", "--transport-expect", "cxi"],
                         capture_output=True, text=True, check=False)
    record = Verdict.of(json.loads((tmp_path / "verdict.json").read_text()), source="v")
    assert (record.kind, record.passed, record.exit_code) == ("run", False, 2), out.stdout
