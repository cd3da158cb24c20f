"""Unit tests of module-file and exec-wrapper rendering: what they set, and quoting of any value."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from containers.inputs.sites import load_sites
from containers.publish.modulefile import (comment_text, lua_string, render_exec_wrapper,
                                           render_modulefile)
from tests.fixtures import ROOT
from tests.publish.standin import NASTY, module_spec as _spec


def test_lua_string_escapes_everything_that_matters() -> None:
    assert lua_string("plain /path:1,2") == '"plain /path:1,2"'
    assert lua_string(NASTY) == '"say \\"hi\\" \\\\ it\'s ]] end\\nnext\\tline\\001"'
    assert lua_string("a\x002") == '"a\\0002"', "three digits: a following digit stays out"


def test_modulefile_sets_image_binds_env_and_path() -> None:
    text = render_modulefile(_spec())
    lines = text.splitlines()
    assert 'local sif = "/appl/containers/lumi-rocm/1.0.sif"' in lines
    assert 'setenv("SIF", sif)' in lines and 'setenv("CONTAINER_IMAGE", sif)' in lines
    assert 'local binds = {"/var/spool/slurmd", "/opt/cray", "/pfs:/pfs:ro"}' in lines
    # SingularityCE reads SINGULARITY_BIND alone; Apptainer both, APPTAINER_BIND first
    assert [l for l in lines if "_BIND" in l] == [
        'for _, name in ipairs({"SINGULARITY_BIND"}) do',
        'pushenv("SINGULARITY_BIND", table.concat(binds, ","))']
    apptainer = render_modulefile(_spec(runtime="apptainer")).splitlines()
    assert [l for l in apptainer if "_BIND" in l] == [
        'for _, name in ipairs({"APPTAINER_BIND", "SINGULARITY_BIND"}) do',
        'pushenv("APPTAINER_BIND", table.concat(binds, ","))',
        'pushenv("SINGULARITY_BIND", table.concat(binds, ","))']
    for prefix in ("SINGULARITYENV_", "APPTAINERENV_"):
        assert f'pushenv("{prefix}NCCL_SOCKET_IFNAME", "hsn")' in lines
        assert f'pushenv("{prefix}WEIRD", {lua_string(NASTY)})' in lines
    assert 'prepend_path("PATH", "/appl/containers/lumi-rocm/bin")' in lines
    assert 'family("container_image")' in lines
    assert any(l.startswith("help(") for l in lines) and "whatis(\"Version: 1.0\")" in lines
    assert 'singularity exec --rocm \\"$SIF\\" COMMAND' in text  # a Lua string's quotes
    assert "\n" not in lua_string(NASTY), "no raw newline can end a Lua string early"


def test_modulefile_without_binds_or_env_sets_none() -> None:
    text = render_modulefile(_spec(binds=(), env={}, gpu_flag=None, runtime="apptainer"))
    assert "BIND" not in text and "ENV_" not in text and 'apptainer exec \\"$SIF\\"' in text


def test_exec_wrapper_runs_the_loaded_versions_runtime_and_flag(tmp_path: Path) -> None:
    """One wrapper serves every version, so it holds no version's facts: the runtime and GPU
    flag come from the loaded module (an older version keeps running with its own after a
    newer one, or a changed site profile, is published)."""
    script = tmp_path / "w"
    text = render_exec_wrapper("cpu")
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    script.chmod(0o755)
    runtime = tmp_path / "fake runtime"
    runtime.write_text("#!/bin/sh\nprintf '[%s]' \"$@\"\n")
    runtime.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SIF", "CONTAINER_"))}
    for flag, shown in ((None, "[exec][/i.sif][true]"), ("--nv", "[exec][--nv][/i.sif][true]"),
                        ("--weird flag'", "[exec][--weird flag'][/i.sif][true]")):
        env = {**base, "SIF": "/i.sif", "CONTAINER_RUNTIME": str(runtime),
               "CONTAINER_GPU_FLAG": flag or ""}
        result = subprocess.run([str(script), "true"], capture_output=True, text=True, env=env)
        assert (result.returncode, result.stdout) == (0, shown), result.stderr
    result = subprocess.run([str(script), "true"], capture_output=True, text=True, env=base)
    assert result.returncode == 1 and "load a module first: module load cpu" in result.stderr
    result = subprocess.run([str(script), "true"], capture_output=True, text=True,
                            env={**base, "SIF": "/i.sif"})
    assert result.returncode == 1 and "publish it again" in result.stderr
    one = render_modulefile(_spec(runtime="singularity", gpu_flag="--rocm"))
    two = render_modulefile(_spec(runtime="apptainer", gpu_flag=None))
    assert 'setenv("CONTAINER_RUNTIME", "singularity")' in one
    assert 'setenv("CONTAINER_GPU_FLAG", "--rocm")' in one
    assert 'setenv("CONTAINER_RUNTIME", "apptainer")' in two
    assert 'setenv("CONTAINER_GPU_FLAG", "")' in two


#: Lmod's functions as no-ops, so plain Lua can run a module file and show what it would run.
LMOD_STUBS = ("for _, name in ipairs({'help', 'whatis', 'family', 'setenv', 'pushenv', "
              "'prepend_path', 'depends_on'}) do _G[name] = function() end end\n")


def test_comment_text_keeps_comments_on_one_line() -> None:
    assert comment_text("cpu/1.0") == "cpu/1.0"
    assert comment_text("a\nb\rc\x01d\u2028e é") == "a\\nb\\rc\\x01d\\u2028e é"


def test_module_file_quoting_holds_even_for_a_hostile_name(tmp_path: Path) -> None:
    """Publish refuses such names (test_publisher); the writer must be safe without that."""
    pwned = tmp_path / "PWNED"
    hostile = f"x\nos.execute('touch {pwned}')\n--"
    text = render_modulefile(_spec(target=hostile, version=hostile))
    script = tmp_path / "module.lua"
    script.write_text(LMOD_STUBS + text)
    result = subprocess.run(["lua", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not pwned.exists(), "a name ran code from the module file"
    assert len(text.splitlines()) == len(render_modulefile(_spec()).splitlines())


def test_exec_wrapper_quoting_holds_even_for_a_hostile_name(tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    script = tmp_path / "w"
    script.write_text(render_exec_wrapper(f"x\ntouch {pwned}\n#"))
    script.chmod(0o755)
    result = subprocess.run([str(script), "true"], capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "SIF"})
    assert result.returncode == 1 and "load a module first" in result.stderr
    assert not pwned.exists(), "a name ran code from the exec wrapper"


def test_modulefile_loads_the_modules_the_sites_jobs_load() -> None:
    """Derecho's jobs load cuda and apptainer (modules and runtime_module): its module file loads
    them too, before anything else, so <target>-exec finds apptainer; a site without modules
    loads none."""
    modules = load_sites(ROOT)["derecho"].job_modules
    assert modules == ("cuda", "apptainer")
    lines = render_modulefile(_spec(runtime="apptainer", modules=modules)).splitlines()
    loads = [line for line in lines if line.startswith("depends_on(")]
    assert loads == ['depends_on("cuda")', 'depends_on("apptainer")']
    assert lines.index(loads[-1]) < lines.index('setenv("SIF", sif)')
    assert 'setenv("CONTAINER_MODULES", "cuda apptainer")' in lines
    assert "depends_on" not in render_modulefile(_spec())
    hostile = render_modulefile(_spec(modules=(NASTY,)))
    assert f"depends_on({lua_string(NASTY)})" in hostile.splitlines()


def _bash_only(tmp_path: Path) -> Path:
    """A PATH folder with bash and nothing else (no container runtime)."""
    folder = tmp_path / "path"
    folder.mkdir()
    (folder / "bash").symlink_to(shutil.which("bash"))
    return folder


@pytest.mark.parametrize("modules, says", [
    ("cuda apptainer", "derecho-cuda-exec: apptainer not found on PATH: load the site's "
                       "modules first: module load cuda apptainer\n"),
    ("", "derecho-cuda-exec: apptainer not found on PATH: load the module that provides it "
         "first (module load apptainer)\n")])
def test_exec_wrapper_names_a_missing_runtime_in_one_line(tmp_path: Path, modules: str,
                                                          says: str) -> None:
    """Without the runtime on PATH the wrapper stops (127, as a shell does for a missing
    command) with one line naming the runtime and the modules to load, instead of bash's
    "apptainer: command not found" halfway through."""
    script = tmp_path / "derecho-cuda-exec"
    script.write_text(render_exec_wrapper("derecho-cuda"))
    script.chmod(0o755)
    env = {"PATH": str(_bash_only(tmp_path)), "SIF": "/i.sif", "CONTAINER_RUNTIME": "apptainer",
           "CONTAINER_GPU_FLAG": "--nv", "CONTAINER_MODULES": modules}
    result = subprocess.run([str(script), "true"], capture_output=True, text=True, env=env)
    assert (result.returncode, result.stderr, result.stdout) == (127, says, "")


#: Lmod's shell setup, where the machine has Lmod (./setup.sh installs Debian's).
LMOD_INIT = Path(os.environ.get("LMOD_PKG", "/usr/share/lmod/lmod"), "init", "bash")
#: What a user set before loading the module, each printed as bash's ``declare -p`` does.
USERS_OWN = ("SINGULARITY_BIND", "APPTAINER_BIND", "SINGULARITYENV_GREETING",
             "APPTAINERENV_GREETING", "SINGULARITYENV_MINE")


@pytest.mark.apptainer
def test_module_keeps_the_users_binds_and_unloads_to_them(tmp_path: Path, cpu_image: Path,
                                                          real_runtime) -> None:
    """A user who set only SINGULARITY_BIND (and SINGULARITYENV_*) loads the module: the image
    sees the user's bind and the site's (Apptainer reads APPTAINER_BIND alone once the module
    sets it) and the user's variables; ``module unload`` gives the user's variables back."""
    for name, text in (("user", "the user's"), ("site", "the site's")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text(text)
    modules = tmp_path / "modules" / "cpu"
    modules.mkdir(parents=True)
    (modules / "1.0.lua").write_text(render_modulefile(_spec(
        target="cpu", image=str(cpu_image), runtime="apptainer", gpu_flag=None,
        binds=(f"{tmp_path / 'site'}:/srv",), env={"GREETING": "site"})))
    show = " ".join(f"declare -p {name} 2>/dev/null || echo unset {name};" for name in USERS_OWN)
    script = f"""set -e
source {LMOD_INIT}
{show}
module use {tmp_path / 'modules'}
module load cpu/1.0
{real_runtime.binary} exec "$SIF" sh -c 'echo "$(cat /mnt/file) + $(cat /srv/file) + $GREETING + $MINE"'
module unload cpu
{show}"""
    env = {**os.environ, "SINGULARITY_BIND": f"{tmp_path / 'user'}:/mnt",
           "SINGULARITYENV_GREETING": "mine", "SINGULARITYENV_MINE": "kept"}
    for name in ("APPTAINER_BIND", "APPTAINERENV_GREETING"):
        env.pop(name, None)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines, count = result.stdout.splitlines(), len(USERS_OWN)
    assert lines[count] == "the user's + the site's + site + kept", result.stdout + result.stderr
    assert lines[count + 1:] == lines[:count], "module unload gives the user's variables back"
