"""Performance references: selection and validation with lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.references import parse_reference, select
from containers.inputs.yamlsource import load_yaml_text
from tests.fixtures.data import reference as ref


def test_select_prefers_specific_partition_and_model() -> None:
    refs = [ref(value=100.0), ref(partition="standard-g", value=125.0),
            ref(partition="standard-g", gpu_model="MI300A", value=300.0), ref(nodes=2, value=85.0)]
    assert select(refs, partition="standard-g", nodes=1, ranks_per_node=8).value == 125.0
    assert select(refs, partition="dev-g", nodes=1, ranks_per_node=8).value == 100.0
    assert select(refs, partition="standard-g", nodes=1, ranks_per_node=8,
                  gpu_model="MI300A").value == 300.0
    assert select(refs, partition=None, nodes=2, ranks_per_node=8).value == 85.0
    assert select(refs, partition=None, nodes=1, ranks_per_node=4) is None
    # Equally specific references at several sizes: the largest size the run measured.
    sizes = [ref(bytes=16 << 20, value=1.0), ref(bytes=128 << 20, value=2.0)]
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8).bytes == 128 << 20
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8,
                  measured={1 << 20, 16 << 20}).bytes == 16 << 20
    assert select(sizes, partition=None, nodes=1, ranks_per_node=8,
                  measured={16 << 20, 128 << 20}).bytes == 128 << 20


@pytest.mark.parametrize("spec, message", [
    ("[125.0, 0.05, null, GB/s]", r"lower tolerance 0.05 must be a fraction in \[-1, 0\]"),
    ("[125.0, -1.5, null, GB/s]", r"lower tolerance -1.5"),
    ("[125.0, -0.05, -0.1, GB/s]", "upper tolerance -0.1 is negative"),
    ("[0, -0.05, null, GB/s]", "value must be a positive number"),
    ("[125.0, -0.05, null]", r"must be \[value, lower, upper, unit\]"),
    ("[fast, -0.05, null, GB/s]", "value must be a number or null"),
    # YAML's NaN and infinities are floats: a NaN bound fails every comparison (every run fails)
    ("[.nan, -0.05, null, GB/s]", "value nan is not a finite number"),
    ("[.inf, -0.05, null, GB/s]", "value inf is not a finite number"),
    ("[125.0, -0.05, .nan, GB/s]", "upper nan is not a finite number"),
    ("[125.0, -0.05, .inf, GB/s]", "upper inf is not a finite number"),
    ("[125.0, -.inf, null, GB/s]", "lower -inf is not a finite number"),
    ("[-.inf, -0.05, null, GB/s]", "value -inf is not a finite number"),
    # a unit the benchmark does not measure in would judge nothing
    ("[125.0, -0.05, null, furlongs]", "unit 'furlongs' is not what the benchmark measures"),
])
def test_invalid_references_rejected_with_line(spec, message) -> None:
    data = load_yaml_text(f"- nodes: 1\n  ranks_per_node: 8\n  bytes: 1024\n  busbw: {spec}\n"
                          "  source: x\n", path=Path("sites/x.yaml"))
    with pytest.raises(ConfigError, match=r"sites/x.yaml:4: references\[0\].busbw: " + message):
        parse_reference(data[0], path=Path("sites/x.yaml"), index=0)
