"""Whether an image fits a site: the mismatches users report most, seen without a GPU.

:func:`judge` compares an image's facts with the profile's ``fit:`` and GPU architecture: an
``error`` fails build and publish, a ``warning`` is kept, ``info`` names what went unchecked."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from containers.image import gpuarch
from containers.inputs.sites import Fit, Gpu, Gpus, Nccl, Range
from containers.inputs.versions import compare_at, release


@dataclass(frozen=True)
class Finding:
    level: str  # error | warning | info
    rule: str
    message: str

    def line(self) -> str:
        return f"{self.level.upper()} {self.rule}: {self.message}"

    def as_dict(self) -> dict:
        return asdict(self)


def _range(rule: str, what: str, found: str | None, spec: Range | None,
           site: str) -> Iterable[Finding]:
    if not spec:
        yield Finding("info", rule, f"{site} states no {what} range: not checked")
        return
    low, high = spec.min, spec.max
    value = release(found)
    if value is None:
        yield Finding("warning", rule, f"the image's {what} version is unknown ({found!r})")
        return
    if high is not None and compare_at(value, release(str(high))) > 0:
        yield Finding("error", rule, f"the image's {what} {found} is above {site}'s supported "
                                     f"{what} (at most {high}; {spec.source})")
    if low is not None and compare_at(value, release(str(low))) < 0:
        yield Finding("error", rule, f"the image's {what} {found} is below {site}'s supported "
                                     f"{what} (at least {low}; {spec.source})")
    if low is None and high is None:
        yield Finding("info", rule, f"{site} publishes no {what} range ({spec.source}): "
                                    "not checked")


#: What the build, inspect and publish say of an image without torch (a base, an R image).
NO_TORCH = "the image holds no torch: site fit not judged"


def holds_no_torch(stack: Mapping, probe_errors: Mapping | None) -> bool:
    """Whether the image has no torch at all (not one that fails to import)."""
    error = (probe_errors or {}).get("torch")
    return stack.get("build") is None and isinstance(error, str) \
        and error.startswith("ModuleNotFoundError")


def judge(stack: Mapping, *, site_name: str, site_gpu: Gpu, arches: Sequence[str] | None,
          fit: Fit, probe_errors: Mapping | None = None,
          gpus: Gpus | None = None) -> list[Finding]:
    """Every finding of an image's flat stack against a site; an image without torch: none."""
    if holds_no_torch(stack, probe_errors):
        return [Finding("info", "torch", NO_TORCH)]
    found: list[Finding] = []
    arch = stack.get("arch")
    if not arch:
        found.append(Finding("error", "arch", "the image's architecture could not be read"))
    elif arches is not None and arch not in arches:
        found.append(Finding("error", "arch", f"the image is {arch}; {site_name}'s nodes run "
                                              f"{' and '.join(arches)}"))
    build = stack.get("build")
    if build is None:
        found.append(Finding("error", "torch", "torch could not be imported in the image"))
    elif site_gpu != Gpu.NONE and build != site_gpu:
        level = "warning" if build == "cpu" else "error"
        found.append(Finding(level, "gpu", f"torch is a {build} build; {site_name}'s GPUs "
                                           f"need a {site_gpu} build"))
    if build == Gpu.ROCM:  # the image's /opt/rocm and the HIP torch was built with (and ships)
        for what, value in (("ROCm", stack.get("rocm")), ("torch's HIP", stack.get("hip"))):
            if value or what == "ROCm" and not stack.get("hip"):
                found += _range("rocm", what, value, fit.rocm, site_name)
    if build == Gpu.CUDA:
        found += _range("cuda", "CUDA", stack.get("cuda"), fit.cuda, site_name)
    glibc = fit.glibc
    if glibc and glibc.min is not None:
        image_glibc = release(stack.get("glibc"))
        if image_glibc is None:
            found.append(Finding("error", "glibc", "the image's glibc could not be read"))
        elif compare_at(image_glibc, release(glibc.min)) < 0:
            found.append(Finding("error", "glibc", f"the image's glibc {stack.get('glibc')} is "
                                                   f"below {glibc.min}, which the libraries "
                                                   f"{site_name} binds in need "
                                                   f"({glibc.source})"))
    elif site_gpu != Gpu.NONE:
        why = f" ({glibc.source})" if glibc else ""
        found.append(Finding("info", "glibc", f"{site_name} states no glibc its bound libraries "
                                              f"need{why}: not checked"))
    if build in (Gpu.CUDA, Gpu.ROCM):
        found += _nccl(stack, fit.nccl, site_name)
        found += gpu_arch_findings(stack, gpus, site_name)
    for key, error in sorted((probe_errors or {}).items()):
        found.append(Finding("warning", "probe", f"{key} could not be read: {error}"))
    return found


def _nccl(stack: Mapping, spec: Nccl | None, site: str) -> list[Finding]:
    name = "RCCL" if stack.get("build") == Gpu.ROCM else "NCCL"
    if not stack.get("nccl"):
        return [Finding("warning", "nccl", f"torch reports no {name} version")]
    found: list[Finding] = []
    plugin = spec.plugin if spec else None
    if stack.get("nccl_linkage") == "static" and (not spec or spec.dynamic):
        found.append(Finding("error", "nccl", f"torch links {name} {stack['nccl']} statically: "
                                              f"the {name} {site}'s network plugin "
                                              f"{'(' + plugin + ') ' if plugin else ''}is built "
                                              "for cannot be bound in in its place"))
    found += _range("nccl", name, stack["nccl"], spec, site)
    return found


def gpu_arch_findings(stack: Mapping, gpus: Gpus | None, site: str) -> list[Finding]:
    """Whether torch in the image has kernels for the site's GPUs (PTX only: a warning)."""
    if gpus is None or not gpus.arch:
        return [Finding("info", "gpu-arch", f"{site} states no GPU architecture (gpus.arch): "
                                            "not checked")]
    words = stack.get("gpu_arches")
    compiled = gpuarch.parse_words(words, stack.get("gpu_arches_source") or "") if words else None
    return [Finding(level, "gpu-arch", f"{message} ({gpus.arch_source})" if level == "error"
                    else message)
            for level, message in gpuarch.judge(compiled, [gpus.arch],
                                                torch=str(stack.get("torch")), site=site,
                                                gpu_model=gpus.model)]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]
