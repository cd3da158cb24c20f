"""Which NVIDIA driver runs which CUDA runtime: the one rule the device gate (in the image) and
``invoke inspect`` / the catalogue (on the host) apply.

A container brings its own CUDA runtime (torch's ``torch.version.cuda``) but uses the node's
kernel driver. A runtime newer than the driver allows makes torch see no GPU, which names the
symptom; the gate names the cause instead: the driver's version, the newest CUDA it supports and
the image's runtime. None of the NVIDIA sites publishes its driver version, so this is judged on
the node, when the job runs. Standard library only, no torch: the host loads this file by path
(``containers.inputs.names``), the gate imports it as a sibling (``import cudadriver``).

Sources (NVIDIA):
- the driver branch each toolkit release needs, "CUDA Toolkit and Corresponding Driver
  Versions": https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (table 3);
- minor version compatibility, a CUDA X.y runtime on any driver of a branch made for CUDA X.0
  or newer (CUDA 11.x from R450, 12.x from R525, 13.x from R580):
  https://docs.nvidia.com/deploy/cuda-compatibility/ and the data-center support matrix
  https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html
  (R535 and R570: "supports CUDA 12.x (through CUDA minor version compatibility)"; R580: 13.x).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path
from typing import Optional

#: Driver branch (series) -> the newest CUDA it supports: the toolkit released with it (the
#: release notes' table 3; R565's is the CUDA 12.7 ``nvidia-smi`` reports, no toolkit 12.7).
NEWEST_CUDA: tuple[tuple[int, str], ...] = (
    (450, "11.0"), (455, "11.1"), (460, "11.2"), (465, "11.3"), (470, "11.4"), (495, "11.5"),
    (510, "11.6"), (515, "11.7"), (520, "11.8"),
    (525, "12.0"), (530, "12.1"), (535, "12.2"), (545, "12.3"), (550, "12.4"), (555, "12.5"),
    (560, "12.6"), (565, "12.7"), (570, "12.8"), (575, "12.9"), (580, "13.0"),
)
SOURCE = ("NVIDIA CUDA toolkit release notes, table 3, and CUDA minor version compatibility: "
          "https://docs.nvidia.com/deploy/cuda-compatibility/")
NVIDIA_VERSION_FILE = Path("/proc/driver/nvidia/version")


def _numbers(text: Optional[str]) -> Optional[tuple[int, ...]]:
    match = re.match(r"\s*(\d+(?:\.\d+)*)", str(text or ""))
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def driver_series(driver: Optional[str]) -> Optional[int]:
    """``570.86.15`` -> 570 (the branch), None when it is not a version."""
    numbers = _numbers(driver)
    return numbers[0] if numbers else None


def newest_cuda(driver: Optional[str]) -> Optional[str]:
    """The newest CUDA the driver ``driver`` supports (its branch's, from :data:`NEWEST_CUDA`;
    a branch newer than the table: at least the table's last); None when older than the table
    or not a version."""
    series = driver_series(driver)
    known = [cuda for branch, cuda in NEWEST_CUDA if series is not None and branch <= series]
    return known[-1] if known else None


def needed_series(cuda: Optional[str]) -> Optional[int]:
    """The oldest driver branch that runs a CUDA ``cuda`` runtime (minor version compatibility:
    the first branch made for its major version), None when the table has none for it."""
    numbers = _numbers(cuda)
    if not numbers:
        return None
    return next((branch for branch, newest in NEWEST_CUDA
                 if _numbers(newest)[0] == numbers[0]), None)  # type: ignore[index]


def driver_needed(cuda: Optional[str]) -> Optional[str]:
    """What a CUDA ``cuda`` runtime asks of the node, for people: ``NVIDIA driver R580 or newer
    (CUDA 13.x, minor version compatibility)``; None for no CUDA or one the table lacks."""
    series, numbers = needed_series(cuda), _numbers(cuda)
    if series is None or not numbers:
        return None
    return (f"NVIDIA driver R{series} or newer (CUDA {numbers[0]}.x, minor version "
            "compatibility)")


def misfit(cuda: Optional[str], driver: Optional[str] = None,
           driver_cuda: Optional[str] = None) -> Optional[str]:
    """Why the node's driver cannot run the image's CUDA ``cuda`` runtime, in one clause naming
    the driver, the newest CUDA it supports and the runtime; None when it can, or when neither
    ``driver`` (its version) nor ``driver_cuda`` (the newest CUDA it reports) is known."""
    wanted, series = _numbers(cuda), driver_series(driver)
    newest = driver_cuda or newest_cuda(driver)
    if not wanted or (newest is None and (series is None or series >= NEWEST_CUDA[0][0])):
        return None
    newest_numbers = _numbers(newest)
    if newest_numbers and newest_numbers[0] >= wanted[0]:
        return None
    named = f"the node's NVIDIA driver {driver}" if driver else "the node's NVIDIA driver"
    supports = f"supports CUDA {newest} at most" if newest else \
        f"is older than R{NEWEST_CUDA[0][0]}, the oldest branch CUDA 11 runs on"
    need = driver_needed(cuda)
    return (f"{named} {supports} and the image's torch uses the CUDA {cuda} runtime"
            + (f", which needs {need}" if need else ""))


def cuda_of_driver_api(version: Optional[int]) -> Optional[str]:
    """``cudaDriverGetVersion``'s number (``12080``) as a CUDA version (``12.8``)."""
    if not version or version < 1000:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def driver_api_cuda(library: str = "libcuda.so.1") -> Optional[str]:
    """The newest CUDA the loaded driver library supports (``cuDriverGetVersion``, which needs
    no GPU and no context: it answers where torch sees none), None where ``libcuda`` is absent
    (no ``--nv``) or does not answer. torch has no public call for it."""
    try:
        version = ctypes.c_int()
        if ctypes.CDLL(library).cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return cuda_of_driver_api(version.value)


def parse_nvidia_driver(text: str) -> Optional[str]:
    """The version in ``/proc/driver/nvidia/version`` (``NVRM version: NVIDIA UNIX x86_64 Kernel
    Module  550.54.15  ...``, or ``... Open Kernel Module for x86_64  550.54.15 ...``)."""
    match = re.search(r"Kernel Module\b.*?\s(\d+(?:\.\d+)+)\b", text)
    return match.group(1) if match else None


def nvidia_driver_file(version_file: Path = NVIDIA_VERSION_FILE) -> Optional[str]:
    """The NVIDIA kernel driver version in its ``/proc`` file; None where it cannot be read."""
    try:
        return parse_nvidia_driver(version_file.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def nvidia_driver(version_file: Path = NVIDIA_VERSION_FILE) -> Optional[str]:
    """The node's NVIDIA kernel driver version: its ``/proc`` file, else what ``nvidia-smi``
    (bound in by ``--nv``) says; None where neither answers."""
    found = nvidia_driver_file(version_file)
    if found:
        return found
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    return first.strip() if _numbers(first) else None
