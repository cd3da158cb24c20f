"""The perflog: one JSON line per smoke run, read back as a history table and a PNG."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from containers.errors import ConfigError, StateError
from containers.prove import perflog


def _record(date: str, inputs_hash: str, busbw: float, passed: bool = True) -> dict:
    return {"date": date, "site": "lumi", "partition": "standard-g", "target": "lumi-rocm",
            "inputs_hash": inputs_hash, "build_date": date, "ranks": 8, "nodes": 1,
            "passed": passed, "results": [{"bytes": 1 << 20, "busbw_oop": 50.0},
                                          {"bytes": 128 << 20, "busbw_oop": busbw}],
            "performance": {"state": "pass", "reference": {
                "bytes": 128 << 20, "value": 125.0, "unit": "GB/s"}}}


def test_perflog_accumulates_and_renders(tmp_path: Path) -> None:
    for record in (_record("2026-11-01T10:00:00Z", "a" * 64, 131.0),
                   _record("2026-11-02T10:00:00Z", "a" * 64, 129.5),
                   _record("2026-11-03T10:00:00Z", "b" * 64, 97.0, passed=False)):
        path = perflog.append(tmp_path, record)
    assert path == tmp_path / "lumi" / "standard-g" / "all_reduce.jsonl"
    assert len(path.read_text().splitlines()) == 3
    path.open("a").write("not json\n")
    records = perflog.read(tmp_path, target="lumi-rocm")
    assert [r["date"][:10] for r in records] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert perflog.read(tmp_path, target="cpu") == []
    table = perflog.history_rows(records)
    assert [row[8] for row in table] == ["131.000", "129.500", "97.000"]
    assert table[2][3] == "lumi-rocm bbbbbbbbbbbb (2026-11-03)" and table[2][10] == "FAIL"
    assert [row[7] for row in table] == ["128 MiB"] * 3 and table[0][11] == "PASS"
    assert [row[6] for row in table] == ["all_reduce"] * 3  # written before --op: all_reduce
    png = perflog.plot_history(records, tmp_path / "h.png", title="t")
    assert png.stat().st_size > 10_000
    assert json.loads(path.read_text().splitlines()[0])["inputs_hash"] == "a" * 64


def test_a_changed_stack_under_one_image_is_marked_with_its_cause(tmp_path: Path) -> None:
    stack = {"torch": "2.7.1+rocm6.3", "driver": "6.8.5", "net_plugin": "aws-ofi-rccl 1.4.0",
             "libfabric": "1.22.0", "runtime": "singularity 4.1.3"}
    upgraded = {**stack, "libfabric": "2.0.0", "driver": "6.10.5"}
    records = [{**_record("2026-11-01T10:00:00Z", "a" * 64, 131.0), "stack": stack},
               {**_record("2026-11-02T10:00:00Z", "a" * 64, 130.0), "stack": stack},
               {**_record("2026-11-03T10:00:00Z", "b" * 64, 129.0), "stack": upgraded},
               {**_record("2026-11-04T10:00:00Z", "a" * 64, 88.0), "stack": upgraded},
               {**_record("2026-11-05T10:00:00Z", "a" * 64, 87.0)}]  # written before stacks
    changed = [row[-1] for row in perflog.history_rows(records)]
    # A new image is not a stack change; the old image on the new stack is.
    assert changed == ["", "", "", "driver 6.8.5 -> 6.10.5; libfabric 1.22.0 -> 2.0.0", ""]
    assert perflog.HISTORY_COLUMNS[-1] == "stack changed"
    assert perflog.plot_history(records, tmp_path / "h.png", title="t").stat().st_size > 10_000


def test_a_record_after_a_torn_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = perflog.append(tmp_path, _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))
    with open(path, "a") as handle:
        handle.write('{"date": "2026-11-02T10:00:00Z", "site": "lu')  # a run killed mid-write
    assert [r["date"][:10] for r in perflog.read(tmp_path)] == ["2026-11-01"], "torn tail skipped"
    perflog.append(tmp_path, _record("2026-11-03T10:00:00Z", "a" * 64, 129.0))
    assert [r["date"][:10] for r in perflog.read(tmp_path)] == ["2026-11-01", "2026-11-03"]
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


def _dated(date: object) -> str:
    """A record of the right target whose date is ``date`` (missing when None)."""
    record = {k: v for k, v in _record("2026-11-02T10:00:00Z", "a" * 64, 1.0).items()
              if k != "date"}
    return json.dumps(record if date is None else {**record, "date": date})


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "7", "null", "[" * 100_000, "\udcff",
                                  _dated(None), _dated(5), _dated("yesterday"),
                                  _dated("2026-11-02T10:00:00"), _dated(["2026-11-02"])])
def test_lines_that_are_not_records_are_skipped(tmp_path: Path, line: str) -> None:
    path = perflog.append(tmp_path, _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))
    with open(path, "ab") as handle:
        handle.write(line.encode("utf-8", "surrogateescape") + b"\n")
    perflog.append(tmp_path, _record("2026-11-03T10:00:00Z", "a" * 64, 129.0))
    records = perflog.read(tmp_path, target="lumi-rocm")
    assert [r["date"][:10] for r in records] == ["2026-11-01", "2026-11-03"]
    assert len(perflog.history_rows(records)) == 2
    assert perflog.plot_history(records, tmp_path / "h.png", title="t").is_file()


@pytest.mark.parametrize("site,partition", [("lumi", "../../x"), ("../x", None),
                                            ("lumi", "a\nb")])
def test_a_perflog_never_lands_outside_its_folder(tmp_path: Path, site, partition) -> None:
    record = {**_record("2026-11-01T10:00:00Z", "a" * 64, 1.0), "site": site,
              "partition": partition}
    with pytest.raises(ConfigError, match="is not a usable (site|partition) name"):
        perflog.append(tmp_path / "perflog", record)
    assert not (tmp_path / "perflog").exists()
    record.update(site="lumi", partition=None)  # no partition: the log of the default one
    assert perflog.append(tmp_path, record) == tmp_path / "lumi" / "default" / "all_reduce.jsonl"


def test_only_runs_at_the_reference_size_are_plotted_with_band_and_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = {"bytes": 128 << 20, "value": 125.0, "lower": -0.05, "upper": None,
                 "unit": "GB/s", "source": "LUMI docs 2026"}
    full = _record("2026-11-01T10:00:00Z", "a" * 64, 131.0)
    full["performance"] = {"state": "pass", "reference": reference}
    quick = {**_record("2026-11-02T10:00:00Z", "a" * 64, 0.0),
             "results": [{"bytes": 256 << 10, "busbw_oop": 0.127}],
             "performance": {"state": "not-measured", "reference": reference}}
    records = [full, quick]
    # The quick run (256 KiB only) is listed, in IEC units, but not plotted against 128 MiB.
    assert perflog.plot_series(records) == {
        perflog.image_label(full): [(perflog.parse_date(full["date"]), 131.0, True)]}
    rows = perflog.history_rows(records)
    assert [(row[7], row[11], row[12]) for row in rows] == [
        ("128 MiB", "PASS", "yes"), ("256 KiB", "NOT-MEASURED", "no")]
    assert rows[0][9] == "125 GB/s at 128 MiB"
    assert [run["plotted"] for run in perflog.history_json(records)] == [True, False]
    import matplotlib.figure

    figures = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k))[1])
    perflog.plot_history(records, tmp_path / "h.png", title="t")
    (axes,) = figures[0].axes
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert "reference 125 GB/s at 128 MiB (LUMI docs 2026)" in labels
    assert "tolerance band" in labels
    plotted = [y for line in axes.get_lines() for y in line.get_ydata()
               if line.get_linestyle() != "--"]
    assert 0.127 not in plotted and 131.0 in plotted


def test_a_fifo_or_device_as_a_perflog_is_refused_in_one_line(tmp_path: Path) -> None:
    """A FIFO would hang --history forever, a link to /dev/zero grow its memory without end,
    and appending to a FIFO gave a traceback: each is one line naming the file."""
    path = perflog.log_path(tmp_path, site="lumi", partition="standard-g")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(StateError, match=rf"^perflog {path} is not a regular file \(a FIFO\)"):
        perflog.read(tmp_path)
    with pytest.raises(StateError, match=rf"^{path} is a FIFO, not a regular file; refusing to "
                                         "append to it"):
        perflog.append(tmp_path, _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))
    path.unlink()
    path.symlink_to("/dev/zero")
    with pytest.raises(StateError, match=r"is not a regular file \(a device\)"):
        perflog.read(tmp_path)
    with pytest.raises(StateError, match=r"is a symbolic link; refusing to write through it"):
        perflog.append(tmp_path, _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))
    assert Path("/dev/zero").is_char_device()


def test_a_read_only_perflog_folder_is_one_line(tmp_path: Path, factory_read_only) -> None:
    factory_read_only(tmp_path / "perflog")
    with pytest.raises(StateError, match=r"^cannot append to the perflog: .*perflog/lumi"):
        perflog.append(tmp_path / "perflog", _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))


def test_history_into_a_read_only_perflog_folder_is_one_line(data_root: Path, tmp_path: Path,
                                                             factory_read_only) -> None:
    """The table is read; the plot cannot be written: one line, no traceback."""
    from containers.app.project import Project
    from containers.app.workloads import smoke_history
    perflog_dir = tmp_path / "perflog"
    perflog.append(perflog_dir, _record("2026-11-01T10:00:00Z", "a" * 64, 131.0))
    factory_read_only(perflog_dir)
    project = Project.load(data_root, {"perflog_dir": str(perflog_dir)})
    with pytest.raises(StateError, match=r"^cannot write the history plot: "):
        smoke_history(project, target=None, say=lambda line: None)


def test_each_collective_has_its_log_and_the_old_log_of_all_is_still_read(tmp_path: Path) -> None:
    """Logs named per collective, as its results (``<op>.json``) and plots (``<op>.png``) are;
    the one ``allreduce.jsonl`` of every op that earlier versions wrote still reads, by op."""
    gather = {**_record("2026-11-02T10:00:00Z", "a" * 64, 60.0), "op": "all_gather"}
    assert perflog.append(tmp_path, gather) == tmp_path / "lumi" / "standard-g" / \
        "all_gather.jsonl"
    old = tmp_path / "lumi" / "standard-g" / perflog.OLD_LOG_NAME
    old.write_text("".join(json.dumps(record) + "\n" for record in (
        _record("2026-11-01T10:00:00Z", "a" * 64, 131.0),
        {**_record("2026-11-01T11:00:00Z", "a" * 64, 50.0), "op": "alltoall"})))
    assert [r.get("op") for r in perflog.read(tmp_path)] == [None, "alltoall", "all_gather"]
    again = {**gather, "op": "all_reduce"}  # one run's lines (one date) in the ops' order
    perflog.append(tmp_path, again)
    assert [r.get("op") for r in perflog.read(tmp_path)][-2:] == ["all_reduce", "all_gather"]
    assert [r["op"] for r in perflog.read(tmp_path, ops=["alltoall", "all_gather"])] == \
        ["alltoall", "all_gather"]
    with pytest.raises(StateError, match="unknown collective 'allgather'"):
        perflog.append(tmp_path, {**gather, "op": "allgather"})
