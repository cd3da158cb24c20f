"""A user's own command planned through the site's launch path: the words after ``--`` checked,
the device gate on GPU sites only (started as the launcher starts its job steps), ``--no-launcher``
as one plain process, and ``invoke shell``'s interactive command."""

from __future__ import annotations

import pytest

from containers.app.project import Project
from containers.errors import UsageError
from containers.host.runtime import Runtime, assumed_runtime
from containers.run.command import INTERACTIVE, check_command, plan_command, shell_argv
from containers.run.workload import Placement
from tests.fixtures import ROOT

ENVIRON = {"USER": "u", "SLURM_JOB_ID": "1"}


@pytest.mark.parametrize("words, reason", [
    ((), "name the command to run after --"), (("  ",), "name the command to run after --"),
    (("python", "a\x00b"), "holds a NUL byte"),
])
def test_a_missing_or_unpassable_command_is_refused_in_one_line(words, reason) -> None:
    with pytest.raises(UsageError, match=reason) as refused:
        check_command(words)
    assert refused.value.flag == "--"
    assert check_command(["python", "x.py"]) == ("python", "x.py")


def _plan(project, target: str, **options):
    target = project.target(target)
    return plan_command(target, project.site_of(target), settings=project.settings,
                        runtime=assumed_runtime("apptainer"), run_id="t", timeout=0,
                        environ=ENVIRON, strict=False, **options)


def test_the_gate_runs_only_where_the_site_has_gpus(data_project) -> None:
    cpu = _plan(data_project, "cpu", command=["python", "x.py"], ranks=1)
    assert cpu.gate is None and cpu.command == ("python", "x.py")
    gpu = _plan(data_project, "lumi-rocm", command=["python", "x.py"], ranks=8)
    assert f"{data_project.settings.jobs_mount}/gate.py" in gpu.gate
    assert gpu.gate[-4:] == ["--expect-gpu", "rocm", "--ranks", "8"]
    assert _plan(data_project, "lumi-rocm", command=["/bin/true"], ranks=8, gate=False).gate \
        is None


def test_no_launcher_is_one_process_running_the_command_as_it_is(data_project) -> None:
    planned = _plan(data_project, "cpu", command=["python", "x.py"], ranks=4, launcher=False)
    assert planned.workload.ranks == 1
    assert planned.workload.argv[-2:] == ["python", "x.py"]
    assert "torchrun" not in " ".join(planned.workload.argv)
    with pytest.raises(UsageError, match="leave out --nodes") as refused:
        _plan(data_project, "cpu", command=["true"], ranks=1, launcher=False,
              placement=Placement(nodes=2, rendezvous=None))
    assert refused.value.flag == "--no-launcher"


def test_the_shell_binds_no_results_folder_and_defaults_to_an_interactive_bash(
        data_project) -> None:
    target = data_project.target("cpu")
    argv = shell_argv(target, data_project.site_of(target), settings=data_project.settings,
                      runtime=assumed_runtime("apptainer"), command=(), run_id="t",
                      environ=ENVIRON)
    assert argv[-3:] == list(INTERACTIVE)
    assert not [word for word in argv if str(data_project.settings.results_dir) in word]


def test_the_interactive_shell_does_not_read_the_users_bashrc() -> None:
    assert INTERACTIVE == ("/bin/bash", "--norc", "-i")


def test_a_users_command_on_a_site_with_a_cpu_map_is_pinned_per_rank() -> None:
    """invoke run on a full LUMI node: each rank pins itself (jobs/pinned.py), then becomes the
    user's command; on fewer ranks than the map, the command runs as given."""
    project = Project.load(ROOT, {})
    target = project.target("lumi-rocm")
    site = project.site_of(target)
    runtime = Runtime(binary="singularity", flavour="singularity", version="site")
    full = plan_command(target, site, settings=project.settings, runtime=runtime,
                        command=["python", "own.py"], ranks=8, run_id="x", timeout=0,
                        environ={"USER": "u", "SLURM_JOB_ID": "1"}, strict=False)
    tail = full.workload.argv[full.workload.argv.index("--no-python"):]
    assert tail == ["--no-python", "python3", "/opt/containers/jobs/pinned.py",
                    "49-55:57-63:17-23:25-31:1-7:9-15:33-39:41-47", "--", "python", "own.py"]
    assert full.gate[-4:] == ["--expect-gpu", "rocm", "--ranks", "8"]
    two = plan_command(target, site, settings=project.settings, runtime=runtime,
                       command=["python", "own.py"], ranks=2, run_id="x", timeout=0,
                       environ={"USER": "u", "SLURM_JOB_ID": "1"}, strict=False)
    assert two.workload.argv[-3:] == ["--no-python", "python", "own.py"]
