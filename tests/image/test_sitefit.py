"""Site-fit rules on GPU image facts (tests/fixtures/image_facts) against the real site profiles,
and the probe's output parsing (the probe itself: test_probe_script.py; the SBOM: test_sbom.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.errors import ConfigError
from containers.image import inspect as probing, sitefit
from containers.image.arch import site_arches
from tests.fixtures.data import load_targets
from containers.inputs.sites import Fit, Range, load_sites
from tests.fixtures import ROOT

FACTS = ROOT / "tests" / "fixtures" / "image_facts"


def _facts(name: str) -> dict:
    return json.loads((FACTS / f"{name}.json").read_text())


def _judge(facts: dict, site_name: str, fit: Fit | None = None) -> list[sitefit.Finding]:
    site = load_sites(ROOT)[site_name]
    return sitefit.judge(probing.summary(facts), site_name=site.name, site_gpu=site.gpus.kind,
                         arches=site_arches(site, load_targets(ROOT)),
                         fit=site.fit if fit is None else fit, gpus=site.gpus)


def _errors(findings) -> dict[str, str]:
    return {f.rule: f.message for f in findings if f.level == "error"}


def test_rocm_above_the_lumi_driver_range_is_an_error() -> None:
    findings = [f for f in _judge(_facts("lumi-rocm"), "lumi") if f.level == "error"]
    assert {f.rule for f in findings} == {"rocm"}
    messages = [f.message for f in findings]
    assert messages[0].startswith("the image's ROCm 7.1.0 is above lumi's supported ROCm "
                                  "(at most 7.0")
    assert messages[1].startswith("the image's torch's HIP 7.1.25424 is above")
    assert "Update-202601" in messages[0]  # the finding carries the profile's source


def test_rocm_within_the_range_fits_and_unpublished_bounds_say_not_checked() -> None:
    facts = _facts("lumi-rocm")
    facts["rocm"], facts["torch"]["hip"] = "6.3.4", "6.3.42134"
    findings = _judge(facts, "lumi")
    assert not _errors(findings)
    infos = [f.line() for f in findings if f.level == "info"]
    assert any("glibc" in line and "not checked" in line for line in infos), infos
    assert any("RCCL" in line and "not checked" in line for line in infos), infos


def test_glibc_below_what_the_bound_libraries_need_is_an_error() -> None:
    # No site publishes that bound yet (their profiles say so): a profile that states one.
    fit = load_sites(ROOT)["lumi"].fit.model_copy(update={"glibc": Range(
        min="2.38", source="host libcxi built on glibc 2.38")})
    facts = _facts("lumi-rocm")
    facts["glibc"], facts["rocm"], facts["torch"]["hip"] = "2.31", "6.2.4", "6.2.41133"
    errors = _errors(_judge(facts, "lumi", fit))
    assert set(errors) == {"glibc"}
    assert errors["glibc"].startswith("the image's glibc 2.31 is below 2.38")


def test_static_nccl_and_wrong_arch_on_olivia_are_errors() -> None:
    errors = _errors(_judge(_facts("cuda-static-nccl"), "olivia"))
    assert set(errors) == {"arch", "nccl", "gpu-arch"}
    assert errors["arch"] == "the image is x86_64; olivia's nodes run aarch64"
    assert errors["gpu-arch"].startswith(
        "torch 1.12.1+cu113 in this image has kernels for sm_37 sm_50 sm_60 sm_70 sm_75 sm_80 "
        "sm_86; olivia's GH200 96GB is sm_90 (")
    assert "links NCCL 2.10.3 statically" in errors["nccl"]


def test_a_rocm_build_on_a_cuda_site_and_an_unreadable_torch_are_errors() -> None:
    assert "gpu" in _errors(_judge(_facts("lumi-rocm"), "mahti"))
    facts = _facts("cuda-static-nccl")
    facts["torch"] = None
    assert "torch" in _errors(_judge(facts, "puhti"))


def test_a_fit_bound_that_is_no_version_names_file_line_and_key(tmp_path: Path) -> None:
    folder = tmp_path / "sites"
    folder.mkdir()
    text = (ROOT / "sites" / "lumi.yaml").read_text().replace('max: "7.0"', 'max: "seven"')
    (folder / "lumi.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:  # when the profile loads, once
        load_sites(tmp_path)
    line = text.splitlines().index('    max: "seven"') + 1
    assert str(caught.value).endswith(f"lumi.yaml:{line}: fit.rocm.max: 'seven' is not a "
                                      "version (digits and dots)"), str(caught.value)


def test_parse_probe_skips_what_the_image_prints_first() -> None:
    out = 'hello from %environment\n@@probe@@{"probe": 1, "arch": "x86_64"}\n'
    assert probing.parse_probe(out)["arch"] == "x86_64"
    with pytest.raises(ValueError):
        probing.parse_probe("no result\n")


def test_an_image_without_torch_is_not_judged_one_whose_torch_breaks_is() -> None:
    """As the build keeps it (a base, an R image): inspect and publish say the same, never
    "torch could not be imported"; a torch that is there and fails to import is an error."""
    stack = {"arch": "x86_64", "build": None, "glibc": "2.36"}
    missing = {"torch": "ModuleNotFoundError: No module named 'torch'"}
    site = load_sites(ROOT)["lumi"]
    found = sitefit.judge(stack, site_name="lumi", site_gpu="rocm", arches=["x86_64"],
                          fit=site.fit, probe_errors=missing)
    assert found == [sitefit.Finding("info", "torch", sitefit.NO_TORCH)]
    broken = {"torch": "ImportError: libamdhip64.so: cannot open shared object file"}
    assert "torch could not be imported in the image" in _errors(sitefit.judge(
        stack, site_name="lumi", site_gpu="rocm", arches=["x86_64"], fit=site.fit,
        probe_errors=broken)).values()
