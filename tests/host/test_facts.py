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


def test_fit_rule_cpu_ranks_against_cores_and_memory() -> None:
    from containers.host.facts import RANK_OVERHEAD, Machine, fit_problem

    laptop = Machine(cores=2, memory=24 << 30)
    assert fit_problem(ranks=2, largest=128 << 20, gpu="none", machine=laptop) is None
    assert fit_problem(ranks=8, largest=None, gpu="none", machine=laptop) is None  # 4 per core
    assert fit_problem(ranks=9, largest=None, gpu="none", machine=laptop) == \
        "--gpus 9: 9 CPU ranks on 2 cores is more than 4 per core"
    assert fit_problem(ranks=100000, largest=1 << 10, gpu="none", machine=laptop).startswith(
        "--gpus 100000: ")
    # --sizes 10G: 2 ranks x (3 buffers of 10 GiB + the process) is more than 24 GiB
    assert fit_problem(ranks=2, largest=10 << 30, gpu="none", machine=laptop) == (
        "--sizes up to 10 GiB: 2 CPU ranks x (3 buffers + 512 MiB per process) need 61 GiB; "
        "this machine has 24 GiB available")
    exact = Machine(cores=2, memory=2 * (3 * (1 << 30) + RANK_OVERHEAD))
    assert fit_problem(ranks=2, largest=1 << 30, gpu="none", machine=exact) is None
    assert fit_problem(ranks=2, largest=10 << 30, gpu="none", machine=Machine()) is None


def test_fit_rule_gpu_ranks_against_gpus_and_their_memory() -> None:
    from containers.host.facts import Machine, fit_problem

    node = Machine(cores=64, memory=8 << 30, gpus=4, gpu_memory=80 << 30)
    assert fit_problem(ranks=4, largest=16 << 30, gpu="cuda", machine=node) is None  # host RAM
    assert fit_problem(ranks=5, largest=None, gpu="cuda", machine=node) == \
        "--gpus 5: this machine shows 4 GPUs"
    assert fit_problem(ranks=4, largest=32 << 30, gpu="rocm", machine=node) == (
        "--sizes up to 32 GiB: 3 buffers per GPU need 96 GiB; each GPU here has 80 GiB")
    login = Machine(cores=64, gpus=0)  # no GPUs here: the run says so itself
    assert fit_problem(ranks=8, largest=None, gpu="cuda", machine=login) is None


def test_machine_facts_from_proc_cgroup_and_dev(tmp_path: Path) -> None:
    from containers.host.facts import gpu_count, gpu_kinds_here, memory_available, this_machine

    proc, cgroup, dev = tmp_path / "proc", tmp_path / "cg", tmp_path / "dev"
    for folder in (proc, cgroup, dev / "dri"):
        folder.mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert memory_available(proc, cgroup) == 2 << 20
    (cgroup / "memory.max").write_text("1048576\n")
    (cgroup / "memory.current").write_text("524288\n")
    assert memory_available(proc, cgroup) == 512 << 10  # the cgroup's limit is smaller
    (cgroup / "memory.max").write_text("max\n")
    assert memory_available(proc, cgroup) == 2 << 20
    assert memory_available(tmp_path / "none", tmp_path / "none") is None
    for name in ("nvidiactl", "nvidia-uvm", "dri/renderD128"):
        (dev / name).touch()
    assert gpu_count("cuda", dev) == 0 and gpu_kinds_here(dev) == set()  # no GPU device files
    for name in ("nvidia0", "nvidia1"):
        (dev / name).touch()
    assert gpu_count("cuda", dev) == 2 and gpu_count("none", dev) is None
    assert gpu_count("rocm", dev) == 0  # no /dev/kfd: no ROCm
    assert gpu_kinds_here(dev) == {"cuda"}
    (dev / "kfd").touch()
    assert gpu_count("rocm", dev) == 1 and gpu_kinds_here(dev) == {"cuda", "rocm"}
    here = this_machine("none")
    assert here.cores and here.cores >= 1 and here.gpus is None
    assert this_machine("cuda", with_gpu_memory=False).gpu_memory is None  # nvidia-smi not asked
