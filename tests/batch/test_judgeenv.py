"""The batch verdict of a smoke or training job on nodes of another architecture: the image's own
Python judges with packages prepared on the login node (containers/batch/judgeenv.py), no venv,
pip or package index on the node."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from containers.batch import job as batch, judgeenv
from containers.errors import CommandFailed
from containers.host.facts import host_arch
from containers.inputs.settings import load_settings
from containers.prove.registry import kind_of
from tests.fixtures import ROOT

IMAGE = {"target": "cpu", "inputs_hash": "a" * 64, "sha256": "b" * 64,
         "build_date": "2026-11-20T10:00:00Z"}


def _render(data_world, tmp_path, *, target: str, site: str, judge, host: str = "x86_64",
            settings=None):
    targets, sites = data_world
    settings = settings or load_settings(Path("/proj"), {"tmp_dir": str(tmp_path)})
    return batch.plan_job(batch.JobNeeds(targets[target], sites[site], settings=settings,
                          host_arch=host, site_arch=targets[target].arch, venv=Path("/proj/.venv"),
                          judge=judge), batch.JobRequest(kind=kind_of("smoke")),
                          environ={"SBATCH_ACCOUNT": "p"})


def _code(text: str) -> str:
    """The script's commands: no comment lines, continuation lines joined."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return re.sub(r" \\\n\s*", " ", "\n".join(lines))


@pytest.mark.parametrize("workload", ["smoke", "ddp"])
def test_an_aarch64_job_rendered_on_x86_64_judges_in_its_image(data_world, tmp_path,
                                                                workload) -> None:
    judge = judgeenv.plan(Path("/proj"), arch="aarch64", python="3.12")
    targets, sites = data_world
    made = batch.plan_job(batch.JobNeeds(targets["olivia-cuda"], sites["olivia"],
                          settings=load_settings(Path("/proj"), {"tmp_dir": str(tmp_path)}),
                          host_arch="x86_64", site_arch="aarch64", venv=Path("/proj/.venv"),
                          judge=judge), batch.JobRequest(kind=kind_of(workload)),
                          environ={"SBATCH_ACCOUNT": "p"})
    text = made.text
    code = _code(text)
    assert not re.search(r"\bpip\b", code) and "venv" not in code and "/bin/invoke" not in code
    folder = str(judge.folder)
    assert re.fullmatch(r"/proj/\.judge/aarch64-py3\.12-[0-9a-f]{10}", folder)
    last = code.splitlines()[-1]
    assert last.startswith("exec singularity exec ") or last.startswith("exec apptainer exec ")
    for bind in ("/proj:/proj:ro", f"{folder}:{folder}:ro", "/proj/images:/proj/images:ro",
                 "/proj/results", "/proj/results/perflog"):
        assert f"--bind {bind} " in last
    assert f"--env PYTHONPATH={folder}:/proj " in last
    assert "--env INVOKE_CONTAINERS_RESULTS_DIR=/proj/results " in last
    assert last.endswith(" python3 -m invoke --search-root /proj verdict --results "
                         + last.split("--results ")[1])
    assert '--exit-status "${status}"' in last
    assert f"if [[ ! -f {folder}/COMPLETE ]]; then" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_an_unknown_image_python_renders_a_job_that_fails_closed(data_world, tmp_path) -> None:
    text = _render(data_world, tmp_path, target="olivia-cuda", site="olivia", judge=None).text
    assert not re.search(r"\bpip\b", _code(text)) and "venv" not in _code(text)
    assert text.rstrip("\n").endswith("exit 2") and "verdict: FAIL: the Python of" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_native_job_still_judges_with_this_checkouts_environment(data_world, tmp_path) -> None:
    text = _render(data_world, tmp_path, target="cpu", site="local-slurm", judge=None).text
    assert "exec /proj/.venv/bin/invoke verdict --results " in text and ".judge" not in text


def test_the_pip_line_asks_for_wheels_of_the_nodes_platform_and_python() -> None:
    judge = judgeenv.plan(Path("/r"), arch="aarch64", python="3.11",
                          reqs=("invoke==3.0.3", "PyYAML==6.0.4"))
    argv = judgeenv.pip_argv(Path("/r/.judge/tmp"), judge)
    assert argv[1:4] == ["-m", "pip", "install"]
    assert argv[argv.index("--target") + 1] == "/r/.judge/tmp"
    assert "--only-binary=:all:" in argv and "--no-deps" in argv
    assert [argv[i + 1] for i, w in enumerate(argv) if w == "--platform"] == \
        ["manylinux2014_aarch64", "manylinux_2_28_aarch64"]
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--implementation") + 1] == "cp"
    assert argv[-2:] == ["invoke==3.0.3", "PyYAML==6.0.4"]
    assert not any("index-url" in w or "://" in w for w in argv)  # pip's own configuration
    other = judgeenv.plan(Path("/r"), arch="aarch64", python="3.11", reqs=("invoke==3.0.4",))
    assert other.folder != judge.folder


def test_the_package_list_is_closed_under_its_dependencies() -> None:
    """--no-deps: every dependency of what judging imports must be in the list itself."""
    listed = {re.sub(r"[-_.]+", "-", n).lower() for n in judgeenv.JUDGE_PACKAGES}
    for name in judgeenv.JUDGE_PACKAGES:
        for req in importlib.metadata.requires(name) or []:
            if "extra ==" in req:
                continue
            dep = re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]
            assert re.sub(r"[-_.]+", "-", dep).lower() in listed, f"{name} needs {dep}"


def test_the_package_list_holds_what_judging_imports() -> None:
    """Every third-party module that ``import tasks`` and the verdict load comes from a listed
    package (pydantic came with the site profiles: without it the image's Python cannot judge)."""
    def loaded(imports: str) -> set[str]:
        code = (f"import sys, json{imports}; "
                "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
        return set(json.loads(subprocess.run([os.sys.executable, "-c", code], cwd=ROOT,
                                             text=True, capture_output=True, check=True).stdout))

    # what the interpreter loads by itself (site hooks) is not judging's; this checkout is bound
    judging = loaded(", tasks, containers.app.judging") - loaded("") - {"tasks", "containers"}
    listed = {re.sub(r"[-_.]+", "-", n).lower() for n in judgeenv.JUDGE_PACKAGES}
    owners = importlib.metadata.packages_distributions()
    missing = {dist for name in judging for dist in owners.get(name, ())
               if re.sub(r"[-_.]+", "-", dist).lower() not in listed}
    assert not missing, missing


def test_the_image_python_comes_from_the_record_else_the_env_spec() -> None:
    assert judgeenv.image_python({"stack": {"python": "3.12.3"}}, ("python=3.11",)) == "3.12"
    assert judgeenv.image_python({}, ("numpy", "conda-forge::python==3.11.9")) == "3.11"
    assert judgeenv.image_python({"stack": {"python": None}}, ("pip",)) is None


def test_two_submits_at_once_leave_one_complete_folder(tmp_path) -> None:
    judge = judgeenv.plan(tmp_path, arch="aarch64", python="3.11", reqs=("invoke==3.0.3",))
    both_in = threading.Barrier(2)
    calls = []

    def fake_pip(argv: list[str]) -> int:  # both are inside pip before either renames
        into = Path(argv[argv.index("--target") + 1])
        (into / "invoke").mkdir()
        calls.append(into)
        both_in.wait(timeout=10)
        return 0

    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(
        judgeenv.prepare(judge, say=lambda _: None, runner=fake_pip))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert made == [judge.folder, judge.folder] and len(set(calls)) == 2
    assert sorted(p.name for p in judge.folder.parent.iterdir()) == [judge.folder.name]
    assert (judge.folder / judgeenv.COMPLETE).read_text() == "invoke==3.0.3\n"
    assert judgeenv.prepare(judge, say=lambda _: None, runner=None) == judge.folder  # kept


def test_a_failed_pip_leaves_nothing_behind(tmp_path) -> None:
    judge = judgeenv.plan(tmp_path, arch="aarch64", python="3.11", reqs=("invoke==3.0.3",))
    with pytest.raises(CommandFailed):
        judgeenv.prepare(judge, say=lambda _: None, runner=lambda argv: 1)
    assert list(judge.folder.parent.iterdir()) == []


@pytest.mark.apptainer
def test_the_jobs_judge_line_runs_in_the_real_image_with_no_index(data_world, tmp_path,
                                                                   cpu_image) -> None:
    """The packages for this machine and the CPU image's Python 3.11, prepared in the checkout
    as invoke job prepares them; then exactly the lines the job ends with, run with pip pointed
    at nothing, judge a smoke job's results folder: PASS, and FAIL when a rank's file is
    missing."""
    arch = host_arch()
    judge = judgeenv.plan(ROOT, arch=arch, python="3.11")
    judgeenv.prepare(judge, say=lambda _: None)
    settings = load_settings(ROOT, {"tmp_dir": str(tmp_path / "tmp"),
                                    "results_dir": str(tmp_path / "results"),
                                    "perflog_dir": str(tmp_path / "perflog"),
                                    "images_dir": str(tmp_path / "images")})
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cpu.sif").symlink_to(cpu_image)
    (tmp_path / "images" / "cpu.sif.json").write_text(json.dumps(IMAGE))
    made = _render(data_world, tmp_path, target="cpu", site="local-slurm", judge=judge,
                   host=arch, settings=settings)
    lines = made.text.rstrip("\n").splitlines()
    tail = lines[next(i for i, line in enumerate(lines) if "image's own Python judges" in line):]
    folder = Path(made.results.format(job_id="77"))
    row = {"bytes": 16 << 20, "oop": {"busbw": 2.0, "algbw": 2.0, "wrong": 0},
           "ip": {"busbw": 2.1, "algbw": 2.1, "wrong": 0}}
    files = {"job.json": {"target": "cpu", "site": "local-slurm", "workload": "smoke",
                          "nodes": 1, "gpus_per_node": 2, "launcher": "torchrun",
                          "partition": None},
             "image.json": IMAGE, "rank-0.json": {"rank": 0, "finished": True},
             "rank-1.json": {"rank": 1, "finished": True},
             "allreduce.json": {"backend": "gloo", "nodes": 1, "finished": "x",
                                "results": [row]}}
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SLURM_JOB_ID": "77",
           "PIP_INDEX_URL": "http://127.0.0.1:9/nothing", "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_INDEX": "1"}

    def judged(drop: str | None = None) -> tuple[int, dict, str]:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (folder / name).unlink(missing_ok=True)
            if name != drop:
                (folder / name).write_text(json.dumps(content))
        (folder / "run.log").write_text("rank 0: all_reduce ok\n")
        (folder / "verdict.json").unlink(missing_ok=True)
        done = subprocess.run(["bash", "-c", "\n".join(["set -euo pipefail", "status=0",
                                                         *tail])],
                              env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        return done.returncode, json.loads((folder / "verdict.json").read_text()), \
            done.stdout + done.stderr

    code, record, out = judged()
    assert code == 0 and record["passed"] is True, out
    assert record["sha256"] == IMAGE["sha256"] and "verdict: PASS" in out
    assert (folder / "all_reduce.png").is_file()  # matplotlib came from the judge folder
    assert list((tmp_path / "perflog").rglob("*")), "no perflog line"
    code, record, out = judged(drop="rank-1.json")
    assert code == 2 and record["passed"] is False, out


def test_invoke_job_prepares_the_folder_when_it_writes_a_foreign_job(tmp_path,
                                                                     monkeypatch) -> None:
    """The image's Python from its build record; the folder made (here: recorded) before the
    script is written; with no Python known, --out says so in the script's header."""
    from containers.app.project import Project
    from containers.app import jobs
    from containers.errors import UsageError

    monkeypatch.setattr(jobs, "host_arch", lambda: "x86_64")
    prepared = []
    monkeypatch.setattr(judgeenv, "prepare", lambda judge, say: prepared.append(judge))
    project = Project.load(ROOT, {"images_dir": str(tmp_path / "images"),
                                  "results_dir": str(tmp_path / "results")})
    script = tmp_path / "job.sh"
    # with no Python known, the script is written for reading, its header saying what is
    # missing; submitting is refused in one line
    jobs.job(project, batch.JobRequest(kind=kind_of("smoke"), account="p"),
             target="olivia-cuda", out=script, say=lambda _: None)
    assert script.read_text().split("\n")[1].startswith(
        "# NOT READY TO SUBMIT: the verdict of olivia-cuda's jobs runs in the image on its "
        "aarch64 nodes") and prepared == []
    with pytest.raises(UsageError, match=r"^--submit: not submitted: .*stack\.python"):
        jobs.job(project, batch.JobRequest(kind=kind_of("smoke"), account="p"),
                 target="olivia-cuda", submit=True, say=lambda _: None)
    script.unlink()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "olivia-cuda.sif.json").write_text(
        json.dumps({"target": "olivia-cuda", "stack": {"python": "3.12.3"}}))
    jobs.job(project, batch.JobRequest(kind=kind_of("smoke"), account="p"),
             target="olivia-cuda", out=script, say=lambda _: None)
    [judge] = prepared
    assert (judge.arch, judge.python) == ("aarch64", "3.12")
    assert judge.folder.parent == ROOT / ".judge" and str(judge.folder) in script.read_text()
    prepared.clear()
    jobs.job(project, batch.JobRequest(kind=kind_of("build"), account="p"),
             target="olivia-cuda", out=tmp_path / "build.sh", say=lambda _: None)
    # a build job: the tool's packages, one folder per Python the node may have
    assert [(env.arch, env.python) for env in prepared] == \
        [("aarch64", python) for python in judgeenv.BUILD_PYTHONS]
    text = (tmp_path / "build.sh").read_text()
    assert all(env.folder.parent == ROOT / ".buildenv" and str(env.folder) in text
               for env in prepared)
    prepared.clear()
    jobs.job(project, batch.JobRequest(kind=kind_of("build"), account="p"),
             target="olivia-cuda", say=lambda _: None)
    assert prepared == []  # printed only: nothing is made


def test_the_build_packages_are_the_tools_dependency_closure() -> None:
    """pyproject's [project] dependencies, extras followed (cyclonedx's json-validation needs
    jsonschema and rpds-py), each pinned as installed here, closed under this environment's
    metadata for that Python (pip runs --no-deps)."""
    import tomllib
    roots = tomllib.loads(judgeenv.PYPROJECT.read_text())["project"]["dependencies"]
    for python in judgeenv.BUILD_PYTHONS:
        pinned = dict(req.split("==") for req in judgeenv.build_requirements(python, "aarch64"))
        keys = {re.sub(r"[-_.]+", "-", name).lower() for name in pinned}
        for root in roots:
            assert re.sub(r"[-_.]+", "-", re.split(r"[ ;<>=!~\[]", root)[0]).lower() in keys
        assert {"jsonschema", "rpds-py", "cotainr", "pydantic-core"} <= keys
        assert all(importlib.metadata.version(name) == version
                   for name, version in pinned.items())
        for name in pinned:
            for req in map(Requirement, importlib.metadata.requires(name) or []):
                if req.marker is None or req.marker.evaluate({"python_version": python,
                                                              "extra": ""}):
                    assert re.sub(r"[-_.]+", "-", req.name).lower() in keys, f"{name}: {req}"


def test_a_dependency_missing_here_is_refused_in_one_line(tmp_path) -> None:
    from containers.errors import ConfigError
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["invoke>=3", "no-such-package-here>=1"]\n')
    with pytest.raises(ConfigError, match=r"no-such-package-here .* is not installed"):
        judgeenv.build_requirements("3.11", "aarch64", pyproject=pyproject)


def test_prepared_console_scripts_run_the_nodes_python3(tmp_path) -> None:
    """pip names this machine's Python in bin/cotainr's #! line; the node has its own."""
    env = judgeenv.plan(tmp_path, arch="aarch64", python="3.11", reqs=("cotainr==1",),
                        under=judgeenv.BUILD_FOLDER, purpose="the build job's packages")

    def fake_pip(argv: list[str]) -> int:
        bin_dir = Path(argv[argv.index("--target") + 1]) / "bin"
        bin_dir.mkdir()
        (bin_dir / "cotainr").write_text("#!/x86/venv/bin/python3\nimport sys\n")
        return 0

    said: list[str] = []
    folder = judgeenv.prepare(env, say=said.append, runner=fake_pip)
    assert folder.parent == tmp_path / ".buildenv"
    assert (folder / "bin" / "cotainr").read_text() == "#!/usr/bin/env python3\nimport sys\n"
    assert said[0].startswith("preparing the build job's packages for aarch64 Python 3.11")
