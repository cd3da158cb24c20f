"""Batch jobs (``invoke job``): every site's script, exactly, and the rules every script keeps.

Golden tests of script composition in the ReFrame manner (directives, binds, environment, launch
lines, CPU masks as FACTS.md gives them), ``bash -n`` on the script of every site and workload,
no caller environment in any script, and the refusals. (Quoting: test_script.py; directives:
test_schedulers.py; launchers and rendezvous: tests/run/.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from containers.batch import job as batch, judgeenv
from containers.batch.bodies import NODE_PYTHON
from containers.batch.request import request_from_record
from containers.errors import ConfigError, ContainersError, UsageError
from containers.inputs.settings import load_settings
from containers.inputs.sites import Memory, Qos
from containers.prove import registry
from containers.prove.registry import kind_of
from containers.prove.train import TrainOptions
from tests.fixtures import ROOT
from tests.fixtures.data import with_plugin

SITES = ("lumi", "olivia", "puhti", "mahti", "derecho", "local-slurm")
TARGET = {"lumi": "lumi-rocm", "olivia": "olivia-cuda", "puhti": "puhti-cuda",
          "mahti": "mahti-cuda", "derecho": "derecho-cuda", "local-slurm": "cpu"}
#: Sites whose profile says fakeroot: false, for targets whose definition has %post.
CANNOT_BUILD = ("puhti", "mahti", "derecho")
#: Where a 2-node job goes when the default partition is a one-node one.
MULTINODE = {"mahti": "gpumedium"}
#: Sites whose profile binds no network stack its transport needs across nodes: refused.
ONE_NODE = ("derecho",)
#: When the jobs of these tests were rendered (it names their output and results folders).
STAMP = "20260101-120000"
LUMI_MASKS = ("0x00fe000000000000,0xfe00000000000000,0x0000000000fe0000,0x00000000fe000000,"
              "0x00000000000000fe,0x000000000000fe00,0x000000fe00000000,0x0000fe0000000000")


@pytest.fixture
def data_job(data_world, tmp_path):
    """render(site, workload, **request) -> batch.Job, for a project at /proj (images there).

    The submitting shell has SBATCH_ACCOUNT set unless ``environ`` says otherwise (sbatch reads
    it itself, so Slurm scripts carry no --account line); ``config`` is invoke.yaml's
    ``containers`` part."""
    targets, sites = data_world

    def render(site: str, workload: str = "smoke", *, target: str | None = None,
               host_arch: str = "x86_64", venv: Path | None = Path("/proj/.venv"),
               environ: dict | None = None, config: dict | None = None, stamp: str = STAMP,
               **request):
        settings = load_settings(Path("/proj"), {"tmp_dir": str(tmp_path), **(config or {})})
        where = sites[site] if isinstance(site, str) else site
        item = targets[target or TARGET[where.name]]
        home = targets.get(where.default_target or "")
        return batch.plan_job(batch.JobNeeds(item, where, settings=settings, host_arch=host_arch,
                              site_arch=home.arch if home else None, venv=venv),
                              batch.JobRequest(kind=kind_of(workload), **request),
                              environ={"SBATCH_ACCOUNT": "proj_env"}
                              if environ is None else environ, stamp=stamp)
    return render


def _directives(text: str, prefix: str = "#SBATCH") -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def _launch(text: str) -> str:
    """The launch command, continuation lines joined, without what keeps its output and status
    (``2>&1 | tee run.log || status=$?``)."""
    lines = text.rstrip("\n").split("\n")
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(("srun ", "mpiexec ")))
    end = next(i for i in range(start, len(lines)) if " 2>&1 | tee " in lines[i])
    joined = " ".join(line.rstrip(" \\").strip() for line in lines[start:end + 1])
    return joined.split(" 2>&1 | tee ")[0]


def _bash_n(text: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(text)
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + "\n" + text


# ------------------------------------------------------------------------------------ every site
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("workload", registry.WORKLOADS)
def test_every_site_and_workload_renders_a_valid_script(data_job, tmp_path, site,
                                                        workload) -> None:
    if workload == "build" and site in CANNOT_BUILD:
        with pytest.raises(ConfigError, match="needs --fakeroot"):
            data_job(site, workload, account="proj_1")
        return
    # --workload run: a command whose words a shell would otherwise read as code
    command = {"command": ("python", "own.py", "it's \"q\" $(id) `id`\nJOB\n")} \
        if workload == "run" else {}
    for nodes in ((1,) if workload == "build" or site in ONE_NODE else (1, 2)):
        job = data_job(site, workload, nodes=nodes, account="proj_1",
                       partition=MULTINODE.get(site) if nodes > 1 else None, **command)
        text = job.text
        _bash_n(text, tmp_path)
        assert text.startswith("#!/bin/bash\n")
        assert "set -euo pipefail\n" in text and "' ERR\n" in text
        assert "\x00" not in text
        assert "cd /proj\n" in text
        # the job's binds and environment go by flag, which the runtime adds to the user's
        # APPTAINER_BIND / SINGULARITY_BIND and APPTAINERENV_*: no job assigns one of them
        assert not re.search(r"^\s*(export\s+)?(APPTAINER|SINGULARITY)(_BIND|ENV_\w*)=", text,
                             re.M), text
        assert text.count("srun ") == 0 if site == "derecho" else text.count("mpiexec ") == 0
        if workload == "run":
            gpu_site = site not in ("local-slurm",)
            assert ("/opt/containers/jobs/gate.py --expect-gpu" in text) == gpu_site, site
            assert "--no-python" in text and "python own.py 'it'\"'\"'s" in text
            assert "exec " in text and "/opt/containers/jobs/runverdict.py" in text
            assert "pip install" not in text and "/bin/invoke" not in text
            continue
        if workload == "build":
            # LUMI's binding modules' variables: unset there only (sites/lumi.yaml job:)
            assert ("unset SINGULARITY_BIND APPTAINER_BIND" in text) == (site == "lumi")
            assert f"build --target {TARGET[site]}" in text
            continue
        launch = _launch(text)
        assert f"/proj/images/{TARGET[site]}.sif" in launch
        if nodes > 1:
            assert "--rdzv-backend=c10d" in launch
            assert '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}"' in launch
            assert "MASTER_PORT=$((20000 + " in text
        else:
            assert "--standalone" in launch and "MASTER_ADDR" not in text
        script = "allreduce.py" if workload == "smoke" else f"train.py --example {workload}"
        assert f"/opt/containers/jobs/{script}" in launch


def test_lumi_torchrun_per_node(data_job) -> None:
    job = data_job("lumi", "smoke", nodes=2, account="project_465000001")
    assert _directives(job.text) == [
        "#SBATCH --job-name=smoke-lumi-rocm", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=56", "#SBATCH --gpus-per-node=8", "#SBATCH --mem-per-gpu=60G",
        "#SBATCH --time=00:30:00", "#SBATCH --partition=standard-g",
        "#SBATCH --account=project_465000001",
        "#SBATCH --output=/proj/results/jobs/smoke-lumi-rocm-20260101-120000-%j.out"]
    launch = _launch(job.text)
    assert launch.startswith(
        "srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=56 --kill-on-bad-exit=1 "
        "singularity exec --rocm --bind /proj/jobs:/opt/containers/jobs:ro "
        '--bind "/proj/results/smoke/lumi-rocm-20260101-120000-slurm-job${SLURM_JOB_ID}'
        ':/opt/containers/results" '
        "--bind /var/spool/slurmd --bind /opt/cray --bind /usr/lib64/libcxi.so.1 --bind /pfs "
        "--bind /scratch --bind /projappl --bind /project --bind /flash --bind /appl "
        "--env NCCL_SOCKET_IFNAME=hsn "
        # MIOpen's cache in node-local /tmp, expanded on the compute node
        '--env "MIOPEN_USER_DB_PATH=/tmp/${USER}-miopen-cache-${SLURM_JOB_ID}" '
        '--env "MIOPEN_CUSTOM_CACHE_DIR=/tmp/${USER}-miopen-cache-${SLURM_JOB_ID}" '
        "--env TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
        # the network's own settings (transport.env)
        "--env NCCL_NET_GDR_LEVEL=3 --env CXI_FORK_SAFE=1 --env CXI_FORK_SAFE_HP=1 "
        "--env FI_CXI_DISABLE_CQ_HUGETLB=1 --env NCCL_DEBUG=INFO "
        # the transport enforced: RCCL stops rather than fall back to TCP sockets
        "--env NCCL_DEBUG_SUBSYS=INIT,NET --env 'NCCL_NET=AWS Libfabric' "
        "/proj/images/lumi-rocm.sif "
        "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d "
        '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}" "--rdzv-id=${SLURM_JOB_ID}" '
        "--log-dir=/opt/containers/results/torchelastic "
        "/opt/containers/jobs/allreduce.py --sizes 1K:128M")
    # One torchrun per node: each rank pins itself to its GCD's cores, and the header says so.
    assert launch.endswith("--expect-gpu rocm --backend nccl --rank-cores "
                           "49-55:57-63:17-23:25-31:1-7:9-15:33-39:41-47")
    assert "# cores: rank 0 cores 49-55, rank 1 cores 57-63, rank 2 cores 17-23" in job.text
    # The rendezvous host is found on the host, before the container starts.
    assert ('head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)\n'
            in job.text)
    assert "NodeAddr=" in job.text.split("srun ")[0]
    assert "MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))\n" in job.text
    assert job.results == "/proj/results/smoke/lumi-rocm-20260101-120000-slurm-job{job_id}"
    assert job.output_of("77") == "/proj/results/jobs/smoke-lumi-rocm-20260101-120000-77.out"


def test_lumi_one_task_per_gcd_with_masks(data_job) -> None:
    job = data_job("lumi", "ddp", nodes=2, launcher="srun-per-gpu")
    assert "#SBATCH --ntasks-per-node=8" in job.text and "#SBATCH --cpus-per-task=7" in job.text
    assert "#SBATCH --exclusive" in job.text  # CPU masks hold only on whole nodes
    launch = _launch(job.text)
    assert launch.startswith("srun --nodes=2 --ntasks-per-node=8 --cpus-per-task=7 "
                             f"--cpu-bind=mask_cpu:{LUMI_MASKS} --kill-on-bad-exit=1 "
                             "singularity exec --rocm ")
    assert '--env "MASTER_ADDR=${MASTER_ADDR}" --env "MASTER_PORT=${MASTER_PORT}"' in launch
    # Per task, inside the container: device, rank and local rank from Slurm's numbering.
    assert launch.endswith(
        "/proj/images/lumi-rocm.sif bash -c 'ROCR_VISIBLE_DEVICES=$SLURM_LOCALID "
        "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec python3 "
        "/opt/containers/jobs/train.py --example ddp --epochs 3 --batch-size 64 "
        "--out /opt/containers/results --expect-gpu rocm --backend nccl'")
    # srun binds each task to its cores: the workloads get no map of their own
    assert "--rank-cores" not in launch and "# cores:" not in job.text
    assert "MASTER_ADDR=$(scontrol show node" in job.text
    # Fewer GCDs: the masks of those GCDs, the same cores each.
    two = data_job("lumi", "smoke", nodes=1, gpus_per_node=2, launcher="srun-per-gpu")
    assert "--cpu-bind=mask_cpu:0x00fe000000000000,0xfe00000000000000 " in _launch(two.text)


def test_olivia_multinode(data_job) -> None:
    job = data_job("olivia", "ddp", nodes=2, nccl_debug=True)
    assert _directives(job.text) == [
        "#SBATCH --job-name=ddp-olivia-cuda", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=288", "#SBATCH --gpus-per-node=4", "#SBATCH --mem-per-gpu=110G",
        "#SBATCH --time=01:00:00",
        "#SBATCH --partition=accel",
        "#SBATCH --output=/proj/results/jobs/ddp-olivia-cuda-20260101-120000-%j.out"]
    text = job.text
    assert ("set +u\nmodule load NRIS/GPU NCCL/2.26.6-GCCcore-14.2.0-CUDA-12.8.0\nset -u\n"
            in text)
    assert text.index("module load") < text.index("srun ")
    launch = _launch(text)
    for bind in ('"${EBROOTLIBFABRIC}/lib:/opt/libfabric/lib"', '"${EBROOTNCCL}:/opt/nccl"',
                 '"${EBROOTAWSMINOFIMINNCCL}/lib:/opt/aws-ofi-nccl/lib"', "/usr/lib64:/usr/lib64",
                 "/cluster"):
        assert f"--bind {bind} " in launch
    for env in ("'NCCL_PROTO=^LL128'", "FI_PROVIDER=cxi", "FI_CXI_RX_MATCH_MODE=hybrid",
                # single-quoted: the CONTAINER expands $LD_LIBRARY_PATH (prepend to the image's)
                "'LD_LIBRARY_PATH=/opt/libfabric/lib:/opt/nccl/lib:/opt/aws-ofi-nccl/lib:"
                "/usr/lib64:$LD_LIBRARY_PATH'",
                "NCCL_DEBUG=INFO"):
        assert f"--env {env} " in launch
    assert ("apptainer exec --nv " in launch and "--rocm" not in launch)
    assert ("/proj/images/olivia-cuda.sif /usr/local/bin/torchrun --nnodes=2 "
            "--nproc-per-node=4 --rdzv-backend=c10d "
            '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}" "--rdzv-id=${SLURM_JOB_ID}" '
            "--log-dir=/opt/containers/results/torchelastic "
            "/opt/containers/jobs/train.py --example ddp") in launch
    # One node: no multi-node binds, modules or rendezvous.
    single = data_job("olivia", "ddp", nodes=1).text
    assert "EBROOT" not in single and "module load" not in single and "FI_PROVIDER" not in single
    assert ("/usr/local/bin/torchrun --standalone --nproc-per-node=4 "
            "--log-dir=/opt/containers/results/torchelastic ") in _launch(single)


def test_derecho_pbs(data_job, data_world) -> None:
    # Once a plugin for containers exists (a site admin's transport.binds), 2 nodes run with
    # the binds of NCAR's own container example (FastEddy: /run, /opt/cray,
    # /usr/lib64:/host/lib64, LD_LIBRARY_PATH ending in /host/lib64).
    derecho = with_plugin(data_world[1]["derecho"], "/glade/u/apps/ofi/lib")
    job = data_job(derecho, "smoke", nodes=2, account="UXYZ0001")
    assert _directives(job.text, "#PBS") == [
        "#PBS -N smoke-derecho-cuda", "#PBS -A UXYZ0001", "#PBS -q main",
        "#PBS -l select=2:ncpus=64:ngpus=4", "#PBS -l walltime=00:30:00", "#PBS -j oe",
        "#PBS -o /proj/results/jobs/"]
    assert "#SBATCH" not in job.text and "scontrol" not in job.text
    assert 'MASTER_ADDR=$(sed -n 1p "$PBS_NODEFILE")\n' in job.text
    launch = _launch(job.text)
    assert launch.startswith("mpiexec -n 2 --ppn 1 --cpu-bind none apptainer exec --nv "
                             "--bind /proj/jobs:/opt/containers/jobs:ro ")
    assert ("--bind /glade --bind /run --bind /opt/cray --bind /usr/lib64:/host/lib64 "
            "--bind /glade/u/apps/ofi/lib:/opt/aws-ofi-nccl/lib ") in launch
    assert ("--env NCCL_SOCKET_IFNAME=hsn --env TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
            # across nodes: the transport's settings, its proof's debug lines, NCCL_NET forced
            "--env NCCL_CROSS_NIC=1 --env NCCL_NCHANNELS_PER_NET_PEER=4 "
            "--env FI_CXI_DISABLE_HOST_REGISTER=1 --env FI_MR_CACHE_MONITOR=userfaultfd "
            "--env FI_CXI_DEFAULT_CQ_SIZE=131072 "
            "--env 'LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/cray/libfabric/1.15.2.0/lib64:"
            "$LD_LIBRARY_PATH:/host/lib64' --env NCCL_DEBUG=INFO "
            "--env NCCL_DEBUG_SUBSYS=INIT,NET --env 'NCCL_NET=AWS Libfabric' "
            "/proj/images/derecho-cuda.sif torchrun --nnodes=2 --nproc-per-node=4 "
            '--rdzv-backend=c10d "--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}" '
            '"--rdzv-id=${PBS_JOBID}" --log-dir=/opt/containers/results/torchelastic '
            "/opt/containers/jobs/allreduce.py") in launch
    assert job.scheduler.submit_argv(Path("j.sh")) == ["qsub", "j.sh"]
    # With a memory per GPU in the profile, the chunk carries it per node (NCAR's own script
    # asks for mem=480GB per 4-GPU node).
    derecho = job.site.model_copy(update={"memory": Memory(per_gpu_gb=120, source="test")})
    assert "#PBS -l select=2:ncpus=64:ngpus=4:mem=480GB\n" in \
        data_job(derecho, nodes=2, account="UXYZ0001").text
    # PBS Pro takes 236 characters (OpenPBS 230): the name is whole, not cut to 15.
    assert job.output_of("4242.desched1") == "/proj/results/jobs/smoke-derecho-cuda.o4242"
    assert "job name" not in job.text
    # NCAR: "ensure that you have the cuda module loaded ... or nodes may lock up"; its
    # container pages load apptainer.
    assert "set +u\nmodule load cuda apptainer\nset -u\n" in job.text
    assert job.text.index("module load cuda") < job.text.index("mpiexec ")


def test_derecho_across_nodes_over_sockets_only_when_asked(data_job, data_world) -> None:
    """Without a plugin for containers, --transport socket is the one way across nodes: NCCL's
    TCP sockets forced (NCCL_NET=Socket), none of the OFI transport's binds or variables, the
    choice in the header and in job.json, and the verdict's re-plan (request_from_record ->
    job_run) judges that transport, marked degraded."""
    job = data_job("derecho", "smoke", nodes=2, account="U1", transport="socket")
    launch = _launch(job.text)
    assert "--env NCCL_NET=Socket " in launch and "AWS Libfabric" not in launch
    assert "/host/lib64" not in launch and "FI_CXI_DEFAULT_CQ_SIZE" not in launch
    # nor the fast network's tuning (transport.env): it does nothing over sockets
    assert not re.search(r"FI_CXI_|FI_MR_CACHE|NCCL_CROSS_NIC|NCCL_NCHANNELS", job.text)
    assert "--bind /glade " in launch and "--bind /opt/cray" not in launch
    assert ("# transport: TCP sockets instead of OFI (aws-ofi-nccl) over cxi (invoke job "
            "--transport socket): slower, and no proof of the site's network\n") in job.text
    record = json.loads(job.text.split("<<'JOB'\n")[1].split("\nJOB\n")[0])
    assert record["transport"] == "socket"
    request = request_from_record(record, kind_of(record["workload"]))
    assert request.transport == "socket"
    site = batch.job_run(job.target, data_world[1]["derecho"], settings=load_settings(
        Path("/proj"), {}), request=request).workload.site
    assert site.transport.net == "Socket" and site.transport.degraded
    assert site.transport.expect == r"NCCL INFO Using network Socket\b"
    # the site's own transport is untouched, and a job that asks nothing records nothing
    assert data_world[1]["derecho"].transport.degraded is None
    assert '"transport"' not in data_job("derecho", "smoke", account="U1").text


def test_a_host_stack_without_binds_is_refused(data_job, data_world) -> None:
    bare = data_world[1]["derecho"].model_copy(update={"transport": data_world[1][
        "derecho"].transport.model_copy(update={"binds": (), "unavailable": None})})
    with pytest.raises(ConfigError, match=r"over cxi\), and the profile binds none "
                       r"\(transport.binds\): run on one node"):
        data_job(bare, "smoke", nodes=2, account="U1")


@pytest.mark.parametrize("partition, gpus, chunk", [
    ("develop", 4, "select=1:ncpus=64:ngpus=4:mem=235GB"),
    ("develop", 1, "select=1:ncpus=16:ngpus=1:mem=58GB"),
    ("main", 4, "select=1:ncpus=64:ngpus=4")])
def test_derecho_develop_asks_memory(data_job, partition, gpus, chunk) -> None:
    """NCAR: develop's nodes are shared and "jobs in this queue should specify memory required
    via -l select=...:mem=5GB up to 235GB" (pbs/charging/): a job of some of the GPUs asks
    their share; main gives whole nodes and is asked none."""
    text = data_job("derecho", "smoke", account="U1", partition=partition,
                    gpus_per_node=gpus).text
    assert f"#PBS -l {chunk}\n" in text
    assert ("shared nodes, memory asked per node" in text) == (partition == "develop")


@pytest.mark.parametrize("site, partition, cpus, gres", [
    ("puhti", "gputest", 40, "v100"), ("mahti", "gpumedium", 128, "a100")])
def test_csc_sites(data_job, site, partition, cpus, gres) -> None:
    job = data_job(site, "deepspeed", nodes=2, partition=partition)
    assert f"#SBATCH --partition={partition}" in job.text
    assert f"#SBATCH --cpus-per-task={cpus}" in job.text
    # CSC's GPU syntax (docs.csc.fi creating-job-scripts-puhti/-mahti): --gres=gpu:<type>:N
    assert f"#SBATCH --gres=gpu:{gres}:4\n" in job.text and "--gpus-per-node" not in \
        "".join(_directives(job.text))
    assert "--example deepspeed --epochs 3 --batch-size 64 --out /opt/containers/results " \
           "--zero-stage 1" in _launch(job.text)
    assert data_job(site, "smoke", partition="gpu" if site == "puhti" else "gpusmall",
                    gpus_per_node=2)


def test_build_jobs(data_job) -> None:
    olivia = data_job("olivia", "build")
    assert "#SBATCH --partition=accel" in olivia.text and "#SBATCH --gpus-per-node=1" in olivia.text
    # Olivia's GPU nodes are aarch64, this login node x86_64: the node's python3 builds with
    # packages prepared on the login node (test_an_aarch64_build_job_runs_the_nodes_python3)
    assert olivia.text.rstrip("\n").endswith(
        "exec python3 -m invoke --search-root /proj build --target olivia-cuda")
    lumi = data_job("lumi", "build", account="project_465000001")
    # LUMI builds on LUMI-C's small (x86_64 CPU nodes): a build holds no GCD idle
    assert "#SBATCH --partition=small\n" in lumi.text and "#SBATCH --cpus-per-task=7" in lumi.text
    assert "--gpus-per-node" not in lumi.text and "--mem-per-gpu" not in lumi.text
    # a GPU workload on that CPU partition is refused, naming a partition that has GPUs
    with pytest.raises(UsageError, match=r"--gpus-per-node 8 is more than the nodes of "
                                         r"partition small have \(0\); partition standard-g"):
        data_job("lumi", "smoke", account="project_465000001", partition="small")
    assert "\n/proj/.venv/bin/invoke build --target lumi-rocm\n" in lumi.text
    assert lumi.results is None
    # A checkout path with spaces is quoted wherever it reaches the body.
    spaced = data_job("lumi", "build", venv=Path("/my proj/.venv"))
    assert "\n'/my proj/.venv/bin/invoke' build --target lumi-rocm\n" in spaced.text


def test_local_slurm_job(data_job) -> None:
    job = data_job("local-slurm", "smoke", nodes=2, gpus_per_node=2)
    assert _directives(job.text) == [
        "#SBATCH --job-name=smoke-cpu", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=00:30:00",
        "#SBATCH --output=/proj/results/jobs/smoke-cpu-20260101-120000-%j.out"]
    assert _launch(job.text).startswith(
        "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 apptainer exec "
        "--bind /proj/jobs:/opt/containers/jobs:ro "
        '--bind "/proj/results/smoke/cpu-20260101-120000-slurm-job${SLURM_JOB_ID}'
        ':/opt/containers/results" '
        "/proj/images/cpu.sif torchrun --nnodes=2 --nproc-per-node=2 ")
    assert "--partition=debug" in data_job("local-slurm", "smoke", partition="debug").text


# ------------------------------------------------------------------------------------- quoting
def test_a_literal_dollar_in_a_path_stays_literal(data_world, tmp_path) -> None:
    targets, sites = data_world
    data = tmp_path / "data$HOME"
    data.mkdir()
    settings = load_settings(Path("/proj"), {"tmp_dir": str(tmp_path)})
    job = batch.plan_job(batch.JobNeeds(targets["cpu"], sites["local-slurm"], settings=settings,
                         host_arch="x86_64"),
                         batch.JobRequest(kind=kind_of("ddp"), options=TrainOptions(
                             example="ddp", gpus=2, data=data)))
    assert f"--bind '{data}:/opt/containers/data:ro'" in job.text


def test_no_caller_environment_reaches_the_script(data_job, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "hunter2-secret")
    monkeypatch.setenv("USER", "alice-the-user")
    monkeypatch.setenv("SLURM_JOB_ID", "999999")
    monkeypatch.setenv("EBROOTNCCL", "/secret/nccl")
    for site in SITES:
        for workload in ("smoke", "ddp", "build"):
            if workload == "build" and site in CANNOT_BUILD:
                continue
            text = data_job(site, workload,
                            nodes=1 if workload == "build" or site in ONE_NODE else 2,
                            partition=MULTINODE.get(site) if workload != "build" else None,
                            account="proj_1" if site == "derecho" else None).text
            for value in ("hunter2-secret", "alice-the-user", "999999", "/secret/nccl"):
                assert value not in text, (site, workload, value)


# ------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("site, request_, error, message", [
    ("lumi", dict(workload="train"), UsageError,
     "--workload must be one of smoke, ddp, deepspeed, fsdp, run, build (got 'train')"),
    ("lumi", dict(workload="smoke", nodes=0), UsageError, "--nodes must be at least 1 (got 0)"),
    ("lumi", dict(workload="smoke", time="1h"), UsageError, "--time must be a time above zero"),
    ("lumi", dict(workload="smoke", time="00:61:00"), UsageError,
     "--time must be a time above zero: HH:MM:SS, D-HH:MM:SS, MM:SS or minutes (got '00:61:00')"),
    ("lumi", dict(workload="smoke", time="00:00:00"), UsageError,
     "--time must be a time above zero: HH:MM:SS, D-HH:MM:SS, MM:SS or minutes (got '00:00:00')"),
    ("olivia", dict(workload="smoke", nodes=9), UsageError,
     "9 node(s) x 4 GPUs = 36 is more than partition accel of site olivia allows per job (32)"),
    ("olivia", dict(workload="smoke", gpus_per_node=8), ConfigError,
     "olivia nodes have 4 GPUs; --gpus-per-node 8 is more"),
    ("lumi", dict(workload="smoke", gpus_per_node=0), UsageError,
     "--gpus-per-node must be at least 1"),
    ("olivia", dict(workload="smoke", partition="acel"), UsageError,
     "unknown partition 'acel' for site olivia (did you mean 'accel'?); known: accel"),
    ("lumi", dict(workload="build", nodes=2), UsageError, "a build job runs on one node"),
    ("lumi", dict(workload="smoke", account="my project"), UsageError,
     "--account takes an account name"),
    ("derecho", dict(workload="smoke", launcher="srun-per-gpu", account="U1"), UsageError,
     "launcher srun-per-gpu needs a slurm site; derecho schedules with pbs"),
    ("lumi", dict(workload="smoke", launcher="mpirun"), UsageError, "--launcher must be one of"),
    # Derecho across nodes: its transport's plugin is the host's, and NCAR publishes none
    ("derecho", dict(workload="run", nodes=2, account="U1", command=("python", "t.py")),
     ConfigError, "a 2-node job on site derecho needs the host's network plugin and libfabric "
     "bound into the container for its transport (OFI (aws-ofi-nccl) over cxi), and NCAR "
     "publishes no aws-ofi-nccl plugin for containers on Derecho (no NCCL or aws-ofi-nccl "
     "module in NCAR/spack-derecho; "),
    ("derecho", dict(workload="smoke", nodes=2, account="U1"), ConfigError,
     ": run on one node (--nodes 1), add them to the profile, or pass --transport socket for "
     "NCCL's TCP sockets (degraded; recorded in job.json, named by the verdict)"),
    # --transport socket replaces a transport across nodes: not on one node, nor on a CPU site
    ("derecho", dict(workload="smoke", account="U1", transport="socket"), UsageError,
     "--transport socket replaces the site's network transport, which applies to jobs across "
     "nodes from 2 nodes; this job has 1 node(s): leave --transport out"),
    ("local-slurm", dict(workload="smoke", nodes=2, transport="socket"), UsageError,
     "and site local-slurm declares none (no transport: in its profile)"),
    ("lumi", dict(workload="smoke", nodes=2, transport="tcp"), UsageError,
     "--transport must be one of socket (got 'tcp')"),
])
def test_refusals(data_job, site, request_, error, message) -> None:
    with pytest.raises(error) as refused:
        data_job(site, **request_)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    if error is ConfigError:  # a site limit: the profile line that sets it
        assert refused.value.path == ROOT / "sites" / f"{site}.yaml" and refused.value.line


def test_site_mismatches_are_refused(data_job, data_world) -> None:
    targets, sites = data_world
    with pytest.raises(ConfigError, match="site local has no batch scheduler .*--site "
                                          "local-slurm"):
        data_job(sites["local"], "smoke", target="cpu")
    with pytest.raises(UsageError, match=r"target cpu is an image for CPUs \(no GPU\) but "
                                         r"site lumi has AMD \(ROCm\) GPUs"):
        data_job("lumi", "smoke", target="cpu")
    with pytest.raises(UsageError, match="target olivia-cuda is aarch64 but site puhti's nodes "
                                         "are x86_64"):
        data_job("puhti", "smoke", target="olivia-cuda")
    with pytest.raises(ContainersError, match="divide evenly over 4 ranks"):
        data_job("local-slurm", "ddp", nodes=2, gpus_per_node=2,
                 options=TrainOptions(example="ddp", gpus=2, batch_size=6))


def test_unsafe_directive_values_are_refused(data_world, tmp_path) -> None:
    targets, sites = data_world
    settings = load_settings(tmp_path / "my checkout", {})
    with pytest.raises(ConfigError, match="--output '.*my checkout.*' has characters a batch "
                                          "directive cannot carry"):
        batch.plan_job(batch.JobNeeds(targets["cpu"], sites["local-slurm"], settings=settings,
                       host_arch="x86_64"), batch.JobRequest(kind=kind_of("smoke")))


# ----------------------------------------------------------------------------------- profiles
def test_site_profiles_batch_fields(data_world) -> None:
    _, sites = data_world
    assert sites["local-slurm"].scheduler == "slurm" and sites["local"].scheduler == "none"
    assert sites["lumi"].build_partition == "small"
    assert sites["olivia"].transport.modules[0] == "NRIS/GPU"
    assert sites["lumi"].model_copy(update={"launcher": "srun-per-gpu"}).cpu_bind[0] == \
        "0x00fe000000000000"


def test_cli_prints_writes_and_refuses(tmp_path) -> None:
    invoke = [str(ROOT / ".venv/bin/invoke"), "job"]
    env = {**os.environ, "INVOKE_CONTAINERS_RESULTS_DIR": str(tmp_path / "results")}
    out = tmp_path / "smoke.sh"
    result = subprocess.run([*invoke, "--target", "cpu", "--site", "local-slurm", "--workload",
                             "smoke", "--nodes", "2", "--out", str(out)], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "wrote " in result.stdout and "(sbatch it to run)" in result.stdout
    assert out.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=smoke-cpu\n")
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    assert (tmp_path / "results" / "jobs").is_dir()  # where the job's output will go
    printed = subprocess.run([*invoke, "--target", "derecho-cuda", "--workload", "smoke",
                              "--account", "UXYZ0001"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
    assert printed.returncode == 0 and "#PBS -l select=1:ncpus=64:ngpus=4" in printed.stdout
    bad = subprocess.run([*invoke, "--target", "olivia-cuda", "--nodes", "9", "--account", "nn1k"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "36 is more than partition accel of site olivia allows per job (32)" in bad.stderr



# ------------------------------------------------------------------ partitions, time, accounts
@pytest.mark.parametrize("site, workload, request_, time", [
    ("puhti", "ddp", {}, "00:15:00"),                          # gputest: CSC's 15 minutes
    ("puhti", "ddp", {"partition": "gpu"}, "01:00:00"),        # training's estimate fits
    ("mahti", "smoke", {}, "00:15:00"),
    ("lumi", "smoke", {}, "00:30:00"),                         # smoke's estimate
    ("lumi", "build", {}, "02:00:00"),                         # small-g: 3 days
    ("lumi", "ddp", {"partition": "dev-g", "time": "2:30:00"}, "02:30:00"),
    ("olivia", "fsdp", {"time": "1-12:00:00"}, "36:00:00"),    # D-HH:MM:SS as Slurm takes it
    ("derecho", "smoke", {"account": "U1", "time": 5400}, "01:30:00"),
])
def test_the_time_fits_the_partition(data_job, site, workload, request_, time) -> None:
    job = data_job(site, workload, **request_)
    directive = "#PBS -l walltime=" if site == "derecho" else "#SBATCH --time="
    assert f"{directive}{time}\n" in job.text


@pytest.mark.parametrize("site, request_, message", [
    ("puhti", dict(time="01:00:00"),
     "--time 01:00:00 is more than partition gputest of site puhti allows (00:15:00)"),
    ("lumi", dict(partition="dev-g", time="04:00:00"),
     "--time 04:00:00 is more than partition dev-g of site lumi allows (03:00:00)"),
    ("derecho", dict(account="U1", time="13:00:00"),
     "--time 13:00:00 is more than partition main of site derecho allows (12:00:00)"),
    # nodes and GPUs per partition, with the partition that would take the job
    ("lumi", dict(partition="small-g", nodes=5),
     "--nodes 5 is more than partition small-g of site lumi allows (4); partition standard-g "
     "allows it (--partition standard-g)"),
    ("puhti", dict(nodes=3),
     "--nodes 3 is more than partition gputest of site puhti allows (2); partition gpu allows "
     "it (--partition gpu)"),
    ("mahti", dict(partition="gpusmall"),
     "1 node(s) x 4 GPUs = 4 is more than partition gpusmall of site mahti allows per job (2); "
     "partition gpumedium allows it"),
    ("mahti", dict(nodes=7, partition="gpumedium"),
     "--nodes 7 is more than partition gpumedium of site mahti allows (6)"),
    ("derecho", dict(account="U1", partition="develop", nodes=3),
     "--nodes 3 is more than partition develop of site derecho allows (2)"),
])
def test_partition_limits_are_refused_in_one_line(data_job, site, request_, message) -> None:
    with pytest.raises(UsageError) as refused:
        data_job(site, "ddp", **request_)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_accounts_flag_then_site_then_global_then_environment(data_job) -> None:
    config = {"account": "global_1", "accounts": {"lumi": "project_465000001"}}
    def account(site="lumi", **kw):  # noqa: E306
        lines = [line for line in data_job(site, "smoke", **kw).text.splitlines()
                 if "--account=" in line or line.startswith("#PBS -A")]
        return lines[0].split("=", 1)[-1].split()[-1] if lines else None
    assert account(account="flag_1", config=config) == "flag_1"
    assert account(config=config) == "project_465000001"
    assert account("olivia", config=config) == "global_1"
    assert account("derecho", config=config) == "global_1"  # PBS: -A global_1
    assert account(environ={"SLURM_ACCOUNT": "alloc_1"}) == "alloc_1"
    # SBATCH_ACCOUNT is sbatch's own: left to it, and the header says so
    job = data_job("lumi", "smoke", environ={"SBATCH_ACCOUNT": "proj_env"})
    assert "--account" not in job.text and "proj_env" not in job.text
    assert "account from SBATCH_ACCOUNT (sbatch reads it at submission)" in job.text
    # a site that does not require one gets none
    assert account("local-slurm", environ={}) is None


@pytest.mark.parametrize("site, how", [
    ("lumi", ", or export SBATCH_ACCOUNT or SLURM_ACCOUNT"),
    ("derecho", " (pbs reads no account variable)"),
])
def test_a_missing_account_is_refused_saying_how_to_set_it(data_job, site, how) -> None:
    with pytest.raises(UsageError) as refused:
        data_job(site, "smoke", environ={})
    assert str(refused.value) == (
        f"site {site} requires an account (project) for its jobs: pass --account NAME, set "
        f"containers.accounts.{site} (or containers.account) in invoke.yaml{how}")


def test_build_jobs_a_site_cannot_run_are_refused_before_anything_is_written(data_job) -> None:
    with pytest.raises(ConfigError) as refused:
        data_job("puhti", "build")
    message = str(refused.value)
    assert "ngc.def has a %post or %app* section (Apptainer runs them in the image as it " \
           "builds), which needs --fakeroot, and site 'puhti' has none" \
        in message and "(invoke build --target puhti-cuda there)" in message
    assert refused.value.path == ROOT / "sites" / "puhti.yaml" and refused.value.key == "fakeroot"
    # cotainr targets need no fakeroot; Olivia's GPU nodes have it
    assert data_job("lumi", "build") and data_job("olivia", "build")
    # another architecture: where to build instead
    with pytest.raises(UsageError, match="target olivia-cuda is aarch64 but site puhti's nodes "
                                         r"are x86_64; build it on an aarch64 machine"):
        data_job("puhti", "build", target="olivia-cuda")


def test_the_header_says_where_the_output_goes(data_job) -> None:
    job = data_job("lumi", "smoke")
    assert ("# submit: sbatch FILE; output: "
            "/proj/results/jobs/smoke-lumi-rocm-20260101-120000-%j.out "
            "(invoke job made its folder)") in job.text
    assert job.output_folder == Path("/proj/results/jobs")
    assert data_job("derecho", "smoke", account="U1").output_folder == Path("/proj/results/jobs")


def test_cli_print_makes_the_output_folder_and_refuses_a_folder_as_out(tmp_path) -> None:
    """As in a fresh clone: results/ does not exist; printing the README's script makes the
    folder its --output names (Slurm would not, and the job would die without a log)."""
    invoke = [str(ROOT / ".venv/bin/invoke"), "job"]
    results = tmp_path / "fresh" / "results"
    env = {**os.environ, "INVOKE_CONTAINERS_RESULTS_DIR": str(results)}
    printed = subprocess.run([*invoke, "--target", "cpu", "--site", "local-slurm"], cwd=ROOT,
                             env=env, capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    output = next(line.split("=", 1)[1] for line in printed.stdout.splitlines()
                  if line.startswith("#SBATCH --output="))
    assert Path(output).parent == results / "jobs" and Path(output).parent.is_dir()
    folder = subprocess.run([*invoke, "--target", "cpu", "--site", "local-slurm", "--out",
                             str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert folder.returncode == 1 and folder.stderr.count("\n") == 1, folder.stderr
    assert "--out" in folder.stderr and "folder" in folder.stderr
    assert "Traceback" not in folder.stderr
    env.pop("SBATCH_ACCOUNT", None), env.pop("SLURM_ACCOUNT", None)
    missing = subprocess.run([*invoke, "--target", "puhti-cuda"], cwd=ROOT, env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert "site puhti requires an account" in missing.stderr


def test_app_job_refuses_a_folder_as_out(tmp_path) -> None:
    from containers.app import jobs
    from containers.app.project import Project
    project = Project.load(ROOT, {"results_dir": str(tmp_path / "results")})
    with pytest.raises(UsageError, match="--out .* is a folder; name the script file to write"):
        jobs.job(project, batch.JobRequest(kind=kind_of("smoke")), target="cpu",
                 site="local-slurm", out=tmp_path,
                 say=lambda line: None)
    assert not (tmp_path / "results").exists()  # refused before anything is made


def test_app_job_into_a_read_only_results_folder_is_one_line(tmp_path, factory_read_only) -> None:
    from containers.app import jobs
    from containers.app.project import Project
    from containers.errors import StateError
    results = factory_read_only(tmp_path / "results")
    project = Project.load(ROOT, {"results_dir": str(results)})
    with pytest.raises(StateError, match=r"^cannot create the job's output folder: .*results/"):
        jobs.job(project, batch.JobRequest(kind=kind_of("smoke")), target="cpu",
                 site="local-slurm", out=tmp_path / "job.sh", say=lambda line: None)
    assert not (tmp_path / "job.sh").exists()


def test_workload_jobs_keep_the_launcher_status_and_end_with_the_verdict(data_job) -> None:
    import json
    job = data_job("lumi", "smoke", nodes=2, account="project_465000001")
    text = job.text
    out = '"/proj/results/smoke/lumi-rocm-20260101-120000-slurm-job${SLURM_JOB_ID}'
    record = json.loads(text.split("<<'JOB'\n")[1].split("\nJOB\n")[0])
    assert record == {"target": "lumi-rocm", "site": "lumi", "workload": "smoke", "nodes": 2,
                      "gpus_per_node": 8, "launcher": "torchrun", "partition": "standard-g",
                      "options": {"sizes": "1K:128M", "iters": 20, "warmup": 5,
                                  "timeout": 600.0, "dtype": "float32", "cycles": 1,
                                  "op": "all_reduce"}}
    assert f"cat > {out}/job.json\" <<'JOB'\n" in text
    assert (f"if [[ -f /proj/images/lumi-rocm.sif.json ]]; then\n"
            f"    cp /proj/images/lumi-rocm.sif.json {out}/image.json\"\nfi\n") in text
    assert f" 2>&1 | tee {out}/run.log\" || status=$?\n" in text
    assert text.endswith(f"exec /proj/.venv/bin/invoke verdict --results {out}\" "
                         '--exit-status "${status}"\n')
    # The verdict reads and writes the folders the script was written for.
    for name, value in (("IMAGES", "/proj/images"), ("RESULTS", "/proj/results"),
                        ("PERFLOG", "/proj/results/perflog")):
        assert f"export INVOKE_CONTAINERS_{name}_DIR={value}\n" in text
    assert text.index("status=0\n") < text.index("srun ") < text.index("exec ")
    # The plan the verdict judges by is the plan the script runs.
    run = batch.job_run(job.target, job.site, settings=load_settings(Path("/proj"), {}),
                        request=request_from_record(record, kind_of(record["workload"])))
    assert run.workload.ranks == 16 and run.workload.launch.nodes == 2 and run.kind.name == "smoke"
    # Another architecture: the image's own Python runs the verdict, never a venv made on the
    # node (tests/batch/test_judgeenv.py); unprepared, the job fails closed
    olivia = data_job("olivia", "ddp").text
    assert "venv" not in olivia and "verdict: FAIL: the Python of" in olivia
    # Build jobs have no verdict to write
    assert "verdict" not in data_job("lumi", "build").text


# ------------------------------------------------ each site's documented facts in its jobs
@pytest.mark.parametrize("request_, message", [
    # Olivia's devel QoS: 2 hours, at most 16 GPUs per job (olivia_job_types.md)
    (dict(qos="devel", nodes=8, time="2-00:00:00"),
     "--time 48:00:00 is more than QoS devel of site olivia allows (02:00:00; https://"),
    (dict(qos="devel", nodes=8),
     "--qos: 8 node(s) x 4 GPUs = 32 is more than QoS devel of site olivia allows per job (16; "),
])
def test_a_request_over_a_qos_limit_is_refused_in_one_line(data_job, request_,
                                                           message) -> None:
    with pytest.raises(UsageError) as refused:
        data_job("olivia", "ddp", **request_)
    assert str(refused.value).startswith(message), str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_qos_caps_the_time_and_a_request_within_it_renders(data_job) -> None:
    job = data_job("olivia", "build", qos="devel")  # a build's estimate is 2 h: the cap
    assert "#SBATCH --qos=devel" in job.text and "#SBATCH --time=02:00:00" in job.text
    job = data_job("olivia", "ddp", qos="devel", nodes=4, time="01:00:00")
    assert "#SBATCH --nodes=4" in job.text and "#SBATCH --time=01:00:00" in job.text


@pytest.mark.parametrize("site, memory", [
    # CSC bills requested memory; its ML guide reserves ~95G per V100 on Puhti, but a Puhti
    # GPU node allocates 373 GiB: 4 x 93G is the most a full-node job can ask (issue 41)
    ("puhti", "--mem-per-gpu=93G"), ("mahti", "--mem-per-gpu=120G"),
    ("lumi", "--mem-per-gpu=60G"), ("olivia", "--mem-per-gpu=110G")])
def test_jobs_request_the_memory_their_site_documents(data_job, data_world, site,
                                                      memory) -> None:
    _, sites = data_world
    job = data_job(site, "ddp", partition=MULTINODE.get(site))
    assert f"#SBATCH {memory}" in _directives(job.text)
    assert sites[site].memory.source  # every figure names its page
    # never more than a node of the job's partition allocates
    partition = sites[site].partition(job.resources.partition)
    asked = job.resources.mem_per_gpu_gb * job.resources.gpus_per_node
    assert partition.allocatable_gb and asked <= partition.allocatable_gb


def test_a_site_built_in_code_that_over_asks_is_capped_at_its_share(data_job,
                                                                   data_world) -> None:
    """A profile that over-asks is refused as it loads; a site made in code (never checked)
    still asks no more than a node allocates over its GPUs."""
    puhti = data_world[1]["puhti"]
    over = puhti.model_copy(update={"memory": Memory(per_gpu_gb=95, source="test")})
    assert "#SBATCH --mem-per-gpu=93G" in _directives(data_job(over, "ddp").text)


def test_each_site_states_its_gpu_architecture_with_its_source(data_world) -> None:
    _, sites = data_world
    expected = {"puhti": "sm_70", "mahti": "sm_80", "derecho": "sm_80", "olivia": "sm_90",
                "lumi": "gfx90a", "local": None, "local-slurm": None}
    assert {name: site.gpus.arch for name, site in sites.items()} == expected
    assert all(site.gpus.arch_source for site in sites.values() if site.gpus.arch)


def test_module_lines_follow_the_site(data_job) -> None:
    derecho = data_job("derecho", "ddp", account="U1").text
    # NCAR: the cuda module or nodes may lock up; apptainer, as its container pages load it
    assert "module load cuda apptainer\n" in derecho
    olivia = data_job("olivia", "ddp", nodes=2).text
    assert "module load NRIS/GPU NCCL/2.26.6-GCCcore-14.2.0-CUDA-12.8.0\n" in olivia
    assert "module load" not in data_job("olivia", "ddp").text  # one node: no network stack


def test_an_aarch64_build_job_runs_the_nodes_python3(data_world, tmp_path) -> None:
    """No venv, pip or index on the node: the node's python3 picks the folder prepared for its
    version; none prepared for it is one line naming what it found and what was prepared."""
    targets, sites = data_world
    tool = judgeenv.build_plans(Path("/proj"), arch="aarch64")
    job = batch.plan_job(batch.JobNeeds(targets["olivia-cuda"], sites["olivia"],
                         settings=load_settings(Path("/proj"), {"tmp_dir": str(tmp_path)}),
                         host_arch="x86_64", site_arch="aarch64", venv=Path("/proj/.venv"),
                         tool=tool), batch.JobRequest(kind=kind_of("build"), account="p"))
    code = "\n".join(line for line in job.text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"\bpip\b", code) and "venv" not in code and "/bin/invoke" not in code
    assert f"node_python=$({NODE_PYTHON} 2>/dev/null)" in code
    for env in tool:
        assert f"    {env.python}) packages={env.folder} ;;\n" in code
        assert env.folder.parent == Path("/proj/.buildenv") and env.arch == "aarch64"
    assert [env.python for env in tool] == ["3.11", "3.12", "3.13"]
    assert 'export PATH="$packages/bin:$PATH" PYTHONPATH="$packages":/proj\n' in code
    # the pick, run with a python3 that says 3.9 (and with none): exit 2, one line on stderr
    pick = code[code.index("node_python="):code.index("export PATH=")]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 3.9\n")
    (fake / "python3").chmod(0o755)
    for path, found in ((f"{fake}:/usr/bin:/bin", "is 3.9;"),
                        ("/nonexistent", "is not there or does not run;")):
        done = subprocess.run(["/bin/bash", "-c", pick], env={"PATH": path}, text=True,
                              capture_output=True)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr == (f"build: FAIL: python3 on this node (after the site's modules) "
                               f"{found} invoke job prepared aarch64 packages for Python 3.11, "
                               "3.12, 3.13 (load a module of one of them in this script, before "
                               "the build)\n")


def test_the_variables_binds_and_env_take_from_modules_are_checked_after_loading(
        data_job, data_world, tmp_path) -> None:
    """Any profile: where a job loads modules, each host variable its binds and environment
    use is checked after the load, one quoted line naming the modules, the variable and the
    keys (issue 41); a job that loads none (LUMI's $USER, $SLURM_JOB_ID) gets no check."""
    derecho = data_world[1]["derecho"]
    mpich = derecho.model_copy(update={
        "env": {**derecho.env,
                "LD_LIBRARY_PATH": "${CRAY_MPICH_DIR}/lib-abi-mpich:$$LD_LIBRARY_PATH"},
        "binds": (*derecho.binds, "$CRAY_MPICH_DIR:/opt/mpich")})
    text = data_job(mpich, "smoke", account="U1").text
    _bash_n(text, tmp_path)
    check = text[text.index("module load cuda apptainer\nset -u\n"):text.index("mpiexec ")]
    assert "if [[ -z ${CRAY_MPICH_DIR:-} ]]; then\n    echo 'job script: module load cuda " \
           "apptainer did not set CRAY_MPICH_DIR, which binds and env of sites/derecho.yaml " \
           "use: load the module that sets it, or fix the profile' >&2\n    exit 2\nfi\n" in check
    assert "LD_LIBRARY_PATH:-" not in check  # $$: the container's, no host variable
    assert "did not set" not in data_job("derecho", "smoke", account="U1").text  # uses none
    assert "did not set" not in data_job("lumi", "smoke").text  # no modules: nothing loaded
    assert "did not set" not in data_job("olivia", "ddp").text  # one node: no network stack


def test_a_job_id_that_repeats_names_new_files(data_job) -> None:
    """Job ids start again at 1 on another cluster or a restarted one: the output and results
    folder are named by when the job was rendered and the scheduler too, and the script makes
    its folder new or stops (an existing one is another job's evidence)."""
    first, again = data_job("local-slurm"), data_job("local-slurm", stamp="20260101-120500")
    assert first.results_of("1") == "/proj/results/smoke/cpu-20260101-120000-slurm-job1"
    assert again.results_of("1") == "/proj/results/smoke/cpu-20260101-120500-slurm-job1"
    assert first.output_of("1") != again.output_of("1")
    out = '"/proj/results/smoke/cpu-20260101-120000-slurm-job${SLURM_JOB_ID}"'
    assert f"if ! mkdir {out}; then" in first.text
    assert f"mkdir -p {out}" not in first.text and ">>" not in first.text
    now = data_job("local-slurm", stamp="")  # none given: now
    assert re.fullmatch(r"\d{8}-\d{6}", now.stamp) and now.stamp in now.results_of("1")


# ------------------------------------------------- what a site requires of every job (issue 49)
def _required(site, **more):
    """``site`` requiring ``-C gpu`` on every GPU job, a line on every job, and a 30-minute
    default QoS (NERSC's shape: debug by default, regular when named)."""
    qos = {"debug": Qos(max_time="00:30:00", max_nodes=8, source="policy page"),
           "regular": Qos(source="policy page")}
    for name, item in qos.items():
        item._name = name
    job = site.job.model_copy(update={"directives": ("--mail-type=NONE",),
                                      "gpu_directives": ("-C gpu",)})
    return site.model_copy(update={"qos": qos, "default_qos": "debug", "job": job, **more})


def test_a_site_requirement_and_default_qos_are_carried_with_no_flag(data_job,
                                                                     data_world) -> None:
    site = _required(data_world[1]["olivia"])
    lines = _directives(data_job(site, "smoke", nodes=2).text)
    assert "#SBATCH --qos=debug" in lines and lines[-2:] == [
        "#SBATCH --mail-type=NONE", "#SBATCH -C gpu"]
    assert "# QoS debug: the site's default (default_qos; --qos for another)" in \
        data_job(site, "smoke", nodes=2).text
    # a job with no GPUs carries the every-job line only
    cpu = _directives(data_job(_required(data_world[1]["local-slurm"]), "smoke").text)
    assert "#SBATCH --mail-type=NONE" in cpu and "#SBATCH -C gpu" not in cpu


def test_a_job_is_checked_against_the_qos_it_will_get(data_job, data_world) -> None:
    site = _required(data_world[1]["olivia"])
    with pytest.raises(UsageError) as refused:
        data_job(site, "smoke", nodes=2, time="01:00:00")
    assert str(refused.value) == (
        "--time 01:00:00 is more than QoS debug (its default_qos: --qos names another) of site "
        "olivia allows (00:30:00; policy page)")
    assert "#SBATCH --qos=regular" in data_job(site, "smoke", nodes=2, time="01:00:00",
                                               qos="regular").text
    # with no --time, the estimate is capped by the default QoS
    assert "#SBATCH --time=00:30:00" in data_job(site, "ddp", nodes=2).text
    with pytest.raises(UsageError, match="--nodes 3 is more than QoS debug"):
        data_job(site.model_copy(update={"qos": {**site.qos, "debug": site.qos["debug"]
                                                 .model_copy(update={"max_nodes": 2})}}),
                 "smoke", nodes=3)


def test_cpus_are_counted_as_the_scheduler_counts_them(data_job, data_world) -> None:
    """Two hardware threads per core: Slurm's --cpus-per-task and PBS's ncpus count both."""
    olivia = data_world[1]["olivia"].model_copy(update={"cores_per_node": 64,
                                                        "threads_per_core": 2})
    assert "#SBATCH --cpus-per-task=128\n" in data_job(olivia, "smoke").text
    assert "#SBATCH --cpus-per-task=64\n" in data_job(olivia, "smoke", gpus_per_node=2).text
    derecho = data_world[1]["derecho"].model_copy(update={"threads_per_core": 2})
    assert ":ncpus=128:" in data_job(derecho, "smoke", account="U1").text
    lumi = data_world[1]["lumi"].model_copy(update={"threads_per_core": 2,
                                                    "launcher": "srun-per-gpu"})
    assert "--cpus-per-task=14 " in _launch(data_job(lumi, "smoke").text)


def test_a_runtime_module_is_loaded_by_every_job(data_job, data_world) -> None:
    site = data_world[1]["olivia"].model_copy(update={"runtime_module": "apptainer/1.3"})
    text = data_job(site, "smoke").text
    assert "module load apptainer/1.3\n" in text
    assert "module load apptainer/1.3\n" in data_job(site, "build").text
