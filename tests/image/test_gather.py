"""Gathering host facts once: what a build plan records about this machine."""

from __future__ import annotations

import json
from pathlib import Path

from containers.host.facts import host_arch
from containers.host.runtime import Runtime
from containers.image.gather import gather_host


def test_gather_host_records_this_machine(tmp_path: Path, data_root: Path) -> None:
    (tmp_path / "cpu.sif").write_bytes(b"sif")
    (tmp_path / "cpu.sif.json").write_text(json.dumps({"inputs_hash": "h1"}))
    runtime = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")
    facts = gather_host(data_root, tmp_path, runtime, ["cpu", "debian-base"],
                        mirror_override="http://mirror.invalid/debian")
    assert facts.runtime is runtime and facts.arch == host_arch()
    assert facts.mirror == "http://mirror.invalid/debian"
    assert facts.built_hashes == {"cpu": "h1"}
    assert facts.build_date.endswith("Z") and len(facts.build_date) == 20
    assert facts.git_revision != ""
    assert all(Path(p).exists() for p in facts.host_paths)
