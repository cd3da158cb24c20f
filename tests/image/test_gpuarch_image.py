"""The long tier (``pytest -m cuda_images``; never in the default run): the pip-built NVIDIA
images, built for real from the package index (gigabytes), read without a GPU and judged for
their sites' GPUs; run as CPU ranks (gloo smoke, one DDP epoch) where this machine is their
site; refused by the device gate on their own GPU sites here, before any workload runs; and an
image lacking a site's GPU architecture refused by the build's test step and by publish.

``CUDA_IMAGES`` (comma list, default ``mahti-cuda-pip,puhti-cuda-pip``) chooses the targets;
``olivia-cuda-pip`` (built and run under qemu emulation) does not build on an x86_64 host today:
its torch crashes on import under qemu-user 7.2 (docs/cuda-images.md says why and what avoids it).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from containers.app.inspecting import inspect
from containers.app.project import Project
from containers.app.publishing import publish
from containers.app.workloads import prove, train
from containers.app.inspecting import examine_built
from containers.app.publishing import release_review
from containers.errors import CommandFailed, ContainersError, StateError, VerdictFailed
from containers.image import provenance
from containers.image.identity import chain_hashes
from containers.prove.smoke import SmokeOptions
from containers.publish import planning
from containers.prove.train import TrainOptions
from tests.fixtures.images import built
from tests.publish.test_publish_image import _make_project

pytestmark = [pytest.mark.cuda_images, pytest.mark.apptainer, pytest.mark.distributed]
TARGETS = os.environ.get("CUDA_IMAGES", "mahti-cuda-pip,puhti-cuda-pip").split(",")
#: What each image must hold, read from the image (CUDA, the kernels its site needs).
EXPECT = {"mahti-cuda-pip": ("13.0", "sm_80"), "derecho-cuda-pip": ("13.0", "sm_80"),
          "olivia-cuda-pip": ("13.0", "sm_90"), "puhti-cuda-pip": ("12.8", "sm_70")}


@pytest.fixture(scope="module", params=TARGETS)
def cuda_image(request, real_project, real_runtime) -> tuple[str, Path]:
    return request.param, built(real_project, request.param)


def _linked_project(tmp_path: Path, image: Path, names: dict[str, str], *,
                    unbind: str | None = None) -> Project:
    """A project copy whose images folder holds the real image (linked, not copied) under
    other targets' names (a name ``here``: its recipe on the local site); ``unbind``: that
    site's profile without its binds (its file systems are not on this machine)."""
    images = tmp_path / "images"
    images.mkdir()
    for name in names.values():
        for suffix in ("", ".cdx.json"):
            if image.with_name(image.name + suffix).exists():
                os.link(image.with_name(image.name + suffix), images / f"{name}.sif{suffix}")
    project = _make_project(tmp_path / "project", images)
    for recipe, name in names.items():
        text = (project.root / "recipes" / f"{recipe}.yaml").read_text()
        if name == "here":
            text = text.replace(f"site: {text.split('site: ')[1].split()[0]}", "site: local")
        (project.root / "recipes" / f"{name}.yaml").write_text(text)
    project = Project(root=project.root, settings=project.settings)
    for name in names.values():  # the record names the target it stands in for, as a build would
        record = provenance.read(image.with_name(image.name + ".json"))
        record.update(target=name, inputs_hash=chain_hashes(project.targets, name)[name])
        (images / f"{name}.sif.json").write_text(json.dumps(record))
    if unbind:
        profile = project.root / "sites" / f"{unbind}.yaml"
        lines = profile.read_text().splitlines(keepends=True)
        profile.write_text("".join("binds: []\n" if line.startswith("binds:") else line
                                   for line in lines))
    return Project(root=project.root, settings=project.settings)


def _gpu_verdict(project: Project, target: str, sha: str) -> None:
    """A stand-in passing 2-rank NCCL smoke verdict of the image (no GPU here to make a real
    one), so that publish reaches its review."""
    folder = project.settings.results_dir / "smoke" / f"{target}-stand-in"
    folder.mkdir(parents=True)
    (folder / "verdict.json").write_text(json.dumps({
        "kind": "smoke", "target": target, "sha256": sha, "passed": True, "ranks": 2,
        "nodes": 1, "backend": "nccl", "device_kind": "cuda", "wrong_total": 0, "cycles": 1,
        "site": target.split("-")[0], "date": "2026-11-26T00:00:00Z"}))


def test_the_record_names_cuda_cudnn_nccl_and_architectures(cuda_image) -> None:
    target, image = cuda_image
    record = provenance.read(image.with_name(image.name + ".json"))
    stack = record["stack"]
    cuda, needed = EXPECT[target]
    assert stack["build"] == "cuda" and stack["cuda"] == cuda, stack
    assert stack["torch"].endswith("+cu" + cuda.replace(".", "")), stack
    assert stack["cudnn"] and stack["nccl"] and stack["nccl_linkage"] == "dynamic", stack
    assert needed in stack["gpu_arches"].split(), stack
    assert stack["gpu_arches_source"] == "fatbinary of libtorch_cuda.so"
    assert record["fit"]["site"] == target.split("-")[0]
    assert not [f for f in record["fit"]["findings"] if f["level"] == "error"], record["fit"]


def test_inspect_shows_the_architectures(cuda_image, real_project) -> None:
    target, _ = cuda_image
    lines: list[str] = []
    report = inspect(real_project, target=target, say=lines.append)
    assert report["stack"]["gpu_arches"] and report["stack"]["cudnn"]


def test_cpu_ranks_on_the_local_site(cuda_image, tmp_path) -> None:
    target, image = cuda_image
    project = _linked_project(tmp_path, image, {target: "here"})
    lines: list[str] = []
    result = prove(project, target="here", say=lines.append,
                   options=SmokeOptions(gpus=2, sizes="64K:1M", iters=2, warmup=1,
                                            timeout=900))
    assert result.ok, "\n".join(lines[-30:])
    lines.clear()
    options = TrainOptions(gpus=2, example="ddp", model_size="tiny", epochs=1, samples=256,
                           batch_size=64, timeout=900)
    (trained,) = train(project, target="here", options=options, say=lines.append)
    assert lines[-1] == "verdict: PASS", "\n".join(lines[-30:])


def test_the_device_gate_refuses_on_its_own_site_here(cuda_image, tmp_path) -> None:
    target, image = cuda_image
    site = target.split("-")[0]
    project = _linked_project(tmp_path, image, {target: target}, unbind=site)
    lines: list[str] = []
    with pytest.raises(ContainersError) as refused:
        prove(project, target=target, say=lines.append,
              options=SmokeOptions(gpus=2, sizes="64K", iters=1, warmup=0, timeout=600))
    message = str(refused.value)
    assert "\n" not in message, message
    assert "ran on the CPU: torch saw 0 GPUs" in message, message
    (verdict,) = (project.settings.results_dir / "smoke").glob("*/verdict.json")
    record = json.loads(verdict.read_text())
    assert not record["passed"]
    # nothing ran: no rank wrote a workload result
    assert not list(verdict.parent.glob("result*.json")), "\n".join(lines[-20:])
    print(message)


def test_a_missing_architecture_is_refused_by_build_and_publish(tmp_path, real_project,
                                                                 real_runtime) -> None:
    if "mahti-cuda-pip" not in TARGETS:
        pytest.fail("needs mahti-cuda-pip (CUDA 13, no sm_70) in CUDA_IMAGES")
    image = built(real_project, "mahti-cuda-pip")
    record = provenance.read(image.with_name(image.name + ".json"))
    lines: list[str] = []
    with pytest.raises(CommandFailed) as refused:
        examine_built(real_project)(SimpleNamespace(partial=image, image=image,
                                                    target=real_project.target("puhti-cuda-pip")),
                                    real_runtime, dict(record), lines.append)
    message = str(refused.value)
    assert "does not fit site puhti: torch 2.14.1+cu130 in this image has kernels for sm_75 " \
           "sm_80" in message and "puhti's V100 32GB is sm_70" in message, message
    project = _linked_project(tmp_path, image, {"puhti-cuda-pip": "puhti-cuda-pip"})
    _gpu_verdict(project, "puhti-cuda-pip", record["sha256"])
    # A build's zstd image is refused for Puhti before anything else (its runtime is known to
    # read gzip only); the release gate, which a gzip build reaches, refuses the architecture.
    with pytest.raises(StateError, match="zstd-compressed, and site puhti's runtime is known "
                                         "to read gzip only"):
        publish(project, target="puhti-cuda-pip", dest=tmp_path / "pub", version="1.0",
                say=lines.append)
    plan = planning.plan_publish(
        planning.PublishRequest(target="puhti-cuda-pip", dest=tmp_path / "pub", version="1.0"),
        target=project.target("puhti-cuda-pip"), site=project.sites["puhti"],
        settings=project.settings,
        inputs_hash=chain_hashes(project.targets, "puhti-cuda-pip")["puhti-cuda-pip"])
    review = release_review(project, real_runtime, None)
    with pytest.raises(VerdictFailed) as published:
        review(plan, {}, lines.append)
    assert "puhti's V100 32GB is sm_70" in str(published.value)
    assert not (tmp_path / "pub" / "puhti-cuda-pip" / "1.0.sif").exists()
    shutil.rmtree(tmp_path / "images")
