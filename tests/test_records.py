"""containers/records.py: files today's code writes still read (tests/fixtures/records/, written
by hand in the shape each writer writes, without ``schema``), the writer adds the version, a
malformed file is refused in one line naming the file and the key, and no code outside the
module reads a record by key (tests/recordreads.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from containers import records
from containers.image import provenance
from containers.publish import catalogue as cat
from containers.records import (BuildRecord, CatalogueEntry, JobRecord, Malformed, Refused,
                                SmokeReport, Verdict, read_smoke)
from tests.fixtures import ROOT
from tests.recordreads import keyed_reads

FIXTURES = ROOT / "tests" / "fixtures" / "records"
SHA = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"


def test_todays_build_record_reads_as_version_1() -> None:
    record = provenance.read(FIXTURES / "cpu.sif.json")
    assert (record.schema, record.target, record.sha256, record.arch) == (1, "cpu", SHA, "x86_64")
    assert (record.tested, record.squashfs, record.stack["python"]) == (True, "gzip", "3.11.9")
    assert record["fit"] == {"site": "local", "findings": []}, "keys it does not name are kept"
    assert not provenance.read(FIXTURES / "none.sif.json"), "no file: an empty record"


def test_todays_job_record_reads_and_renders_as_it_was_written() -> None:
    text = (FIXTURES / "job.json").read_text().strip()
    record = records.parse(text, JobRecord, source="job.json")
    assert (record.schema, record.workload, record.nodes, record.transport) == \
        (1, "smoke", 1, "socket")
    assert record.missing() == [] and JobRecord.of({"target": "cpu"}).missing()[0] == "site"
    assert record.as_json() == text, "the job script's line is version 1's, byte for byte"


def test_todays_verdict_reads() -> None:
    record = records.parse((FIXTURES / "verdict.json").read_text(), Verdict, source="v")
    assert (record.schema, record.kind, record.sha256, record.ranks, record.passed) == \
        (1, "smoke", SHA, 2, True)
    assert record.collectives["all_reduce"]["wrong_total"] == 0 and record.reasons == []


def test_todays_catalogue_entry_reads() -> None:
    data = cat.load(FIXTURES / "catalogue.json")
    entry = cat.find(data, "cpu", "2026.11.21-1e9c228c")
    assert isinstance(entry, CatalogueEntry)
    assert (entry.schema, entry.file, entry.sha256, entry.signed) == \
        (1, "cpu/2026.11.21-1e9c228c.sif", SHA, False)
    assert BuildRecord.view(entry.provenance).tested is True


@pytest.mark.parametrize("name", ["allreduce.json", "all_reduce.json"])
def test_todays_smoke_reports_read(name: str) -> None:
    report = read_smoke(FIXTURES / name)
    assert (report.ok, report.wrong_total, report.world_size) == (True, 0, 2)


def test_the_writer_adds_the_version_first_and_keeps_every_key(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "verdict.json").read_text())
    written = records.write(tmp_path / "verdict.json", data, Verdict)
    again = json.loads((tmp_path / "verdict.json").read_text())
    assert list(again)[0] == "schema" and again == {"schema": Verdict.SCHEMA, **data}
    assert records.parse((tmp_path / "verdict.json").read_text(), Verdict,
                         source="v").sha256 == written.sha256 == SHA


def test_a_malformed_record_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "cpu.sif.json"
    path.write_text(json.dumps({"sha256": SHA, "tested": "yes"}))
    with pytest.raises(Malformed, match=rf"^{path}: key 'tested' is 'yes', not bool$"):
        BuildRecord.of(json.loads(path.read_text()), source=path)
    with pytest.raises(Exception, match=rf"^the image record {path} is unreadable: key "
                                        r"'tested' is 'yes', not bool; rebuild"):
        provenance.read(path)
    with pytest.raises(Malformed, match=r"^v: key 'schema' is 9; this checkout reads verdict "
                                        r"versions 1 to 2$"):
        Verdict.of({"schema": 9}, source="v")
    with pytest.raises(Malformed, match=r"^j: the job record is not a JSON object$"):
        JobRecord.of([], source="j")


def test_a_smoke_report_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "allreduce.json").write_text(json.dumps({"schema": 3, "ok": True}))
    with pytest.raises(Refused, match="^allreduce.json: schema is 3; this checkout reads"):
        read_smoke(tmp_path / "allreduce.json")


def test_the_in_image_writer_writes_the_smoke_reports_version() -> None:
    """jobs/allreduce.py imports nothing of the engine: its number is kept equal here."""
    text = (ROOT / "jobs" / "allreduce.py").read_text()
    assert re.search(rf"^REPORT_SCHEMA = {SmokeReport.SCHEMA}$", text, re.M)
    assert '"schema": REPORT_SCHEMA' in text


def test_a_run_report_reads_what_a_run_left_partial_or_none() -> None:
    """The smoke report as a run that died after one size left it, and no report at all."""
    partial = records.RunReport.of({"results": [{"op": "all_reduce", "bytes": 1024}],
                                    "cycles": 3, "ops": "all_reduce", "backend": "gloo"})
    assert (partial.rows[0]["bytes"], partial.cycles, partial.finished, partial.ops,
            partial.nodes, partial.backend) == (1024, 3, None, None, 1, "gloo")
    none = records.RunReport.of(None)
    assert (none.raw, none.rows, none.cycles, none.collectives) == (None, (), 1, {})


def test_no_keyed_reads_of_the_records_outside_records() -> None:
    """Base 5080f48 had 119 (the same count on its tree), and 10 more of a run's report once
    ``.report`` was counted (e4d5720); see tests/recordreads.py for what the count covers."""
    assert keyed_reads(ROOT) == []


def test_the_count_can_fail(tmp_path: Path) -> None:
    (tmp_path / "containers" / "publish").mkdir(parents=True)
    (tmp_path / "containers" / "publish" / "m.py").write_text(
        "def f(plan, entry: dict):\n"
        "    record = provenance.read(path)\n"
        "    a = record['sha256'], plan.provenance.get('arch'), entry['file']\n"
        "    for e in cat.entries(data, 'cpu'):\n"
        "        b = e.get('version')\n"
        "    return record.sha256, other['sha256']\n")
    assert keyed_reads(tmp_path) == [
        "containers/publish/m.py:3: arch", "containers/publish/m.py:3: file",
        "containers/publish/m.py:3: sha256", "containers/publish/m.py:5: version"]
