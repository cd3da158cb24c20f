"""``invoke publish``'s project side: a blank reason to accept a regression is refused before
anything runs, the quick check publishing falls back on is a short 2-rank smoke of the image, and
the release gate's verdict on what it found (the whole publish, with a real image:
tests/publish/test_release_image.py)."""

from __future__ import annotations

import getpass
import importlib
from types import SimpleNamespace

import pytest

from containers.errors import UsageError, VerdictFailed

#: The module itself (``containers.app.publishing``; the package exports its commands).
publishing = importlib.import_module("containers.app.publishing")


@pytest.mark.parametrize("why", ["", "   "])
def test_accepting_a_regression_needs_a_reason(data_project, why) -> None:
    with pytest.raises(UsageError, match="say why the regression is accepted") as refused:
        publishing.publish(data_project, target="cpu", dest="/nonexistent", accept_regression=why)
    assert refused.value.flag == "--accept-regression"


def test_the_quick_check_is_a_short_two_rank_smoke_of_the_target(data_project,
                                                                 monkeypatch) -> None:
    calls: list = []
    monkeypatch.setattr(publishing, "prove", lambda project, **kw: calls.append((project, kw)))
    lines: list[str] = []
    publishing.quick_smoke(data_project, data_project.target("cpu"))(lines.append)
    assert lines == ["quick check: a 2-rank smoke test of cpu"]
    [(project, options)] = calls
    assert project is data_project and options["target"] == "cpu"
    assert options["options"] is publishing.QUICK_SMOKE
    assert (publishing.QUICK_SMOKE.gpus, publishing.QUICK_SMOKE.iters) == (2, 3)


PLAN = SimpleNamespace(target=SimpleNamespace(name="cpu"), version="2.0")


def test_a_gate_with_no_problems_records_nothing() -> None:
    lines: list[str] = []
    assert publishing.accepted(PLAN, [], None, lines.append) == {}
    assert publishing.accepted(PLAN, [], "why not", lines.append) == {}
    assert lines == []


def test_problems_refuse_the_version_unless_accepted_and_the_acceptance_is_recorded() -> None:
    problems = ["site fit: glibc too old", "busbw fell from 100 to 90 GB/s"]
    with pytest.raises(VerdictFailed) as refused:
        publishing.accepted(PLAN, problems, None, print)
    assert str(refused.value) == (
        "not publishing cpu 2.0: site fit: glibc too old; busbw fell from 100 to 90 GB/s; "
        "publish with --accept-regression \"WHY\" to release it anyway (recorded in the "
        "catalogue)")
    lines: list[str] = []
    record = publishing.accepted(PLAN, problems, "known slow node", lines.append)["accepted"]
    assert (record["why"], record["problems"]) == ("known slow node", problems)
    assert record["by"].startswith(f"{getpass.getuser()}@") and record["date"]
    assert lines == [f"gate: ACCEPTED by {record['by']}: known slow node "
                     "(site fit: glibc too old; busbw fell from 100 to 90 GB/s)"]


def test_a_first_version_has_nothing_to_compare_with(tmp_path) -> None:
    plan = SimpleNamespace(target=PLAN.target, version="1.0", dest=tmp_path)
    lines: list[str] = []
    assert publishing._against_latest(plan, None, {}, {}, lines.append) == (
        {"against": None}, None, [])
    assert lines == ["gate: no published latest of cpu to compare with"]
