"""Wall times: every form Slurm's --time takes (PBS's HH:MM:SS among them) read into seconds, and
seconds written back as HH:MM:SS; nonsense and zero refused with the reason."""

from __future__ import annotations

import pytest

from containers import walltime


@pytest.mark.parametrize("text, seconds", [
    ("01:30:00", 5400), ("72:00:00", 259200), ("00:00:01", 1),
    ("1-00:00:00", 86400), ("2-12", 216000), ("1-02:30", 95400),
    ("90:00", 5400),   # MM:SS
    ("30", 1800),      # minutes, as sbatch reads a bare number
])
def test_parse(text, seconds) -> None:
    assert walltime.parse(text) == seconds


@pytest.mark.parametrize("text, reason", [
    ("00:00:00", "is zero"), ("0", "is zero"), ("1h", "is not a time"), ("", "is not a time"),
    ("1:60:00", "minutes and seconds must be 0-59"), ("00:00:75", "0-59"),
    ("1-24:00:00", "hours after a day count must be 0-23"), ("-5", "is not a time"),
])
def test_parse_refuses_with_a_reason(text, reason) -> None:
    with pytest.raises(ValueError, match=reason):
        walltime.parse(text)


def test_format_round_trips() -> None:
    assert walltime.format(900) == "00:15:00"
    assert walltime.format(129600) == "36:00:00"
    for text in ("00:15:00", "36:00:00", "168:00:00"):
        assert walltime.format(walltime.parse(text)) == text
    with pytest.raises(ValueError):
        walltime.format(0)
