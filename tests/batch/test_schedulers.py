"""Batch schedulers: the directives a job's resources become, where output goes, submitting and
reading the job id back, a job's state and submit time from each scheduler's tools, and the
rendezvous each scheduler's jobs use."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.batch.schedulers import SCHEDULERS, Pbs, Resources, Slurm, directive, short_name
from containers.batch.script import ref, word
from containers.errors import CommandFailed, ConfigError
from containers.run.rendezvous import RENDEZVOUS

RES = Resources(name="smoke-x", nodes=2, tasks_per_node=1, cpus_per_task=16, gpus_per_node=4,
                time="00:30:00", partition="gpu", account="proj_1", output="/out/smoke-x-%j.out",
                mem_per_gpu_gb=60)


def test_slurm_directives_in_order() -> None:
    assert Slurm().preamble(RES) == [
        "#SBATCH --job-name=smoke-x", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=16", "#SBATCH --gpus-per-node=4", "#SBATCH --mem-per-gpu=60G",
        "#SBATCH --time=00:30:00", "#SBATCH --partition=gpu", "#SBATCH --account=proj_1",
        "#SBATCH --output=/out/smoke-x-%j.out"]
    cpu = Resources(name="c", nodes=1, tasks_per_node=8, cpus_per_task=None, gpus_per_node=0,
                    time="01:00:00", partition=None, account=None, output="o", exclusive=True,
                    mem_per_gpu_gb=60)
    assert Slurm().preamble(cpu) == [
        "#SBATCH --job-name=c", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=8",
        "#SBATCH --time=01:00:00", "#SBATCH --output=o", "#SBATCH --exclusive"]


def test_pbs_select_chunk_per_node() -> None:
    pbs = Pbs()
    res = Resources(**{**RES.__dict__, "name": "a-very-long-job-name", "output": "/out/"})
    assert pbs.preamble(res) == [
        "#PBS -N a-very-long-job-name", "#PBS -A proj_1", "#PBS -q gpu",
        "#PBS -l select=2:ncpus=16:ngpus=4:mem=240GB", "#PBS -l walltime=00:30:00", "#PBS -j oe",
        "#PBS -o /out/"]
    assert pbs.output_of(res, "4242.desched1") == "/out/a-very-long-job-name.o4242"


def test_memory_per_node_is_asked_as_is() -> None:
    """A shared queue's memory per node (a shared_nodes partition's allocatable_gb) is the chunk's mem=, in the place
    of the per-GPU figure; Slurm asks it with --mem=, never with --mem-per-gpu beside it."""
    res = Resources(**{**RES.__dict__, "mem_per_node_gb": 235, "output": "/out/"})
    assert "#PBS -l select=2:ncpus=16:ngpus=4:mem=235GB" in Pbs().preamble(res)
    lines = Slurm().preamble(res)
    assert "#SBATCH --mem=235G" in lines and not any("mem-per-gpu" in line for line in lines)
    cpu = Resources(**{**res.__dict__, "gpus_per_node": 0})
    assert "#PBS -l select=2:ncpus=16:mem=235GB" in Pbs().preamble(cpu)


def test_slurm_gres_syntax() -> None:
    """CSC's clusters take GPUs as --gres=gpu:<type>:<per node> (docs.csc.fi), in the place of
    --gpus-per-node; a job without GPUs asks for none either way."""
    gres = Resources(**{**RES.__dict__, "gpu_request": "gres", "gres_type": "v100"})
    lines = Slurm().preamble(gres)
    assert "#SBATCH --gres=gpu:v100:4" in lines
    assert not any("--gpus-per-node" in line for line in lines)
    none = Resources(**{**gres.__dict__, "gpus_per_node": 0})
    assert not any("gres" in line or "gpus" in line for line in Slurm().preamble(none))


def test_pbs_job_names_are_not_cut_at_15_characters() -> None:
    """PBS Pro takes job names of 236 characters (PBS_MAXJOBNAME in pbs_ifl.h; OpenPBS 230):
    a Derecho job keeps its whole name; only a name longer than that is shortened, word by
    word (15 is a queue's name, PBS_MAXQUEUENAME)."""
    assert Pbs.name_length == 230
    for name in ("smoke-derecho-cuda", "deepspeed-derecho-cuda", "x" * 230):
        assert Pbs().job_name(name) == name
    long = "-".join(["smoke"] * 50)  # 299 characters
    assert len(Pbs().job_name(long)) == 230 and Pbs().job_name(long).startswith("smo-")


@pytest.mark.parametrize("name, short", [
    ("smoke-cpu", "smoke-cpu"),                     # fits: unchanged
    ("smoke-derecho-cuda", "smk-drc-cuda"),
    ("deepspeed-derecho-cuda", "ds-drc-cuda"),
    ("ddp-mysite-gpuimage", "ddp-mysit-gpuim"),      # unknown words lose letters evenly
])
def test_short_names_stay_meaningful(name, short) -> None:
    """Where a scheduler limits names, a site's short forms (job.short_names) come first, then
    the longest word loses letters; no word is cut to a one-letter stub."""
    words = {"smoke": "smk", "deepspeed": "ds", "derecho": "drc"}
    assert short_name(name, 15, words) == short
    assert all(len(word) >= 2 for word in short.split("-"))


def test_output_submit_and_job_ids() -> None:
    slurm, pbs = SCHEDULERS["slurm"], SCHEDULERS["pbs"]
    assert slurm.output_dir(Path("/r/jobs"), "n") == "/r/jobs/n-%j.out"
    assert slurm.output_of(RES, "77") == "/out/smoke-x-77.out"
    assert slurm.submit_argv(Path("j.sh")) == ["sbatch", "--parsable", "j.sh"]
    assert slurm.parse_job_id("Submitted\n1234;cluster\n") == "1234"
    assert pbs.output_dir(Path("/r/jobs"), "n") == "/r/jobs/"
    assert pbs.submit_argv(Path("j.sh")) == ["qsub", "j.sh"]
    assert pbs.parse_job_id("4242.desched1\n") == "4242.desched1"
    with pytest.raises(CommandFailed, match="qsub printed no job id"):
        pbs.parse_job_id("  \n")


@pytest.mark.parametrize("printed", ["sbatch: error: x\n", "1234; rm -rf /\n", "--help\n",
                                     "1234\n#SBATCH\n-1\n", "12 34\n"])
def test_a_job_id_is_checked_before_it_is_used(printed: str) -> None:
    """The id becomes an argument of scontrol/qstat and part of file names: only what
    sbatch/qsub print as an id passes, in one line."""
    for scheduler in (SCHEDULERS["slurm"], SCHEDULERS["pbs"]):
        with pytest.raises(CommandFailed) as refused:
            scheduler.parse_job_id(printed)
        assert "not a job id" in str(refused.value).splitlines()[0]


@pytest.mark.parametrize("scheduler, text, state", [
    ("slurm", "JobId=7 JobName=run-cpu UserId=root(0) JobState=RUNNING Reason=None", "RUNNING"),
    ("slurm", "CANCELLED by 0\n", "CANCELLED"),
    ("slurm", "", None),
    ("pbs", "Job Id: 12.derecho\n    Job_Name = run-cpu\n    job_state = F\n", "FINISHED"),
    ("pbs", "Job Id: 12.derecho\n    job_state = Q\n", "PENDING"),
])
def test_states_are_read_from_each_schedulers_tools(scheduler, text, state) -> None:
    assert SCHEDULERS[scheduler].parse_state(text) == state


@pytest.mark.parametrize("scheduler, text, submitted", [
    ("slurm", "JobId=1 JobState=RUNNING SubmitTime=2026-11-27T22:41:10 EligibleTime=x",
     "2026-11-27T22:41:10"),
    ("slurm", "CANCELLED by 0|2026-11-27T22:41:11\n", "2026-11-27T22:41:11"),  # sacct
    ("pbs", "Job Id: 1.d\n    ctime = Fri Nov 27 22:41:10 2026\n    job_state = R\n",
     "Fri Nov 27 22:41:10 2026"),
    ("slurm", "JobId=1 JobState=RUNNING", None),
])
def test_submit_times_are_read_from_each_schedulers_tools(scheduler, text, submitted) -> None:
    assert SCHEDULERS[scheduler].parse_submitted(text) == submitted
    assert SCHEDULERS[scheduler].parse_state(text) in ("RUNNING", "CANCELLED")


def test_a_restarted_clusters_job_of_the_same_id_is_another_job() -> None:
    """Job ids start again at 1 on a restarted cluster: the job this tool submitted at another
    time has ended, whatever the new job 1 is doing; an entry without the time (written by an
    earlier version) takes the scheduler's word as before."""
    def ask(argv: list[str]) -> str | None:
        return "JobId=1 JobState=RUNNING SubmitTime=2026-11-27T22:41:16" \
            if argv[0] == "scontrol" else None
    slurm = SCHEDULERS["slurm"]
    assert slurm.job_state("1", ask, submitted="2026-11-27T22:41:10") is None
    assert slurm.job_state("1", ask, submitted="2026-11-27T22:41:16") == "RUNNING"
    assert slurm.job_state("1", ask) == "RUNNING"
    assert slurm.submitted_at("1", ask) == "2026-11-27T22:41:16"


def test_each_scheduler_owns_its_rendezvous() -> None:
    for name, scheduler in SCHEDULERS.items():
        assert scheduler.rendezvous is RENDEZVOUS[name]
        at_job_time = scheduler.rendezvous.at_job_time(ref)
        assert word(at_job_time.endpoint) == '"${MASTER_ADDR}:${MASTER_PORT}"'
        assert word(at_job_time.id) == f'"${{{scheduler.rendezvous.job_id_var}}}"'
    assert (RENDEZVOUS["slurm"].job_id_var, RENDEZVOUS["pbs"].job_id_var) == \
        ("SLURM_JOB_ID", "PBS_JOBID")


def test_directive_values_a_parser_could_misread_are_refused() -> None:
    assert directive("proj_1", "--account") == "proj_1"
    for bad in ("my project", "a;b", "$HOME", "x\ny"):
        with pytest.raises(ConfigError, match="has characters a batch directive cannot carry"):
            directive(bad, "--account")
