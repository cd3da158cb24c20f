"""Facts about this machine: architecture names as targets spell them, the checkout's revision."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from containers.host.facts import git_revision, host_arch


def test_host_arch_uses_the_names_targets_use(monkeypatch) -> None:
    for machine, arch in (("x86_64", "x86_64"), ("AMD64", "x86_64"), ("arm64", "aarch64"),
                          ("aarch64", "aarch64")):
        monkeypatch.setattr(platform, "machine", lambda m=machine: m)
        assert host_arch() == arch


def test_git_revision_marks_a_dirty_tree_and_tolerates_no_repository(tmp_path: Path) -> None:
    assert git_revision(tmp_path) == "unknown"
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True,  # noqa: E731
                                    capture_output=True)
    run("init", "-q")
    (tmp_path / "f").write_text("1")
    run("add", "f")
    run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "one")
    clean = git_revision(tmp_path)
    assert len(clean) == 40 and not clean.endswith("-dirty")
    (tmp_path / "f").write_text("2")
    assert git_revision(tmp_path) == clean + "-dirty"
