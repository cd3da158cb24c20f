"""Every seed cluster: exact exec, launch and build commands with the site facts from FACTS.md."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from containers.app.build import build
from containers.app.inputs import check_inputs
from containers.app.project import Project
from containers.errors import ConfigError, Problems
from containers.host.facts import cotainr_binary
from containers.host.runtime import assumed_runtime
from containers.host.sources import PipConfig
from containers.image import builder
from containers.image.plan import HostFacts, plan_build
from tests.fixtures.data import load_targets
from containers.inputs.settings import load_settings
from containers.inputs.sites import detect_site, expand, load_sites
from containers.prove.kind import plan as plan_run
from containers.prove.smoke import SmokeOptions
from containers.prove.train import TrainOptions

JOB_ENV = {"USER": "alice", "SLURM_JOB_ID": "4242"}


@pytest.fixture
def data_world(data_root):
    return load_targets(data_root), load_sites(data_root)


def _option_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_every_shipped_target_and_site_checks(data_root) -> None:
    lines: list[str] = []
    check_inputs(Project.load(data_root, {}), say=lines.append)
    for name in ("cpu", "debian-base", "lumi-rocm", "lumi-rocm-def", "olivia-cuda",
                 "puhti-cuda", "mahti-cuda", "derecho-cuda"):
        assert any(line.startswith(f"ok  target {name} ") for line in lines), name
    for name in ("local", "lumi", "olivia", "puhti", "mahti", "derecho"):
        assert any(line.startswith(f"ok  site   {name} ") for line in lines), name


def test_lumi_smoke_command(data_world, data_settings) -> None:
    targets, sites = data_world
    lumi = sites["lumi"]
    plan = plan_run(targets["lumi-rocm"], lumi, settings=data_settings,
                      runtime=assumed_runtime("singularity"), options=SmokeOptions(gpus=8),
                      run_id="r", environ=JOB_ENV)
    argv = plan.argv
    assert argv[:3] == ["singularity", "exec", "--rocm"] and "--nv" not in argv
    assert _option_values(argv, "--bind")[2:] == [
        "/var/spool/slurmd", "/opt/cray", "/usr/lib64/libcxi.so.1", "/pfs", "/scratch",
        "/projappl", "/project", "/flash", "/appl"]
    assert _option_values(argv, "--env") == [
        "NCCL_SOCKET_IFNAME=hsn", "MIOPEN_USER_DB_PATH=/tmp/alice-miopen-cache-4242",
        "MIOPEN_CUSTOM_CACHE_DIR=/tmp/alice-miopen-cache-4242",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "ROCR_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
        # the network's own (transport.env: its transport applies from one node)
        "NCCL_NET_GDR_LEVEL=3", "CXI_FORK_SAFE=1", "CXI_FORK_SAFE_HP=1",
        "FI_CXI_DISABLE_CQ_HUGETLB=1",
        # LUMI declares its transport: RCCL must print which network it used, and must use
        # the aws-ofi-rccl plugin's or stop (no silent fallback to TCP sockets).
        "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET", "NCCL_NET=AWS Libfabric"]
    assert argv[argv.index(str(data_settings.images_dir / "lumi-rocm.sif")) + 1:][:3] == [
        "torchrun", "--standalone", "--nproc-per-node=8"]
    # The ranks are told to expect ROCm GPUs on RCCL, and (the whole node under one torchrun)
    # to pin themselves to their GCD's cores, in the order of the profile's masks.
    assert argv[-6:] == ["--expect-gpu", "rocm", "--backend", "nccl", "--rank-cores",
                         "49-55:57-63:17-23:25-31:1-7:9-15:33-39:41-47"]
    assert plan.cores_note.startswith("cores: rank 0 cores 49-55, rank 1 cores 57-63, ")
    # Inside an allocation that already limits the GCDs, the allocation's choice stands.
    partial = plan_run(targets["lumi-rocm"], lumi, settings=data_settings,
                         runtime=assumed_runtime("singularity"), options=SmokeOptions(gpus=2),
                         run_id="r", environ={**JOB_ENV, "ROCR_VISIBLE_DEVICES": "4,5"})
    assert not any(v.startswith("ROCR_VISIBLE_DEVICES=") for v in
                   _option_values(partial.argv, "--env"))
    # Two GCDs of a shared node: which cores Slurm gave is the allocation's business.
    assert "--rank-cores" not in partial.argv and partial.cores_note is None
    with pytest.raises(ConfigError, match=r"needs \$SLURM_JOB_ID, which is not set here"):
        plan_run(targets["lumi-rocm"], lumi, settings=data_settings,
                   runtime=assumed_runtime("singularity"), options=SmokeOptions(gpus=8),
                   run_id="r", environ={"USER": "alice"}, strict=True)
    assert lumi.cpu_bind[0] == "0x00fe000000000000" and lumi.cpu_bind[7] == "0x0000fe0000000000"
    assert (lumi.cores_per_node, lumi.fakeroot, lumi.runtime) == (56, False, "singularity")
    assert lumi.reference(partition="standard-g", nodes=1, ranks_per_node=8).value == 125.0
    assert lumi.reference(partition="dev-g", nodes=2, ranks_per_node=8).bounds == (80.75, None)
    assert lumi.transport.expect == "NET/OFI Selected [Pp]rovider is cxi"


def test_olivia_train_command(data_world, data_settings) -> None:
    targets, sites = data_world
    olivia = sites["olivia"]
    plan = plan_run(targets["olivia-cuda"], olivia, settings=data_settings,
                      runtime=assumed_runtime("apptainer"), run_id="r", environ={},
                      options=TrainOptions(example="ddp", gpus=4, model="wideresnet"))
    argv = plan.argv
    assert argv[:3] == ["apptainer", "exec", "--nv"] and "--rocm" not in argv
    assert _option_values(argv, "--env") == [
        "NCCL_PROTO=^LL128", "NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "CUDA_VISIBLE_DEVICES=0,1,2,3"]
    image = str(data_settings.images_dir / "olivia-cuda.sif")
    assert argv[argv.index(image) + 1] == "/usr/local/bin/torchrun"
    assert "/cluster" in _option_values(argv, "--bind")
    assert (olivia.gpus.max_per_job, olivia.gpus.per_node, olivia.cores_per_node) == (32, 4, 288)
    assert olivia.transport.env["FI_PROVIDER"] == "cxi"
    assert "$EBROOTNCCL:/opt/nccl" in olivia.transport.binds
    with pytest.raises(ConfigError, match="olivia nodes have 4 GPUs; --gpus 8"):
        plan_run(targets["olivia-cuda"], olivia, settings=data_settings,
                   runtime=assumed_runtime("apptainer"), run_id="r", environ={},
                   options=TrainOptions(example="ddp", gpus=8))


@pytest.mark.parametrize("site, env", [
    ("puhti", ["TORCH_NCCL_ASYNC_ERROR_HANDLING=1"]),
    ("mahti", ["TORCH_NCCL_ASYNC_ERROR_HANDLING=1"]),
    # one node: NVLink, none of the network's variables (transport.env, from 2 nodes)
    ("derecho", ["NCCL_SOCKET_IFNAME=hsn", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"]),
])
def test_nvidia_x86_sites(data_world, data_settings, site, env) -> None:
    targets, sites = data_world
    plan = plan_run(targets[f"{site}-cuda"], sites[site], settings=data_settings,
                      runtime=assumed_runtime("apptainer"), options=SmokeOptions(gpus=4),
                      run_id="r", environ={})
    assert plan.argv[:3] == ["apptainer", "exec", "--nv"]
    assert _option_values(plan.argv, "--env") == env + ["CUDA_VISIBLE_DEVICES=0,1,2,3"]
    assert sites[site].gpus.per_node == 4
    assert sites["derecho"].scheduler == "pbs" and sites["derecho"].launcher == "mpiexec-torchrun"


def _host(runtime) -> HostFacts:
    return HostFacts(runtime=runtime, pip=PipConfig(), git_revision="g", build_date="d")


def test_build_commands_for_gpu_targets(data_world, data_settings) -> None:
    targets, _ = data_world
    apptainer = assumed_runtime("apptainer")
    (ngc,) = plan_build(targets, "puhti-cuda", settings=data_settings, host=_host(apptainer)).steps
    assert ngc.build_argv[:5] == ["apptainer", "build", "--force", "--notest", "--fakeroot"]
    assert "NGC_TAG=25.06-py3" in ngc.build_argv and "TARGET=puhti-cuda" in ngc.build_argv
    assert ngc.build_argv[-1].endswith("/definition.def")  # the staged copy, with its labels
    assert ngc.target.definition.name == "ngc.def"
    mahti = plan_build(targets, "mahti-cuda", settings=data_settings, host=_host(apptainer))
    assert mahti.steps[0].target.definition == ngc.target.definition  # one shared definition
    assert mahti.steps[0].inputs_hash != ngc.inputs_hash
    (cot,) = plan_build(targets, "lumi-rocm", settings=data_settings, host=_host(apptainer)).steps
    shim = cot.workdir / "bin"
    assert cot.build_argv == [
        "cotainr", "build", str(cot.partial),  # HostFacts' default binary name
        "--base-image=/appl/local/containers/sif-images/lumi-rocm-rocm-6.2.4.sif",
        f"--conda-env={data_world[0]['lumi-rocm'].env}", "--accept-licenses"]
    assert cot.links == {str(shim / "singularity"): "apptainer"}
    assert cot.env["PATH"] == f"{shim}:$PATH"
    assert cot.test_argv[:2] == ["apptainer", "exec"] and "import torch" in cot.test_argv[-1]
    other = plan_build(targets, "lumi-rocm", settings=data_settings, host=_host(apptainer),
                       cli_args={"BASE_IMAGE": "/my/rocm-6.3.sif"}).steps[0]
    assert "--base-image=/my/rocm-6.3.sif" in other.build_argv
    assert other.inputs_hash != cot.inputs_hash
    with pytest.raises(ConfigError, match="'ROCM_VERSION' does not apply to a cotainr target"):
        plan_build(targets, "lumi-rocm", settings=data_settings, host=_host(apptainer),
                   cli_args={"ROCM_VERSION": "7"})
    # SingularityCE is called as itself: no shim.
    sing = plan_build(targets, "lumi-rocm", settings=data_settings,
                      host=_host(assumed_runtime("singularity"))).steps[0]
    assert sing.links == {} and "PATH" not in sing.env


def test_arch_and_fakeroot_refusals(data_root, monkeypatch) -> None:
    project = Project.load(data_root, {})
    # Without emulation of aarch64: the plan is still shown, with where to build it (a build
    # job); a real build is refused in one line naming what to install.
    monkeypatch.setattr(importlib.import_module("containers.app.build"), "emulation",
                        lambda arch: "binfmt_misc is not mounted: install qemu-user-static")
    lines: list[str] = []
    plan = build(project, target="olivia-cuda", dry_run=True, say=lines.append)
    assert plan.steps and any("build job" in line and "without emulation" in line
                              for line in lines), lines
    with pytest.raises(ConfigError, match=r"olivia-cuda.yaml:3: arch: target 'olivia-cuda' is "
                                          r"aarch64 but this machine is x86_64 and cannot "
                                          r"emulate it: .*qemu-user-static.*build job"):
        build(project, target="olivia-cuda", say=lambda line: None)
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "lumi")  # as on a LUMI node
    project = Project.load(data_root, {})
    assert project.current_site().name == "lumi"
    with pytest.raises(ConfigError, match=r"lumi.yaml:\d+: fakeroot: rocm.def has a %post.*cotainr"):
        build(project, target="lumi-rocm-def", dry_run=True, say=lambda line: None)
    # On LUMI itself the real runtime is looked up (this machine's apptainer stands in for it).
    assert project.runtime_for(project.sites["lumi"], dry_run=True).version != "unknown"
    monkeypatch.delenv("SLURM_CLUSTER_NAME")
    project = Project.load(data_root, {})
    assert project.runtime_for(project.sites["lumi"], dry_run=True).binary == "singularity"


def test_expand_host_variables() -> None:
    assert expand("/tmp/${USER}-x-$SLURM_JOB_ID", JOB_ENV, strict=True) == "/tmp/alice-x-4242"
    assert expand("/tmp/$USER-$NOPE", JOB_ENV, strict=False) == "/tmp/alice-$NOPE"
    # $$ is for the container: Apptainer expands --env values in the container's environment.
    assert expand("/opt/nccl/lib:$$LD_LIBRARY_PATH", {}, strict=True) == \
        "/opt/nccl/lib:$LD_LIBRARY_PATH"


@pytest.mark.apptainer
def test_cotainr_sandbox_path_runs_on_real_apptainer(cpu_image: Path, real_project,
                                                     real_runtime, tmp_path: Path) -> None:
    """cotainr's own build path (sandbox from a base image, its env and labels, SIF) through
    the singularity shim, for real. Only the Conda step (a Miniforge download) cannot run here."""
    base = cpu_image.with_name("debian-base.sif")
    settings = load_settings(real_project.root, {"images_dir": str(tmp_path / "images"),
                                                      "tmp_dir": str(tmp_path / "work")})
    host = HostFacts(runtime=real_runtime, pip=PipConfig(), git_revision="g", build_date="d",
                     cotainr=cotainr_binary())
    (step,) = plan_build(real_project.targets, "lumi-rocm", settings=settings, host=host,
                         cli_args={"BASE_IMAGE": str(base)}).steps
    builder._stage(step)
    argv = [a for a in step.build_argv if not a.startswith("--conda-env=")]
    env = {**os.environ, **{k: os.path.expandvars(v) for k, v in step.env.items()}}
    step.partial.parent.mkdir(parents=True)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    labels = subprocess.run(real_runtime.exec_argv(image=step.partial, command=[
        "cat", "/.singularity.d/labels.json"]), capture_output=True, text=True, check=True).stdout
    assert "cotainr" in labels.lower()
    out = subprocess.run(real_runtime.exec_argv(image=step.partial, command=[
        "python3", "-c", "print('inside', 6 * 7)"]), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "inside 42"


def test_site_detection_rules(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "local.yaml").write_text("description: here\n")
    (tmp_path / "sites" / "big.yaml").write_text(
        "description: a cluster\ngpus: {kind: rocm, per_node: 8}\ndefault_target: big-rocm\n"
        "detect:\n  env: [CLUSTER_NAME=big]\n  hostname: ['uan*']\n")
    sites = load_sites(tmp_path)
    assert sites["big"].gpus.kind.flag == "--rocm"
    assert detect_site(sites, {"CLUSTER_NAME": "big"}, "laptop").name == "big"
    assert detect_site(sites, {}, "uan01").name == "big"
    assert detect_site(sites, {"CLUSTER_NAME": "other"}, "laptop") is None
    assert sites["local"].matches({"CLUSTER_NAME": "big"}, "uan01") is False  # no rules


def test_gpu_site_needs_gpus_per_node(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "x.yaml").write_text("description: x\ngpus:\n  kind: cuda\n")
    with pytest.raises(ConfigError, match="x.yaml:3: gpus.per_node: a GPU site needs"):
        load_sites(tmp_path)


def test_transport_net_forces_the_network(data_world, tmp_path: Path) -> None:
    _, sites = data_world
    # The Slingshot sites force the aws-ofi plugin, the InfiniBand ones NCCL's IB transport:
    # NCCL/RCCL fail instead of using sockets. A CPU site has no NCCL network.
    for name in ("lumi", "olivia", "derecho"):
        assert sites[name].transport.net == "AWS Libfabric", name
    assert sites["puhti"].transport.net == sites["mahti"].transport.net == "IB"
    assert sites["local"].transport.net is None
    (tmp_path / "sites").mkdir()
    profile = tmp_path / "sites" / "x.yaml"
    head = "description: x\ntransport:\n  name: OFI\n  expect: NET/OFI\n"
    profile.write_text(head + "  net: OFI\n")
    site = load_sites(tmp_path)["x"]
    assert (site.transport.net, site.transport.name) == ("OFI", "OFI")
    profile.write_text(head)
    assert load_sites(tmp_path)["x"].transport.net is None
    profile.write_text(head + "  net: 3\n")
    with pytest.raises(ConfigError, match=r"x.yaml:5: transport.net: must be a string, got int"):
        load_sites(tmp_path)
    for bad in ('""', '" AWS Libfabric"'):
        profile.write_text(head + f"  net: {bad}\n")
        with pytest.raises(ConfigError, match=r"x.yaml:5: transport.net: must name the network"):
            load_sites(tmp_path)


# ------------------------------------------------------------- partitions and hostile values
#: A node of 4 CUDA GPUs (a profile's third line).
_GPUS = "gpus: {kind: cuda, per_node: 4}\n"


def _profile(tmp_path: Path, text: str) -> Path:
    (tmp_path / "sites").mkdir(exist_ok=True)
    path = tmp_path / "sites" / "x.yaml"
    path.write_text("description: x\nscheduler: slurm\n" + text)
    return path


def test_partitions_as_data_and_the_older_list_of_names(tmp_path: Path) -> None:
    _profile(tmp_path, "partitions:\n  short:\n    max_time: \"00:15:00\"\n    max_nodes: 2\n"
                       "    max_gpus: 8\n  long:\n    max_time: \"3-00:00:00\"\n"
                       "    whole_nodes: true\n    gpu_request: gres\n    gres_type: v100\n"
                       "default_partition: short\n")
    site = load_sites(tmp_path)["x"]
    assert tuple(site.partitions) == ("short", "long")
    short, long = site.partition("short"), site.partition("long")
    assert (short.max_time, short.max_nodes, short.max_gpus) == (900, 2, 8)
    assert (long.max_time, long.whole_nodes, long.gres_type) == (259200, True, "v100")
    assert site.partition(None).max_time is None  # the scheduler's default: nothing known
    # sites/local*.yaml and older profiles: a list of names, no limits
    _profile(tmp_path, "partitions: [a, b]\ndefault_partition: b\n")
    site = load_sites(tmp_path)["x"]
    assert tuple(site.partitions) == ("a", "b") and site.partition("a").max_nodes is None
    shipped = load_sites(Path(__file__).resolve().parents[2])
    assert shipped["puhti"].partition("gputest").max_time == 15 * 60
    assert shipped["puhti"].gpus.gres_type == "v100" and shipped["mahti"].gpus.gres_type == "a100"
    assert shipped["lumi"].partition("standard-g").whole_nodes
    assert shipped["derecho"].job_modules == ("cuda", "apptainer")
    assert all(shipped[s].account_required for s in ("lumi", "puhti", "mahti", "olivia",
                                                     "derecho"))
    assert not shipped["local-slurm"].account_required


def test_a_site_states_what_every_job_needs_and_its_runtime(tmp_path: Path) -> None:
    """Slurm's own spellings in job.directives; a default QoS that names one of qos (a PBS
    site has none); a site offering another runtime passes with the module that provides
    Apptainer."""
    _profile(tmp_path, "qos:\n  debug: {max_time: '00:30:00', source: p}\ndefault_qos: debug\n"
                       "job:\n  gpu_directives: ['-C gpu&hbm80g']\noffered_runtimes: [shifter]\n"
                       "runtime_module: apptainer\nthreads_per_core: 2\ncores_per_node: 64\n")
    site = load_sites(tmp_path)["x"]
    assert (site.default_qos, site.job.gpu_directives) == ("debug", ("-C gpu&hbm80g",))
    assert (site.job_modules, site.cpus_per_node) == (("apptainer",), 128)
    path = tmp_path / "sites" / "x.yaml"
    path.write_text(path.read_text().replace("scheduler: slurm", "scheduler: pbs")
                    .replace("'-C gpu&hbm80g'", "'-l place=scatter'"))
    with pytest.raises(ConfigError, match="default_qos: only Slurm sites have a QoS"):
        load_sites(tmp_path)


@pytest.mark.parametrize("text, where", [
    # issue 14 item 14: negative counts
    ("gpus: {per_node: -4}\n", "x.yaml:3: gpus.per_node: must not be negative (got -4)"),
    ("cores_per_node: -1\n", "x.yaml:3: cores_per_node: must not be negative"),
    ("memory:\n  per_gpu_gb: -60\n", "x.yaml:4: memory.per_gpu_gb: must not be negative"),
    ("gpus:\n  max_per_job: -32\n", "x.yaml:4: gpus.max_per_job: must not be negative"),
    # binds: one SRC, SRC:DST or SRC:DST:OPTS (ro/rw) each
    ("binds: [/scratch, '/a,/etc']\n", "x.yaml:3: binds[1]: '/a,/etc' has a comma"),
    ("binds:\n  - /a:/b:/c:ro\n", "x.yaml:4: binds[0]: '/a:/b:/c:ro' is not SRC, SRC:DST"),
    ("binds: ['/a:/b:exec']\n", "x.yaml:3: binds[0]: '/a:/b:exec': bind options must be ro or rw"),
    ("binds: [':/b']\n", "x.yaml:3: binds[0]: ':/b' is not SRC"),
    ("transport:\n  binds: ['/usr/lib64:/usr/lib64,/etc']\n", "x.yaml:4: transport.binds[0]: "),
    # environment names that are not shell identifiers
    ("env:\n  BAD-NAME: 1\n", "x.yaml:4: env.BAD-NAME: 'BAD-NAME' is not an environment "
                              "variable name"),
    ("transport:\n  env:\n    '1X': a\n", "x.yaml:5: transport.env.1X: "),
    ("env:\n  'A B': 1\n", "env.A B: "),
    # partitions
    ("partitions:\n  p:\n    max_time: 12:00:00\n",
     "x.yaml:5: partitions.p.max_time: write the time in quotes"),
    ("partitions:\n  p:\n    max_time: '12h'\n",
     "x.yaml:5: partitions.p.max_time: '12h' is not a time"),
    ("partitions:\n  p:\n    max_nodes: 0\n", "x.yaml:5: partitions.p.max_nodes: must be at "
                                               "least 1"),
    ("partitions:\n  p:\n    max_time: '00:15:00'\n    default_time: '01:00:00'\n",
     "partitions.p.default_time: is longer than max_time"),
    ("partitions:\n  p:\n    max_tme: '1:00:00'\n", "partitions.p.max_tme: unknown key in "
                                                    "partition p (did you mean 'max_time'?)"),
    ("partitions: [a, 3]\n", "x.yaml:3: partitions: must be a list of partition names"),
    # issue 49: what a site requires of every job, its default QoS, its runtime
    ("qos:\n  debug: {source: p}\ndefault_qos: regular\n",
     "x.yaml:5: default_qos: 'regular' is not one of qos"),
    ("job:\n  directives: [--constraint=gpu, --time=1]\n",
     "x.yaml:4: job.directives[1]: '--time=1' names --time, which the tool sets: use --time"),
    ("job:\n  gpu_directives: ['-C a b']\n", "x.yaml:4: job.gpu_directives[0]: '-C a b' "
                                               "takes one scheduler option"),
    ("offered_runtimes: [podman-hpc, shifter]\n", "x.yaml:3: offered_runtimes: the site "
     "offers podman-hpc, shifter, not apptainer, which the tool's jobs run: name the module "
     "that provides it (runtime_module)"),
    ("threads_per_core: 0\n", "x.yaml:3: threads_per_core: must be at least 1"),
    ("gpus:\n  request: gres\n", "x.yaml:4: gpus.request: request gres needs gres_type"),
    # issue 41: jobs ask at most what a node allocates, and the figure names its page
    (_GPUS + "memory:\n  per_gpu_gb: 95\n  source: guide\npartitions:\n  gpu:\n"
     "    allocatable_gb: 373\n    allocatable_source: table\n",
     "x.yaml:5: memory.per_gpu_gb: 95 GB per GPU x 4 GPUs = 380 GB is more than a node of "
     "partition gpu allocates (373 GB: table); at most 93 per GPU"),
    (_GPUS + "memory:\n  per_gpu_gb: 93\n  source: guide\npartitions:\n  gpu:\n"
     "    max_nodes: 2\n", "x.yaml:8: partitions.gpu: partition gpu has GPUs but no "
                          "allocatable_gb, so memory.per_gpu_gb (93) cannot be checked"),
    ("partitions:\n  p:\n    allocatable_gb: 373\n",
     "partitions.p.allocatable_source: allocatable_gb needs allocatable_source"),
    # a runtime that reads no compression mounts no image
    ("squashfs:\n  reads: []\n", "x.yaml:4: squashfs.reads: must name at least one"),
])
def test_bad_site_values_are_refused_at_load_with_file_line_and_key(tmp_path: Path, text: str,
                                                                     where: str) -> None:
    _profile(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_sites(tmp_path)
    assert where in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("value, why", [
    ('"$(touch /tmp/x)"', "holds command substitution"),
    ("'`id`'", "holds command substitution"),
    ('"$$(id)"', "holds command substitution"),  # $$ becomes $ for the container: still code
    ('"${HOME:-$(id)}"', "holds command substitution"),
    ('"a\\nb"', "holds a newline"),
    ('"a\\rb"', "holds a carriage return"),
])
def test_env_values_that_run_code_or_break_lines_are_refused(tmp_path: Path, value: str,
                                                             why: str) -> None:
    """Apptainer evaluates --env and APPTAINERENV_* values when the container starts (measured:
    --env 'C=$(echo RAN)' gives C=RAN), in smoke runs and for every user of a published module."""
    _profile(tmp_path, f"env:\n  OK: /opt/$USER:$$LD_LIBRARY_PATH\n  C: {value}\n")
    with pytest.raises(ConfigError, match=rf"x.yaml:5: env.C: {why}"):
        load_sites(tmp_path)


def test_a_host_variable_that_brings_code_is_refused() -> None:
    with pytest.raises(ConfigError, match="expands to a value that holds command substitution"):
        expand("/tmp/$EVIL", {"EVIL": "$(touch /tmp/x)"}, strict=True)


@pytest.mark.parametrize("reference, where", [
    ("partition: nosuch, nodes: 1, ranks_per_node: 8, bytes: 1024",
     "references[0].partition: partition 'nosuch' is not one of the site's partitions"),
    ("nodes: 1, ranks_per_node: 99, bytes: 1024",
     "references[0].ranks_per_node: ranks_per_node 99 is more than the site's 8 GPUs"),
    ("nodes: 1, ranks_per_node: 8, bytes: 100000000000000000000000",
     "references[0].bytes: 100000000000000000000000 B is more than any GPU holds"),
])
def test_references_that_can_never_apply_are_refused(tmp_path: Path, reference: str,
                                                     where: str) -> None:
    _profile(tmp_path, "gpus: {kind: cuda, per_node: 8}\npartitions: [gpu]\nreferences:\n"
                       f"  - {{{reference}, busbw: [100.0, -0.05, null, GB/s], source: s}}\n")
    with pytest.raises(ConfigError, match=rf"x.yaml:6: {re.escape(where)}"):
        load_sites(tmp_path)


def test_every_problem_of_one_profile_is_reported_in_one_run(tmp_path: Path) -> None:
    _profile(tmp_path, "gpus: {per_node: -4}\ncores_per_node: -1\nbinds: ['/a,/b']\n"
                       "env:\n  C: '$(id)'\npartitions:\n  p:\n    max_nodes: 0\n"
                       "default_partition: nosuch\nreferences:\n"
                       "  - {nodes: 1, ranks_per_node: 1, bytes: 8, busbw: [1, 0, null, furlongs],"
                       " source: s}\n")
    with pytest.raises(Problems) as refused:
        load_sites(tmp_path)
    keys = [p.key for p in refused.value.problems]
    assert keys == ["gpus.per_node", "cores_per_node", "binds[0]", "env.C",
                    "partitions.p.max_nodes", "default_partition", "references[0].busbw"], keys


def test_the_job_words_of_a_profile(tmp_path: Path) -> None:
    """``job:``: the site's own words in its jobs, checked at load (one line, file:line:key)."""
    _profile(tmp_path, "job:\n  step_options: [--cpu-bind, none]\n  short_names: {smoke: smk}\n"
                       "  build_unset: [SINGULARITY_BIND]\n")
    job = load_sites(tmp_path)["x"].job
    assert (job.step_options, job.short_names, job.build_unset) == (
        ("--cpu-bind", "none"), {"smoke": "smk"}, ("SINGULARITY_BIND",))
    assert load_sites(Path(__file__).resolve().parents[2])["puhti"].job.step_options == ()
    for text, key, message in (
            ("job:\n  build_unset: [\"A B\"]\n", "job.build_unset[0]",
             "'A B' is not an environment variable name"),
            ("job:\n  short_names: {smoke: \"s k\"}\n", "job.short_names.smoke",
             "'s k' is not a word"),
            ("job:\n  short_names: {\"s k\": smk}\n", "job.short_names.s k",
             "'s k' is not a word"),
            ("job:\n  step_option: [x]\n", "job.step_option", "step_options")):
        _profile(tmp_path, text)
        with pytest.raises(ConfigError) as refused:
            load_sites(tmp_path)
        assert refused.value.key == key and message in str(refused.value), str(refused.value)
        assert refused.value.line and "\n" not in str(refused.value)


def test_a_partition_of_shared_nodes_asks_its_allocatable_memory(tmp_path: Path) -> None:
    """Derecho's develop queue shares nodes: its jobs ask allocatable_gb, declared once (the
    partition's figure, not a second one); a shared partition without the figure, or one
    that is also whole_nodes, is refused in one line at its key."""
    develop = load_sites(Path(__file__).resolve().parents[2])["derecho"].partition("develop")
    assert (develop.shared_nodes, develop.allocatable_gb) == (True, 235)
    for text, message in (
            ("partitions:\n  develop: {shared_nodes: true}\n",
             "a partition of shared nodes needs allocatable_gb"),
            ("partitions:\n  develop: {shared_nodes: true, whole_nodes: true, allocatable_gb: 235,"
             " allocatable_source: x}\n", "cannot have both whole_nodes and shared_nodes")):
        _profile(tmp_path, text)
        with pytest.raises(ConfigError) as refused:
            load_sites(tmp_path)
        assert refused.value.key == "partitions.develop.shared_nodes", str(refused.value)
        assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_job_asks_at_most_a_partitions_share_of_a_node(tmp_path: Path) -> None:
    """The share per GPU is what a node allocates over its GPUs (373 GB / 4 = 93, rounded
    down); a partition of fewer GPUs per node has a larger share, a CPU partition none."""
    _profile(tmp_path, _GPUS + "memory:\n  per_gpu_gb: 93\n  source: guide\npartitions:\n"
             "  gpu:\n    allocatable_gb: 373\n    allocatable_source: table\n"
             "  two:\n    gpus_per_node: 2\n    allocatable_gb: 200\n"
             "    allocatable_source: table\n  cpu:\n    gpus_per_node: 0\n")
    site = load_sites(tmp_path)["x"]
    assert site.partition("gpu").gpu_share(site.gpus_in(site.partition("gpu"))) == 93
    assert site.partition("two").gpu_share(2) == 100 and site.partition("cpu").gpu_share(0) is None
    assert site.mem_per_gpu_gb(site.partition("gpu")) == 93
    # a site built in code (never checked as a profile) is capped all the same
    over = site.model_copy(update={"memory": site.memory.model_copy(update={"per_gpu_gb": 95})})
    assert over.mem_per_gpu_gb(over.partition("gpu")) == 93
    assert over.mem_per_gpu_gb(over.partition(None)) == 95  # no figure: the profile's own


def test_every_gpu_partition_of_the_shipped_sites_states_what_a_node_allocates() -> None:
    shipped = load_sites(Path(__file__).resolve().parents[2])
    figures = {(site.name, name): part.allocatable_gb for site in shipped.values()
               for name, part in site.partitions.items() if site.gpus_in(part)}
    assert figures == {("puhti", "gputest"): 373, ("puhti", "gpu"): 373,
                       ("mahti", "gpusmall"): 490, ("mahti", "gpumedium"): 490,
                       ("mahti", "gputest"): 490, ("lumi", "standard-g"): 480,
                       ("lumi", "small-g"): 480, ("lumi", "dev-g"): 480,
                       ("olivia", "accel"): 858, ("derecho", "main"): 480,
                       ("derecho", "develop"): 235}
    assert all(shipped[site].partition(name).allocatable_source for site, name in figures)
    assert shipped["puhti"].memory.per_gpu_gb == 93  # 4 x 95 was 380 GB of a 373 GB node
