"""The builder registry (:mod:`containers.inputs.builders`): each builder owns its manifest rule,
env rule, build arguments, base image handling, fakeroot need and (in the image stage) its plan
step, so that no code outside the registry compares a builder's name."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures import ROOT

#: The registry: the only module that may name a builder in a comparison.
REGISTRY = ROOT / "containers" / "inputs" / "builders.py"


def _names_a_builder(node: ast.expr) -> bool:
    """``target.builder``, ``builder``, ``values["builder"]``, ``builder.name``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "builder" or (node.attr == "name" and _names_a_builder(node.value))
    if isinstance(node, ast.Name):
        return node.id == "builder"
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "builder"
    return False


def _is_string(node: ast.expr) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_string(element) for element in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def builder_compares(path: Path) -> list[int]:
    """The lines of ``path`` that compare a builder (attribute, name or key) with a string."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_names_a_builder, sides)) and any(map(_is_string, sides)):
                found.append(node.lineno)
    return sorted(found)


def test_no_builder_string_compares_outside_the_registry() -> None:
    found = {str(path.relative_to(ROOT)): lines
             for path in sorted([*(ROOT / "containers").rglob("*.py"), ROOT / "tasks.py"])
             if path != REGISTRY and (lines := builder_compares(path))}
    assert found == {}, f"builders chosen by string outside {REGISTRY.name}: {found}"


def test_the_count_sees_a_compare(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('if target.builder == "cotainr" or values["builder"] != "apptainer":\n'
                      '    pass\nok = builder.name in ("a", "b")\nno = runtime.flavour == "x"\n')
    assert builder_compares(sample) == [1, 1, 3]


def test_every_builder_has_a_plan_step() -> None:
    from containers.image.plan import PLAN_STEPS
    from containers.inputs.builders import BUILDERS
    assert set(PLAN_STEPS) == set(BUILDERS.values())


def test_each_builder_owns_its_build_arguments_and_base(tmp_path) -> None:
    import pytest

    from containers.errors import ConfigError
    from containers.inputs.builders import APPTAINER, BUILDERS, COTAINR, builder_of

    class Item:
        name, site, builder, base_image = "x", "local", "cotainr", "docker://base"
        manifest, definition = tmp_path / "x.yaml", None

        def line(self, key: str) -> None:
            return None

    assert next(iter(BUILDERS.values())) is APPTAINER  # the manifest's default
    assert builder_of(Item()) is COTAINR
    assert COTAINR.base_inputs(Item(), {"BASE_IMAGE": "b.sif"}) == {"base_image": "b.sif"}
    assert APPTAINER.base_inputs(Item(), {"BASE_IMAGE": "b.sif"}) == {}
    APPTAINER.check_build_args(Item(), {"ANY": "1"})  # its definition judges them later
    with pytest.raises(ConfigError, match="'ANY' does not apply to a cotainr target"):
        COTAINR.check_build_args(Item(), {"BASE_IMAGE": "b", "ANY": "1"})
    assert COTAINR.fakeroot_refusal(Item(), site=None) is None  # type: ignore[arg-type]
