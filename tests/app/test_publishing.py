"""``invoke publish``'s project side: a blank reason to accept a regression is refused before
anything runs, and the quick check publishing falls back on is a short 2-rank smoke of the image
(the release gate's verdict: tests/publish/test_decision.py; the whole publish, with a real image:
tests/publish/test_release_image.py)."""

from __future__ import annotations


import pytest

from containers.app import publishing
from containers.errors import UsageError


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
