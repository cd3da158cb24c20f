"""What every batch job of a request has: its name, output, partition (a build's own where the
site names one), time and account, and header comments that say where each came from."""

from __future__ import annotations

from containers.batch.frame import example_preamble, job_frame
from containers.batch.request import JobRequest
from containers.inputs.settings import load_settings
from containers.prove.registry import kind_of
from containers.run.launchers import Shape


def _frame(data_world, tmp_path, workload: str, **request):
    targets, sites = data_world
    return job_frame(targets["lumi-rocm"], sites["lumi"],
                     settings=load_settings(tmp_path, {}),
                     request=JobRequest(kind=kind_of(workload), **request),
                     environ={"SBATCH_ACCOUNT": "p"}, stamp="20260101-120000")


def test_a_build_goes_to_the_sites_build_partition(data_world, tmp_path) -> None:
    assert _frame(data_world, tmp_path, "build").partition.name == "small"
    assert _frame(data_world, tmp_path, "smoke").partition.name == "standard-g"
    assert _frame(data_world, tmp_path, "build", partition="dev-g").partition.name == "dev-g"


def test_the_comments_say_where_the_values_came_from(data_world, tmp_path) -> None:
    frame = _frame(data_world, tmp_path, "smoke")
    assert frame.comments[0].startswith("invoke job: smoke of image lumi-rocm on site lumi")
    assert "account from SBATCH_ACCOUNT (sbatch reads it at submission)" in frame.comments[2]
    assert frame.resources.time == "00:30:00" and frame.resources.account is None
    sized = frame.sized(nodes=2, shape=Shape(tasks_per_node=8, cpus_per_task=7), gpus=8)
    assert (sized.nodes, sized.tasks_per_node, sized.gpus_per_node) == (2, 8, 8)


def test_the_catalogues_example_job_asks_what_the_site_needs(data_world) -> None:
    """One node of the default partition with all its GPUs, in the scheduler's own words, and
    an account to fill in where the site refuses jobs without one."""
    sites = data_world[1]
    puhti = example_preamble(sites["puhti"], "puhti-cuda")
    assert "#SBATCH --gres=gpu:v100:4" in puhti and "#SBATCH --nodes=1" in puhti
    assert "#SBATCH --account=YOUR_PROJECT" in puhti  # Puhti refuses jobs without one
    derecho = example_preamble(sites["derecho"], "x")
    assert "#PBS -A YOUR_PROJECT" in derecho and any(
        line.startswith("#PBS -l select=1:") and "ngpus=4" in line for line in derecho)
    assert "#SBATCH --account=YOUR_PROJECT" not in example_preamble(sites["local-slurm"], "x")
    assert example_preamble(sites["local"], "x") is None  # no scheduler
