"""Loading and validating target manifests: errors name file, line, key, and suggest the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.inputs.recipes import base_chain, load_targets
from containers.inputs.sites import load_sites


def test_shipped_targets_and_sites_load(data_root: Path) -> None:
    targets = load_targets(data_root)
    assert {"debian-base", "cpu"} <= set(targets)
    assert [t.name for t in base_chain(targets, "cpu")] == ["debian-base", "cpu"]
    assert targets["cpu"].env == data_root / "envs" / "cpu.yml"
    assert "local" in load_sites(data_root)


def test_typo_key_names_file_line_and_suggestion(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    text = manifest.read_text().replace("builder:", "buidler:")
    manifest.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("buidler"))
    with pytest.raises(ConfigError) as info:
        load_targets(root)
    message = str(info.value)
    assert message.startswith(f"{manifest}:{line}: buidler: unknown key")
    assert "did you mean 'builder'?" in message
    assert "\n" not in message


def test_bad_choice_and_wrong_type(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("arch: x86_64", "arch: x86-64"))
    with pytest.raises(ConfigError, match=r"cpu.yaml:3: arch: 'x86-64' is not one of.*x86_64"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("arch: x86-64", "arch: [x86_64]"))
    with pytest.raises(ConfigError, match=r"arch: must be a string, got a list"):
        load_targets(root)


def test_unknown_base_and_cycle(factory_project) -> None:
    root = factory_project()
    manifest = root / "recipes" / "cpu.yaml"
    manifest.write_text(manifest.read_text().replace("base: debian-base", "base: debian-bse"))
    with pytest.raises(ConfigError, match="base target 'debian-bse' does not exist.*debian-base"):
        load_targets(root)
    manifest.write_text(manifest.read_text().replace("base: debian-bse", "base: cpu"))
    with pytest.raises(ConfigError, match="base chain loops: cpu -> cpu"):
        load_targets(root)
