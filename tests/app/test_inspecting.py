"""``invoke inspect`` / ``invoke diff``: how an image named on the command line is found (a
target, a ``.sif`` path, a published ``DEST:TARGET@VERSION``) and which site it is judged
against. Probing a real image is tested with the CPU image in ``tests/image/``."""

from __future__ import annotations

import json

import pytest

from containers.app import inspecting
from containers.errors import UsageError
from containers.image import inspect as probing
from containers.publish import catalogue as cat


def test_a_target_resolves_to_its_image_and_site(data_project) -> None:
    ref = inspecting.resolve(data_project, "lumi-rocm", flag="--target")
    assert (ref.name, ref.target) == ("lumi-rocm", "lumi-rocm")
    assert ref.image == data_project.settings.image_path("lumi-rocm")
    assert ref.record.sha256 is None  # not built: an empty record
    assert inspecting.site_for(data_project, ref, None).name == "lumi"
    assert inspecting.site_for(data_project, ref, "local").name == "local"
    with pytest.raises(UsageError, match="no site profile sites/nowhere.yaml"):
        inspecting.site_for(data_project, ref, "nowhere")


def test_an_image_file_must_exist(data_project, tmp_path) -> None:
    with pytest.raises(UsageError, match=r"x\.sif: no such image file"):
        inspecting.resolve(data_project, str(tmp_path / "x.sif"), flag="--image")
    image = tmp_path / "mine.sif"
    image.write_bytes(b"sif")
    ref = inspecting.resolve(data_project, str(image), flag="--image")
    assert ref.target is None and ref.image == image
    # no known target: judged where it would run now, this machine's site
    assert inspecting.site_for(data_project, ref, None).name == \
        data_project.current_site().name


def test_a_published_version_is_read_from_the_catalogue(data_project, tmp_path) -> None:
    dest = tmp_path / "site"
    dest.mkdir()
    entry = {"target": "cpu", "version": "v2", **cat.layout_files("cpu", "v2"),
             "sha256": "ab" * 32, "size_bytes": 3, "published": "2026-11-20", "signed": False,
             "provenance": {"sha256": "ab" * 32}, "checks": {"smoke": {"passed": True}}}
    catalogue = cat.with_entry(cat.empty(), entry, now="2026-11-20")
    (dest / cat.CATALOGUE_NAME).write_text(json.dumps(catalogue))
    ref = inspecting.resolve(data_project, f"{dest}:cpu@latest", flag="--old")
    assert (ref.name, ref.image, ref.record.sha256) == ("cpu@v2", dest / entry["file"],
                                                        "ab" * 32)
    assert inspecting.latest_smoke(data_project, ref).passed is True
    with pytest.raises(UsageError, match="lists no cpu v9"):
        inspecting.resolve(data_project, f"{dest}:cpu@v9", flag="--old")


@pytest.mark.parametrize("cuda, series", [("13.0", "R580"), ("12.8", "R525")])
def test_inspect_names_the_driver_series_an_image_needs(capsys, cuda, series) -> None:
    stack = {"build": "cuda", "torch": "2.9.0", "cuda": cuda}
    report = {"image": "x.sif", "stack": stack, "size_bytes": 1,
              "driver_needed": probing.driver_needed(stack),
              "packages": {"debian": 0, "pip": 0}, "sbom": None, "provenance": None,
              "labels": {}}
    inspecting.show(report, [], say=lambda line: None)
    out = capsys.readouterr().out
    assert "driver needed" in out and f"NVIDIA driver {series} or newer" in out, out
