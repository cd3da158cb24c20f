"""Declarative checks of YAML mappings: unknown keys with a suggestion, types, choices, defaults."""

from __future__ import annotations

from typing import Literal

import pytest

from containers.errors import ConfigError, Problems, UsageError
from containers.inputs.schema import (Declared, Int, Str, StrList, check_name, name_problem, pick,
                                      suggest, validate_model)
from containers.inputs.yamlsource import load_yaml_text


class Thing(Declared):
    name: Str
    count: Int = 1
    mode: Literal["a", "b"] = "a"
    tags: StrList = []


def test_defaults_filled_and_values_kept() -> None:
    data = load_yaml_text("name: x\ntags: [p, q]\nmode: null\n")
    assert dict(validate_model(Thing, data, path=None, what="thing")) == {
        "name": "x", "count": 1, "mode": "a", "tags": ["p", "q"]}


@pytest.mark.parametrize("text,message", [
    ("name: x\ncuont: 2\n", "f.yaml:2: cuont: unknown key in thing (did you mean 'count'?)"),
    ("count: 2\n", "f.yaml:1: name: required key missing from thing"),
    ("name: x\ncount: two\n", "f.yaml:2: count: must be an integer, got str"),
    ("name: x\nmode: c\n", "f.yaml:2: mode: 'c' is not one of: a, b"),
    ("- a\n", "f.yaml:1: thing must be a mapping"),
])
def test_each_problem_names_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_model(Thing, load_yaml_text(text), what="thing", path="f.yaml")
    assert str(info.value).startswith(message)


def test_every_bad_key_of_a_mapping_at_once() -> None:
    text = "cuont: 2\nmode: c\ntags: 3\n"
    with pytest.raises(Problems) as info:
        validate_model(Thing, load_yaml_text(text), what="thing", path="f.yaml")
    assert str(info.value).splitlines() == [
        "f.yaml:1: cuont: unknown key in thing (did you mean 'count'?)",
        "f.yaml:1: name: required key missing from thing",
        "f.yaml:2: mode: 'c' is not one of: a, b",
        "f.yaml:3: tags: must be a list of strings, got int",
        "4 problems found"]


def test_bools_are_not_integers() -> None:
    with pytest.raises(ConfigError, match="count: must be an integer"):
        validate_model(Thing, load_yaml_text("name: x\ncount: true\n"), what="thing", path=None)


def test_suggest_and_pick() -> None:
    assert suggest("lumii", ["lumi", "olivia"]) == " (did you mean 'lumi'?)"
    assert suggest("zzz", ["lumi", "olivia"]) == ""
    assert pick({"lumi": 1}, "lumi", what="site", flag="--site") == 1
    with pytest.raises(UsageError) as info:
        pick({"lumi": 1, "olivia": 2}, "lumii", what="site", flag="--site")
    assert str(info.value) == ("--site: unknown site 'lumii' (did you mean 'lumi'?); known: "
                               "lumi, olivia")
    assert info.value.flag == "--site" and isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("name", ["cpu", "lumi-rocm-def", "2026.11.21-1e9c228c", "v2+cuda12.4",
                                  "a_b", "_x", "+x", "x" * 64, "standard-g"])
def test_good_names(name: str) -> None:
    assert name_problem("target", name) is None
    assert check_name("target", name) == name


@pytest.mark.parametrize("name", ["", "-x", ".x", "..", "../x", "a/b", "a b", "a\nb", "a\rb",
                                  "a\tb", "a\x00b", "a;b", "$(id)", "a'b", 'a"b', "é",
                                  "x" * 65, "modules", "keys", "bin", "latest", "default",
                                  "catalogue.json", "MODULES", "x.partial", "x.tmp", None, 7])
def test_bad_names_are_refused_in_one_line(name) -> None:
    problem = name_problem("version", name)
    assert problem is not None and "\n" not in problem and "\r" not in problem
    with pytest.raises(ConfigError) as refused:
        check_name("site", name, path="sites/x.yaml", line=3, key="partitions")
    assert str(refused.value).startswith("sites/x.yaml:3: partitions: ")
    assert "\n" not in str(refused.value)


def test_pick_quotes_an_unknown_name_on_one_line() -> None:
    with pytest.raises(UsageError) as info:
        pick({"lumi": 1}, "x\ny", what="target", flag="--target")
    assert str(info.value).startswith("--target: unknown target 'x\\ny'")
