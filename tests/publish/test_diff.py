"""What ``invoke diff`` and the release gate print: values as people read them."""

from __future__ import annotations

from containers.publish import diff as diffing


def _side(name: str, stack: dict, smoke: dict | None, labels: dict) -> dict:
    return {"name": name, "stack": stack, "packages": {"pip:torch": "2.7"}, "labels": labels,
            "size_bytes": 10, "smoke": smoke}


def test_no_python_none_or_dict_text_in_the_lines() -> None:
    smoke = {"passed": True, "busbw": None, "bytes": None, "site": "local", "partition": None,
             "ranks": 2, "date": None}
    result = diffing.diff(_side("a", {"cuda": None, "nccl": "2.21"}, smoke, {"x": {"k": 1}}),
                          _side("b", {"cuda": "12.4", "nccl": None}, None, {"x": {"k": 2}}))
    text = "\n".join(diffing.lines(result))
    assert "None" not in text and "{" not in text and "'" not in text, text
    assert "  stack cuda: - -> 12.4" in text and "  stack nccl: 2.21 -> -" in text
    assert "  label x: k 1 -> k 2" in text
    assert "  smoke (old): PASS, busbw - GB/s at - B (site local, 2 ranks, -)" in text


def test_shown() -> None:
    assert diffing.shown(None) == "-" and diffing.shown({}) == "-"
    assert diffing.shown({"deb": 3, "pypi": None}) == "deb 3, pypi -"
    assert diffing.shown(["a", None]) == "a, -" and diffing.shown(0) == "0"
