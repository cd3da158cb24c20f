"""A stand-in for a built image (random bytes with a provenance record) and the plain values
publishing takes, for unit tests of publish and verify that need no Apptainer."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from containers.host.facts import host_arch
from containers.host.runtime import Runtime
from containers.inputs.recipes import Target
from tests.fixtures.data import load_targets
from containers.inputs.settings import Settings, load_settings
from containers.inputs.sites import Site, load_sites
from containers.publish.modulefile import ModuleSpec
from containers.publish import catalogue as cat
from containers.publish.planning import PublishPlan, PublishRequest, plan_publish
from containers.publish.publisher import publish
from containers.report import Say
from tests.fixtures import ROOT

RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")
#: A value with every character a module file or wrapper must quote.
NASTY = 'say "hi" \\ it\'s ]] end\nnext\tline\x01'
IMAGE = os.urandom(50_000)
SHA = hashlib.sha256(IMAGE).hexdigest()
#: The identity labels the stand-in image carries, as its ranks read them inside it.
LABELS = {"containers.target": "cpu", "containers.inputs-hash": "1e9c228c71566f9d",
          "containers.build-date": "2026-11-21T05:27:24Z",
          "org.label-schema.build-date": "Saturday_21_November_2026_05:27:30_UTC"}
#: The stack a build records for the cpu image (containers.image.inspect.summary's keys).
STACK = {"arch": host_arch(), "os": "Debian GNU/Linux 12 (bookworm)", "glibc": "2.36",
         "python": "3.11.2", "torch": "2.13.0+cpu", "build": "cpu", "cuda": None, "cudnn": None,
         "hip": None, "rocm": None, "nccl": None, "nccl_linkage": None, "gpu_arches": None,
         "gpu_arches_source": None, "deepspeed": "0.19.8"}


@dataclasses.dataclass
class Built:
    """A stand-in for a built image: its settings, target (no %test), site and a publish folder."""

    settings: Settings
    target: Target
    site: Site
    dest: Path

    @classmethod
    def make(cls, root: Path) -> "Built":
        settings = load_settings(root, {"images_dir": str(root / "images"),
                                        "results_dir": str(root / "results")})
        settings.images_dir.mkdir()
        settings.image_path("cpu").write_bytes(IMAGE)
        settings.provenance_path("cpu").write_text(json.dumps({
            "target": "cpu", "sha256": SHA, "build_date": "2026-11-21T05:27:24Z",
            "arch": host_arch(), "squashfs": "gzip", "inputs_hash": "1e9c228c71566f9d",
            "labels": {"dropped": "from the catalogue", **LABELS}, "stack": STACK}))
        # what a build read from the image (the stack above, the SBOM): publish's site fit
        # judges those without starting the stand-in
        settings.images_dir.joinpath("cpu.sif.cdx.json").write_text('{"components": []}\n')
        target = load_targets(ROOT)["cpu"].model_copy(update={"test": False})
        return cls(settings, target, load_sites(ROOT)["local"], root / "pub")

    def plan(self, inputs_hash: str | None = None, **request) -> PublishPlan:
        request = {"target": "cpu", "dest": self.dest, **request}
        return plan_publish(PublishRequest(**request), target=self.target, site=self.site,
                            settings=self.settings, inputs_hash=inputs_hash)

    def publish(self, lines: list[str] | None = None, **request) -> dict:
        """Publish with no quick check expected (``skip_checks`` or an existing verdict)."""
        return publish(self.plan(**request), RUNTIME, quick_check=no_quick_check,
                       say=(lines if lines is not None else []).append)

    def quick_check_writing_verdict(self):
        """A quick check that passes and writes this image's verdict, as the 2-rank smoke does."""
        def run(say: Say) -> None:
            smoke_run(self.settings.results_dir / "smoke" / "quick", sha256=SHA,
                      date="2026-11-21T06:00:00Z")
            say("smoke: PASS")
        return run


def smoke_run(folder: Path, *, sha256: str, evidence: bool = True,
              labels: dict[str, str] | None = None, **record) -> Path:
    """A smoke run's folder as ``invoke smoke`` leaves it: its ``verdict.json`` (``record``
    over a passing 2-rank CPU verdict of ``sha256``) and, with ``evidence``, the files the gate
    re-derives it from (each rank's file and device report, which holds the ``labels`` it read
    inside its image (:data:`LABELS` unless given), the results JSON and the log, all
    agreeing)."""
    verdict = {"target": "cpu", "sha256": sha256, "passed": True, "ranks": 2,
               "date": "2026-11-21T05:00:00Z", "reasons": [], **record}
    folder.mkdir(parents=True, exist_ok=True)
    ranks = verdict["ranks"]
    if evidence and isinstance(ranks, int):
        for rank in range(ranks):
            (folder / f"rank-{rank}.json").write_text(json.dumps(
                {"rank": rank, "wrong": 0, "finished": "2026-11-21T05:00:00Z"}))
            (folder / f"device-{rank}.json").write_text(json.dumps(
                {"rank": rank, "device": "cpu", "build": "cpu",
                 "image": LABELS if labels is None else labels}))
        for name in ("allreduce.json", "all_reduce.json"):
            (folder / name).write_text(json.dumps(smoke_report(ranks)))
        (folder / "run.log").write_text("# Out of bounds values : 0 OK\n")
    path = folder / "verdict.json"
    path.write_text(json.dumps(verdict))
    return path


def smoke_report(ranks: int, **changes) -> dict:
    """A finished 2-size all_reduce report as jobs/allreduce.py writes it (its ``<op>.json``
    holds the same, being the only op)."""
    rows = [{"op": "all_reduce", "bytes": size, "oop": {"time_us": 9.0, "algbw": 1.0,
                                                        "busbw": 1.0, "wrong": 0},
             "ip": {"time_us": 9.0, "algbw": 1.0, "busbw": 1.0, "wrong": 0},
             "wrong_cycles": []} for size in (1024, 2048)]
    return {"schema": 2, "ops": ["all_reduce"], "world_size": ranks, "ok": True,
            "wrong_total": 0, "results": rows, "finished": "2026-11-21T05:00:00Z",
            "collectives": {"all_reduce": {"wrong_total": 0, "ok": True}}, **changes}


def no_quick_check(say: Say) -> None:
    raise AssertionError("the quick check was not expected to run")


def module_spec(**changes) -> ModuleSpec:
    """A LUMI-like module spec whose description and environment hold :data:`NASTY`."""
    base = dict(target="lumi-rocm", version="1.0", description=f"desc {NASTY}",
                image="/appl/containers/lumi-rocm/1.0.sif",
                bin_dir="/appl/containers/lumi-rocm/bin",
                runtime="singularity", gpu_flag="--rocm",
                binds=("/var/spool/slurmd", "/opt/cray", "/pfs:/pfs:ro"),
                env={"NCCL_SOCKET_IFNAME": "hsn", "WEIRD": NASTY}, sha256="ab" * 32,
                signed_by="F" * 40, published="2026-11-21T00:00:00Z")
    return ModuleSpec(**{**base, **changes})


def tree(dest: Path) -> dict[str, object]:
    """Every name under ``dest`` with its bytes (a file) or its target (a link): a snapshot a
    failed publish must leave exactly as it was (the lock file aside)."""
    found: dict[str, object] = {}
    for path in sorted(dest.rglob("*")):
        name = str(path.relative_to(dest))
        if path.name == cat.LOCK_NAME:
            continue
        found[name] = (os.readlink(path) if path.is_symlink() else
                       "folder" if path.is_dir() else path.read_bytes())
    return found

