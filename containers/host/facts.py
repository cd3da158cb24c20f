"""Facts about this machine that plans record or depend on, and what a run started here can use
(:func:`fit_problem` judges that purely, so it is tested without the machine it describes)."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from containers.errors import CommandFailed
from containers.host.process import capture
from containers.inputs.names import Gpu
from containers.report import human_bytes


def git_revision(root: Path) -> str:
    try:
        revision = capture(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=20).strip()
        dirty = capture(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                        timeout=20).strip()
    except CommandFailed:
        return "unknown"
    return revision + ("-dirty" if dirty else "")


def utc_now() -> str:
    """This moment as every record of the tool writes it (``2026-11-22T23:24:19Z``)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_stamp() -> str:
    """This moment in local time as it names a run's results folder or a job script."""
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def cotainr_binary() -> str:
    """cotainr from PATH, else the one installed beside this Python (a venv not activated)."""
    beside = Path(sys.executable).parent / "cotainr"
    return shutil.which("cotainr") or (str(beside) if beside.is_file() else "cotainr")


def gpu_kinds_here(dev: Path = Path("/dev")) -> set[Gpu]:
    """The GPU kinds whose device files this machine has (a login node: usually none)."""
    found = {Gpu.CUDA: bool(gpu_count(Gpu.CUDA, dev)), Gpu.ROCM: (dev / "kfd").exists()}
    return {kind for kind, here in found.items() if here}


# ------------------------------------------------------------------- what a run here can use
@dataclass(frozen=True)
class Machine:
    """What a run started on this machine can use; None where it is not known."""

    cores: int | None = None
    #: Bytes of memory new processes can have (the kernel's estimate, or the cgroup's if less).
    memory: int | None = None
    #: GPU device files of the kind the run uses (0: none visible here).
    gpus: int | None = None
    #: Bytes of memory per GPU, where the driver tells (nvidia-smi).
    gpu_memory: int | None = None


#: CPU ranks (gloo) per core a run may start: they share cores (the local site's references
#: measure 4 ranks on 2 cores), but beyond this the machine only swaps between them.
CPU_RANKS_PER_CORE = 4
#: Memory one rank's process holds besides its message buffers (Python, torch, gloo).
RANK_OVERHEAD = 512 << 20
#: Buffers of the largest size the benchmark holds per rank, any ``--op``: in, out, expected.
BUFFERS_PER_RANK = 3


def fit_problem(*, ranks: int, largest: int | None, gpu: Gpu, machine: Machine) -> str | None:
    """Why ``ranks`` ranks holding ``BUFFERS_PER_RANK`` messages of ``largest`` bytes (None:
    ranks only) cannot run on ``machine``, in one line naming the flag; else None."""
    need = (BUFFERS_PER_RANK * largest) if largest else 0
    if gpu == Gpu.NONE:
        if machine.cores and ranks > machine.cores * CPU_RANKS_PER_CORE:
            return (f"--gpus {ranks}: {ranks} CPU ranks on {machine.cores} core"
                    f"{'s' if machine.cores != 1 else ''} is more than {CPU_RANKS_PER_CORE} per "
                    "core")
        total = ranks * (need + RANK_OVERHEAD)
        if largest and machine.memory is not None and total > machine.memory:
            return (f"--sizes up to {human_bytes(largest)}: {ranks} CPU ranks x "
                    f"({BUFFERS_PER_RANK} buffers + {human_bytes(RANK_OVERHEAD)} per process) "
                    f"need {human_bytes(total)}; this machine has "
                    f"{human_bytes(machine.memory)} available")
        return None
    if machine.gpus and ranks > machine.gpus:
        return (f"--gpus {ranks}: this machine shows {machine.gpus} "
                f"GPU{'s' if machine.gpus != 1 else ''}")
    if largest and machine.gpu_memory is not None and need > machine.gpu_memory:
        return (f"--sizes up to {human_bytes(largest)}: {BUFFERS_PER_RANK} buffers per GPU need "
                f"{human_bytes(need)}; each GPU here has {human_bytes(machine.gpu_memory)}")
    return None


def this_machine(gpu: Gpu, *, with_gpu_memory: bool = True) -> Machine:
    """This process's cores, available memory and GPUs (their memory if asked)."""
    try:
        cores: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return Machine(cores=cores, memory=memory_available(), gpus=gpu_count(gpu),
                   gpu_memory=gpu_memory() if with_gpu_memory and gpu == Gpu.CUDA else None)


def memory_available(proc: Path = Path("/proc"),
                     cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes new processes can still get: ``MemAvailable``, capped by a cgroup v2 limit."""
    found = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError):
        limit = (cgroup / "memory.max").read_text().strip()
        if limit.isdigit():
            left = int(limit) - int((cgroup / "memory.current").read_text().strip())
            found = left if found is None else min(found, left)
    return found


def gpu_count(gpu: Gpu, dev: Path = Path("/dev")) -> int | None:
    """GPU device files of kind ``gpu`` (rocm: one render node per GCD); None for ``none``."""
    if gpu == Gpu.CUDA:
        return sum(1 for p in dev.glob("nvidia[0-9]*") if p.name[len("nvidia"):].isdigit())
    if gpu == Gpu.ROCM:
        return len(list(dev.glob("dri/renderD*"))) if (dev / "kfd").exists() else 0
    return None


def gpu_memory() -> int | None:
    """The smallest GPU's memory in bytes, as nvidia-smi reports it; None where it cannot."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        text = capture(["nvidia-smi", "--query-gpu=memory.total",
                        "--format=csv,noheader,nounits"], timeout=20)
        sizes = [int(float(line)) << 20 for line in text.split() if line.strip()]
    except (CommandFailed, ValueError):
        return None
    return min(sizes) if sizes else None
