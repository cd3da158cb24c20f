"""Which GPUs an image's torch can run on, read without a GPU.

torch built without the site's GPU fails only on the site, so its kernels are read and judged
(docs/cuda-images.md): SASS ``sm_XY`` runs on ``X.Z`` for ``Z >= Y``, ``sm_XYa`` on ``X.Y``
only; PTX only is a warning; a ROCm code object runs only on its own gfx target."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

CUDA_ARCH = re.compile(r"(sm|compute)_(\d+?)(\d)([af]?)\Z")
GFX = re.compile(r"gfx[0-9a-f]+(?::[a-z]+[+-])*\Z")
GENCODE = re.compile(r"arch=compute_\w+,code=\[?([\w,]+)\]?")


@dataclass(frozen=True)
class Compiled:
    """An image's SASS, PTX and ROCm gfx targets, and what they were read from."""

    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    gfx: tuple[str, ...]
    source: str

    def words(self) -> str:
        return " ".join((*self.sass, *self.ptx, *self.gfx))


def _key(word: str) -> tuple:
    match = CUDA_ARCH.match(word)
    return (int(match[2]), int(match[3]), match[4]) if match else (0, 0, word)


def parse_words(words: str | Sequence[str], source: str) -> Compiled:
    """Architectures from words (``sm_80 compute_90 gfx90a``; unknown words are dropped)."""
    items = words.split() if isinstance(words, str) else list(words)
    sass = sorted({w for w in items if w.startswith("sm_") and CUDA_ARCH.match(w)}, key=_key)
    ptx = sorted({w for w in items if w.startswith("compute_") and CUDA_ARCH.match(w)}, key=_key)
    gfx = sorted({w for w in items if GFX.match(w)})
    return Compiled(tuple(sass), tuple(ptx), tuple(gfx), source)


def parse_nvcc_flags(config: str) -> Compiled | None:
    """From the ``NVCC architecture flags`` line or, in newer builds, ``CUDA_FLAGS``."""
    codes = ",".join(GENCODE.findall(config))
    return parse_words(codes.replace(",", " "), "torch.__config__.show()") if codes else None


def parse_fatbin_listing(text: str) -> Compiled:
    """``cuobjdump --list-elf`` / ``--list-ptx`` output, as the probe writes it."""
    words = []
    for line in text.splitlines():
        match = re.match(r"\s*(ELF|PTX) file\s+\d+:\s*\S*?\.(sm_\d+[af]?)\.(?:cubin|ptx)\s*$",
                         line)
        if match:  # PTX of sm_90 is compute_90
            words.append(match[2] if match[1] == "ELF" else "compute_" + match[2][3:])
    return parse_words(words, "fatbinary of libtorch_cuda.so")


def from_torch_facts(torch: Mapping) -> Compiled | None:
    """The best evidence the probe found (fatbinary, arch flags, config), else None."""
    if torch.get("fatbin"):
        return parse_fatbin_listing(torch["fatbin"])
    if torch.get("arch_flags"):
        return parse_words(torch["arch_flags"], "torch._C._cuda_getArchFlags()")
    if torch.get("config"):
        return parse_nvcc_flags(torch["config"])
    return None


def cudnn_version(number: int | str | None) -> str | None:
    """cuDNN's version number as a version (9 counts minors by 100): 91002 -> 9.10.2."""
    if number in (None, ""):
        return None
    value = int(number)
    base = 10000 if value >= 90000 else 1000
    return f"{value // base}.{value % base // 100}.{value % 100}"


def _runs(sass: str, device: str) -> bool:
    kernel, gpu = _key(sass), _key(device)
    if kernel[2] == "a":
        return kernel[:2] == gpu[:2]
    return kernel[0] == gpu[0] and kernel[1] <= gpu[1]


def fit(compiled: Compiled, device: str) -> str:
    """``sass``, ``ptx`` (only PTX the driver can JIT) or ``none`` for one site GPU."""
    if device.startswith("gfx"):
        base = device.split(":")[0]
        return "sass" if any(g.split(":")[0] == base for g in compiled.gfx) else "none"
    if any(_runs(s, device) for s in compiled.sass):
        return "sass"
    gpu = _key(device)
    if any(_key(p)[:2] <= gpu[:2] for p in compiled.ptx):
        return "ptx"
    return "none"


def judge(compiled: Compiled | None, devices: Sequence[str], *, torch: str, site: str,
          gpu_model: str | None) -> list[tuple[str, str]]:
    """``(level, message)`` per site GPU architecture the image does not fully serve."""
    gpu = f"{site}'s {gpu_model}" if gpu_model else f"{site}'s GPU"
    if compiled is None or not compiled.words():
        return [("error", f"the GPU architectures torch {torch} in this image was compiled for "
                          f"could not be read; {gpu} is {' '.join(devices)}")]
    found = []
    has = f"torch {torch} in this image has kernels for {compiled.words()}"
    for device in devices:
        verdict = fit(compiled, device)
        if verdict == "none":
            found.append(("error", f"{has}; {gpu} is {device}"))
        elif verdict == "ptx":
            found.append(("warning", f"{has}: no {device} kernels, only PTX the driver compiles "
                                     f"at first use (slow start; {gpu} is {device})"))
    return found
