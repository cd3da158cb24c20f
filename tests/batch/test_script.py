"""Shell script text: job-time variables quoted so that only they expand (checked by letting bash
expand them), and long commands wrapped where the argv itself says (the only line wrapping)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from containers.batch.script import SHELL_VARS, WIDTH, breaks, command, ref, render, word
from containers.host.runtime import Runtime
from containers.run.launchers import LAUNCHERS, Launch
from containers.run.rendezvous import Rendezvous

RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="site")


def test_job_time_variables_expand_in_the_job_and_nothing_else_does(tmp_path) -> None:
    nasty = "a b'c\"d$HOME`x`\\e!f"
    tokens = [ref("JOB"), f"/tmp/{ref('USER')}-cache-{ref('JOB')}", nasty,
              f"{nasty}:{ref('JOB')}:{nasty}", "plain", "", "--env", "X=^LL128"]
    script = tmp_path / "echo.sh"
    script.write_text("printf '%s\\n' " + " ".join(word(t) for t in tokens) + "\n")
    out = subprocess.run(["bash", str(script)], env={"JOB": "42", "USER": "alice"},
                         capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == ["42", "/tmp/alice-cache-42", nasty, f"{nasty}:42:{nasty}",
                                    "plain", "", "--env", "X=^LL128"]
    assert word(f"/tmp/{ref('USER')}-x") == '"/tmp/${USER}-x"'
    with pytest.raises(ValueError):
        ref("not a name")
    assert SHELL_VARS["SLURM_JOB_ID"] == ref("SLURM_JOB_ID") and "ANY" in SHELL_VARS


def _launch(**fields) -> Launch:
    base = dict(runtime=RUNTIME, image=Path("/proj/images/x.sif"), script="/jobs/allreduce.py",
                args=("--sizes", "1K:1M"), binds=("/proj/jobs:/jobs:ro", "/scratch"),
                env={"NCCL_DEBUG": "INFO"}, ranks_per_node=4, gpu_flag="--nv")
    return Launch(**{**base, **fields})


def test_long_commands_wrap_before_each_part_the_argv_shows() -> None:
    rdzv = Rendezvous(host=ref("MASTER_ADDR"), port=ref("MASTER_PORT"), id=ref("SLURM_JOB_ID"))
    argv = LAUNCHERS["torchrun"].argv(_launch(nodes=2, rendezvous=rdzv, step=True))
    assert command(argv).split(" \\\n    ") == [
        "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1",
        "apptainer exec --nv", "--bind /proj/jobs:/jobs:ro", "--bind /scratch",
        "--env NCCL_DEBUG=INFO", "/proj/images/x.sif",
        'torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d '
        '"--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}" "--rdzv-id=${SLURM_JOB_ID}"',
        "/jobs/allreduce.py --sizes 1K:1M"]
    # torchrun --standalone is a flag without a value: the script is still found.
    standalone = LAUNCHERS["torchrun"].argv(_launch(step=True))
    assert "    /jobs/allreduce.py --sizes 1K:1M" in command(standalone).splitlines()
    # bash -c takes its command along: nothing after the image is cut.
    per_gpu = LAUNCHERS["srun-per-gpu"].argv(_launch(rendezvous=rdzv, step=True))
    last = command(per_gpu).splitlines()[-1]
    assert last.startswith("    bash -c '") and last.endswith("--sizes 1K:1M'")


def test_short_commands_and_plain_commands_stay_on_one_line() -> None:
    assert command(["invoke", "build", "--target", "cpu"]) == "invoke build --target cpu"
    plain = ["/a/very/long/path/" * 8 + "invoke", "build", "--target", "x"]
    assert len(" ".join(plain)) > WIDTH and "\\\n" not in command(plain)
    # No runtime in the argv: only --bind/--env options are cut before.
    assert breaks(["tool", "--bind", "a", "--env", "B=1", "--other"]) == {1, 3}
    # The runtime, --bind, the image, the command, its script (a one-letter option takes a value).
    assert breaks(["apptainer", "exec", "--bind", "a", "img.sif", "cmd", "-x", "v", "s.py"]) == \
        {0, 2, 4, 5, 8}
    assert breaks(["srun", "-N2", "apptainer", "exec", "--nv", "img.sif", "python3", "--flag",
                   "s.py", "a"]) == {2, 5, 6, 8}


def test_script_renders_directives_header_and_body(tmp_path) -> None:
    text = render(["#SBATCH --nodes=2"], ["hello", ""], ["echo " + word(ref("SLURM_JOB_ID"))])
    assert text.startswith("#!/bin/bash\n#SBATCH --nodes=2\n\n# hello\n#\nset -euo pipefail\n")
    assert text.endswith('echo "${SLURM_JOB_ID}"\n')
    (tmp_path / "job.sh").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    with pytest.raises(ValueError, match="escaped rendering"):
        render([], [], [ref("X")])
