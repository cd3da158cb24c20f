"""What an image holds, read from the image itself: ``invoke inspect``'s facts.

One ``apptainer exec`` of :mod:`containers.image.probe_script` reads everything from inside, no
GPU needed; :func:`summary` is the flat stack ``inspect``, ``diff`` and the catalogue page show."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Mapping

from containers.errors import CommandFailed, ImageMissing
from containers.files import json_value, read_json_object
from containers.host.process import capture
from containers.host.runtime import Runtime
from containers.image import gpuarch, provenance
from containers.image.emulated import emulated_binds
from containers.inputs import names
from containers.records import BuildRecord
from containers.inputs.names import Gpu

PROBE = Path(__file__).with_name("probe_script.py")
MARK = "@@probe@@"
#: Seconds the probe may take: importing torch in an image takes ~4 s here, ~7 s emulated.
PROBE_TIMEOUT = 300
#: The stack in the order people read it; the keys :func:`summary` returns.
STACK_KEYS = ("arch", "os", "glibc", "python", "torch", "build", "cuda", "cudnn", "hip", "rocm",
              "nccl", "nccl_linkage", "gpu_arches", "gpu_arches_source", "deepspeed")


def parse_probe(output: str) -> dict:
    """The probe's JSON, the last line after the marker (``%environment`` may print)."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARK):
            data = json_value(line[len(MARK):])
            if isinstance(data, dict) and data.get("probe") == 1:
                return data
    raise ValueError("the probe printed no result")


#: Facts read in this process, by sha256: publish probes a build once, however often it is used.
_SEEN: dict[str, dict] = {}


def probe(runtime: Runtime, image: Path | str, *, sha256: str | None = None,
          arch: str | None = None) -> dict:
    """The probe's facts of ``image`` (once per ``sha256`` in this process)."""
    if sha256 and sha256 in _SEEN:
        return _SEEN[sha256]
    argv = runtime.exec_argv(image=image, binds=emulated_binds(arch),
                             command=["python3", "-c", PROBE.read_text(encoding="utf-8")])
    try:
        facts = parse_probe(capture(argv, timeout=PROBE_TIMEOUT))
    except CommandFailed as exc:  # one line: the runtime's reason, never the probe script
        raise CommandFailed(f"cannot read what {image} holds: {runtime.flavour} exec of its "
                            "python3", argv=argv, returncode=exc.returncode,
                            output=exc.output or [f"no answer within {PROBE_TIMEOUT} s"]) from exc
    except ValueError as exc:
        raise CommandFailed(f"cannot read what {image} holds: {exc}", argv=argv) from exc
    if sha256:
        _SEEN[sha256] = facts
    return facts


SBOM_SUFFIX = ".cdx.json"


def sbom_path(image: Path) -> Path:
    """The SBOM a build writes beside an image and its record (``cpu.sif.cdx.json``)."""
    return image.with_name(image.name + SBOM_SUFFIX)


def record_path(image: Path) -> Path:
    return image.with_name(image.name + ".json")


def _sbom_components(image: Path) -> list[tuple[str, dict]] | None:
    """The components of the SBOM beside ``image``, each with its kind; None if none."""
    data = read_json_object(sbom_path(image))
    if data is None:
        return None
    found = []
    for component in data.get("components", []):
        purl = str(component.get("purl") or "")
        found.append((purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else "other",
                      component))
    return found


def known_facts(image: Path, record: BuildRecord) -> dict | None:
    """The facts a build recorded (stack, SBOM), so publish need not start the image."""
    stack, components = record.stack, _sbom_components(image)
    if stack is None or components is None:
        return None
    lists = {kind: [{"name": c.get("name"), "version": c.get("version")}
                    for found, c in components if found == kind] for kind in ("deb", "pypi")}
    return {"stack": stack, "debian_packages": lists["deb"], "pip_packages": lists["pypi"],
            "labels": record.labels or {}, "errors": record.probe_errors}


def summary(facts: Mapping) -> dict:
    """The flat stack of an image's facts (:data:`STACK_KEYS`); None where it has none."""
    if isinstance(facts.get("stack"), Mapping):  # already flat (:func:`known_facts`)
        return dict(facts["stack"])
    torch = facts.get("torch") or {}
    pips = {p["name"].lower(): p["version"] for p in facts.get("pip_packages") or []}
    os_info = facts.get("os") or {}
    gpu = torch.get("build") in (Gpu.CUDA, Gpu.ROCM)
    compiled = gpuarch.from_torch_facts(torch) if gpu else None
    return {
        "arch": facts.get("arch"),
        "os": os_info.get("pretty_name") or os_info.get("id"),
        "glibc": facts.get("glibc"), "python": facts.get("python"),
        "torch": torch.get("version"), "build": torch.get("build"),
        "cuda": torch.get("cuda"), "hip": torch.get("hip"), "rocm": facts.get("rocm"),
        "cudnn": gpuarch.cudnn_version(torch.get("cudnn")),
        "nccl": torch.get("nccl"), "nccl_linkage": torch.get("nccl_linkage"),
        "gpu_arches": compiled.words() if compiled else None,
        "gpu_arches_source": compiled.source if compiled else None,
        "deepspeed": pips.get("deepspeed"),
    }


def driver_needed(stack: Mapping) -> str | None:
    """The NVIDIA driver a CUDA image's nodes need (the sites publish none), else None."""
    if stack.get("build") != Gpu.CUDA:
        return None
    return names.driver_needed(stack.get("cuda")) or \
        f"unknown (no driver branch known for CUDA {stack.get('cuda')})"


def inspect_image(runtime: Runtime, image: Path, *, target: str | None = None) -> dict:
    if not image.is_file():
        raise ImageMissing(image, target or image.stem)
    record = provenance.read(record_path(image))
    facts = probe(runtime, image, sha256=record.sha256, arch=record.arch)
    components, stack = _sbom_components(image), summary(facts)
    return {
        "image": str(image), "target": target or record.target,
        "size_bytes": image.stat().st_size,
        "stack": stack,
        "driver_needed": driver_needed(stack),
        "labels": facts.get("labels") or {},
        "provenance": {k: v for k, v in record.as_dict().items()
                       if k not in ("labels", "pip_freeze", "inputs", "schema")} or None,
        "sbom": {"path": str(sbom_path(image)), "counts": None if components is None
                 else dict(Counter(kind for kind, _ in components))}
        if sbom_path(image).is_file() else None,
        "packages": {"debian": len(facts.get("debian_packages") or []),
                     "pip": len(facts.get("pip_packages") or [])},
        "facts": facts,
    }
