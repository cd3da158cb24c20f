"""GPU architecture fit: reading what torch was compiled for (fatbinary listings and probe facts
recorded from the real images, tests/fixtures/gpuarch) and judging it against the real site
profiles' GPUs, without a GPU."""

from __future__ import annotations

import json

import pytest

from containers.image import gpuarch, sitefit
from containers.image import inspect as probing
from containers.inputs.sites import load_sites
from tests.fixtures import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "gpuarch"


def _listing(name: str) -> gpuarch.Compiled:
    return gpuarch.parse_fatbin_listing((FIXTURES / f"{name}.fatbin.txt").read_text())


def _site_judge(words: str, torch: str, site_name: str) -> list[sitefit.Finding]:
    site = load_sites(ROOT)[site_name]
    stack = {"torch": torch, "build": "cuda", "gpu_arches": words,
             "gpu_arches_source": "fatbinary of libtorch_cuda.so"}
    return sitefit.gpu_arch_findings(stack, site.gpus, site.name)


def test_fatbin_listings_of_the_real_wheels() -> None:
    old = _listing("torch-2.10.0-cu128-x86_64")
    assert old.sass == ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
    assert old.ptx == () and old.source == "fatbinary of libtorch_cuda.so"
    new = _listing("torch-2.14.1-cu130-x86_64")
    assert new.words() == "sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 sm_120 sm_121"
    arm = _listing("torch-2.14.1-cu130-aarch64")  # read from an aarch64 ELF on any host
    assert arm.words() == "sm_80 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121"


def test_cuobjdump_output_reads_the_same() -> None:
    text = ("\nELF file    1: libtorch_cuda.1.sm_80.cubin\nELF file    2: libtorch_cuda.2.sm_90a"
            ".cubin\nPTX file    3: libtorch_cuda.3.sm_90.ptx\n")
    assert gpuarch.parse_fatbin_listing(text).words() == "sm_80 sm_90a compute_90"


def test_nvcc_flags_of_torch_config() -> None:
    line = ("  - NVCC architecture flags: -gencode;arch=compute_75,code=sm_75;-gencode;arch="
            "compute_90,code=[sm_90,compute_90];-gencode;arch=compute_100a,code=sm_100a")
    compiled = gpuarch.parse_nvcc_flags("Build settings:\n" + line)
    assert compiled.words() == "sm_75 sm_90 sm_100a compute_90"
    assert compiled.source == "torch.__config__.show()"
    assert gpuarch.parse_nvcc_flags("  - CPU capability usage: AVX2") is None


def test_the_real_images_probe_facts() -> None:
    """The probe's torch facts of the real mahti-cuda-pip image: its config names only the main
    -gencode flags and so does _cuda_getArchFlags(); the fatbinary has more (kernels built
    apart, sm_89 sm_103 sm_121), so it comes first."""
    torch = json.loads((FIXTURES / "mahti-cuda-pip.probe.json").read_text())["torch"]
    assert gpuarch.parse_nvcc_flags(torch["config"]).words() == \
        "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    assert gpuarch.parse_words(torch["arch_flags"], "flags").words() == \
        "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    compiled = gpuarch.from_torch_facts(torch)
    assert compiled.words() == _listing("torch-2.14.1-cu130-x86_64").words()
    assert gpuarch.cudnn_version(torch["cudnn"]) == "9.24.0" and torch["nccl"] == "2.30.7"


def test_evidence_order_fatbinary_then_flags_then_config() -> None:
    config = "NVCC architecture flags: -gencode;arch=compute_80,code=sm_80"
    assert gpuarch.from_torch_facts({"arch_flags": "sm_70 sm_90", "config": config,
                                     "fatbin": "ELF file 1: x.1.sm_75.cubin"}).words() == "sm_75"
    assert gpuarch.from_torch_facts({"arch_flags": "sm_70 sm_90", "config": config,
                                     "fatbin": ""}).words() == "sm_70 sm_90"
    assert gpuarch.from_torch_facts({"config": config}).words() == "sm_80"
    assert gpuarch.from_torch_facts({"arch_flags": "gfx90a gfx942"}).gfx == ("gfx90a", "gfx942")
    assert gpuarch.from_torch_facts({}) is None


@pytest.mark.parametrize("words, device, verdict", [
    ("sm_80", "sm_80", "sass"), ("sm_80", "sm_86", "sass"), ("sm_86", "sm_80", "none"),
    ("sm_80", "sm_90", "none"), ("sm_90a", "sm_90", "sass"), ("sm_100a", "sm_103", "none"),
    ("sm_75 compute_75", "sm_80", "ptx"), ("sm_90 compute_90", "sm_80", "none"),
    ("gfx90a:xnack- gfx942", "gfx90a", "sass"), ("gfx942", "gfx90a", "none"),
])
def test_which_kernels_run_where(words: str, device: str, verdict: str) -> None:
    assert gpuarch.fit(gpuarch.parse_words(words, "test"), device) == verdict


def test_cuda13_torch_is_refused_on_puhti_in_one_line_naming_both() -> None:
    words = _listing("torch-2.14.1-cu130-x86_64").words()
    findings = _site_judge(words, "2.14.1+cu130", "puhti")
    assert [f.level for f in findings] == ["error"]
    assert findings[0].message.startswith(
        "torch 2.14.1+cu130 in this image has kernels for sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 "
        "sm_103 sm_120 sm_121; puhti's V100 32GB is sm_70 (NVIDIA")
    assert "\n" not in findings[0].message
    assert _site_judge(words, "2.14.1+cu130", "mahti") == []
    assert _site_judge(_listing("torch-2.14.1-cu130-aarch64").words(), "2.14.1+cu130",
                       "olivia") == []
    assert _site_judge(_listing("torch-2.10.0-cu128-x86_64").words(), "2.10.0+cu128",
                       "puhti") == []


def test_ptx_only_is_a_warning_and_unreadable_is_an_error() -> None:
    findings = _site_judge("sm_60 compute_60", "2.1.0+cu118", "puhti")
    assert [(f.level, f.rule) for f in findings] == [("warning", "gpu-arch")]
    assert "no sm_70 kernels, only PTX" in findings[0].message
    unread = _site_judge("", "2.14.1+cu130", "mahti")
    assert [f.level for f in unread] == ["error"]
    assert "could not be read" in unread[0].message and "sm_80" in unread[0].message


def test_the_stack_keeps_architectures_and_cudnn() -> None:
    facts = {"torch": {"version": "2.14.1+cu130", "build": "cuda", "cuda": "13.0",
                       "cudnn": 92400, "fatbin": "ELF file 1: x.1.sm_90.cubin"}}
    stack = probing.summary(facts)
    assert (stack["gpu_arches"], stack["cudnn"]) == ("sm_90", "9.24.0")
    assert stack["gpu_arches_source"] == "fatbinary of libtorch_cuda.so"
    assert probing.summary({"torch": {"build": "cpu", "arch_flags": "sm_90"}})["gpu_arches"] \
        is None
    assert gpuarch.cudnn_version(8906) == "8.9.6" and gpuarch.cudnn_version(None) is None


def test_a_site_without_gpu_arch_says_not_checked() -> None:
    local = load_sites(ROOT)["local"]
    assert [f.level for f in sitefit.gpu_arch_findings({"gpu_arches": "sm_90"}, local.gpus,
                                                       "local")] == ["info"]
