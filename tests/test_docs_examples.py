"""The examples of the docs and the README: every ``invoke`` command in a ``bash`` or ``console``
block is parsed by invoke's own parser against the tasks (a task or flag that no longer exists
fails), and the blocks marked ``<!-- example: run -->`` run here, on the CPU image and the local
Slurm cluster where they need them (the convention: docs/writing-docs.md). The captured output
the results page shows is checked against a real run."""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from invoke import Program
from invoke.parser import ParseError, Parser, ParserContext

from tests.fixtures import ROOT

FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>bash|console)[^\n]*\n"
                   r"(?P<body>.*?)^(?P=indent)```", re.M | re.S)
MARK = re.compile(r"<!-- example: (?P<mark>[a-z ]+) -->\s*$")
#: A YAML block that is (a part of) a file the page's examples need: ``<!-- example: file
#: sites/example.yaml -->`` on the line above it.
FILE_BLOCK = re.compile(r"^<!-- example: file (?P<path>[\w./-]+) -->\n(?P<indent>[ ]*)```yaml"
                        r"[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
#: Task words whose runs need the image (unless only planned with --dry-run or --history).
IMAGE_TASKS = {"run", "shell", "smoke", "train"}
#: Where the local-slurm page says the cluster lives; a run gives it a temp folder instead.
LOCAL_SLURM_DIR = "/var/tmp/containers-local-slurm"
SHELL_WORDS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "<", "&"}


@dataclass(frozen=True)
class Block:
    source: str
    line: int
    lang: str
    body: str
    mark: str  # "" (syntax only), "run", "run slurm", "syntax"

    def __str__(self) -> str:
        return f"{self.source}:{self.line}"

    def commands(self) -> list[str]:
        """Each command of the block, continuation lines joined (console: the ``$`` lines)."""
        lines, joined = self.body.splitlines(), []
        for raw in lines:
            text = raw.strip()
            if self.lang == "console":
                if not text.startswith("$ ") and not (joined and joined[-1].endswith("\\")):
                    continue
                text = text[2:] if text.startswith("$ ") else text
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + text
            elif text and not text.startswith("#"):
                joined.append(text)
        return joined


def blocks() -> list[Block]:
    found = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            body = "\n".join(line[len(match["indent"]):] for line in match["body"].splitlines())
            found.append(Block(page.relative_to(ROOT).as_posix(),
                               text.count("\n", 0, match.start()) + 1, match["lang"], body,
                               mark["mark"].strip() if mark else ""))
    return found


BLOCKS = blocks()


def invocations(command: str) -> list[list[str]]:
    """The argv after each ``invoke`` word of a shell line (up to ``--`` or a shell operator)."""
    words = shlex.split(command, comments=True)
    found = []
    for index, word in enumerate(words):
        if word == "invoke":
            args = []
            for arg in words[index + 1:]:
                if arg == "--" or arg in SHELL_WORDS:
                    break
                args.append(arg)
            found.append(args)
    return found


@pytest.fixture(scope="module")
def parser() -> Parser:
    sys.path.insert(0, str(ROOT))
    from invoke import Collection

    import tasks

    core = ParserContext(args=Program().core_args())
    # a copy: invoke pops each help entry as it builds the arguments (test_cli reads them)
    return Parser(initial=core,
                  contexts=copy.deepcopy(Collection.from_module(tasks)).to_contexts())


def test_examples_are_found() -> None:
    marks = {block.mark for block in BLOCKS}
    assert {"run", "run slurm"} <= marks
    assert sum(1 for b in BLOCKS for c in b.commands() if invocations(c)) > 50


ELIDED = {"...", "…"}


def _check(parser: Parser, args: list[str]) -> str | None:
    """Why ``invoke ARGS`` does not parse, else None. An elided task (``invoke job ... --qos
    devel``: the task given) has its flags checked; with the task elided too, each flag must be
    some task's."""
    if args and args[0] in ELIDED:
        known = {name for context in parser.contexts.values() for name in context.flags}
        unknown = [a.split("=")[0] for a in args if a.startswith("--")
                   and a.split("=")[0] not in known]
        return f"no task has {', '.join(unknown)}" if unknown else None
    try:
        parser.parse_argv([a for a in args if a not in ELIDED])
    except ParseError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_invoke_command_parses(block: Block, parser: Parser) -> None:
    """The task and each of its flags exist, with a value where the flag takes one; except a
    typo the block shows refused (its output holds invoke's line for it: ``No idea what ...``)."""
    for command in block.commands():
        for args in invocations(command):
            problem = _check(parser, args)
            shown = problem is not None and block.lang == "console" and problem in block.body
            assert problem is None or shown, f"{block}: invoke {shlex.join(args)}: {problem}"


def test_a_stale_flag_fails_the_check(parser: Parser) -> None:
    assert "--gpu" in _check(parser, ["smoke", "--gpu", "2"])
    assert "smokes" in _check(parser, ["smokes"])
    assert "--gpu" in _check(parser, ["smoke", "...", "--gpu", "2"])
    assert _check(parser, ["...", "--qos", "devel"]) is None
    assert _check(parser, ["...", "--qoss", "devel"]) == "no task has --qoss"


def _env(results: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "INVOKE_CONTAINERS_RESULTS_DIR": str(results),
            "INVOKE_CONTAINERS_PERFLOG_DIR": str(results / "perflog")}


def _needs_image(block: Block) -> bool:
    for command in block.commands():
        for args in invocations(command):
            if args and (args[0] in IMAGE_TASKS or "--submit" in args) \
                    and "--dry-run" not in args and "--history" not in args:
                return True
    return False


def _expected(lines: list[str]) -> list[re.Pattern]:
    return [re.compile(".*".join(map(re.escape, line.split("…")))) for line in lines]


def page_files(source: str) -> dict[str, str]:
    """The files a page's ``example: file`` blocks make: each block appended to its file, in the
    order of the page (a site profile written in parts, one per section)."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer((ROOT / source).read_text()):
        body = "\n".join(line[len(match["indent"]):] for line in match["body"].splitlines())
        files[match["path"]] = files.get(match["path"], "") + body + "\n"
    return files


def _where(block: Block, request) -> Path:
    """Where a block runs: the checkout, or for a page with files, a copy of the project's inputs
    with the page's files added (a new file each: a page never edits a real input)."""
    files = page_files(block.source)
    if not files:
        return ROOT
    tmp = request.getfixturevalue("tmp_path")
    root = request.getfixturevalue("factory_cli_project")(images_dir=tmp / "images",
                                                          tmp_dir=tmp / "work")
    for path, text in files.items():
        assert not (root / path).exists(), f"{block.source} would replace {path}"
        (root / path).write_text(text)
    return root


def _run_console(block: Block, env: dict[str, str], cwd: Path = ROOT) -> None:
    """Each ``$ command`` runs; every output line written under it must appear, in order."""
    chunks = re.split(r"^\$ ", block.body, flags=re.M)[1:]
    for chunk in chunks:
        command, *expected = chunk.rstrip("\n").split("\n")
        result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=600)
        got = (result.stdout + result.stderr).splitlines()
        position = 0
        for pattern in _expected(expected):
            while position < len(got) and not pattern.fullmatch(got[position]):
                position += 1
            assert position < len(got), (f"{block}: `{command}` printed:\n" + "\n".join(got)
                                         + f"\nnot: {pattern.pattern}")


def _run_bash(block: Block, env: dict[str, str], body: str, cwd: Path = ROOT) -> None:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (f"{block} exited {result.returncode}:\n"
                                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mark == "run"], ids=str)
def test_run_examples(block: Block, tmp_path: Path, request) -> None:
    if _needs_image(block):
        request.getfixturevalue("cpu_image")
    env, cwd = _env(tmp_path / "results"), _where(block, request)
    if block.lang == "console":
        _run_console(block, env, cwd)
    else:
        _run_bash(block, env, block.body, cwd)


ADDING_A_SITE = "docs/adding-a-site.md"


def test_adding_a_site_example_passes_check(request) -> None:
    """The profile and manifest the page builds, joined as it says, are a valid site and target
    (its run block shows their ok lines and runs its jobs' commands)."""
    assert set(page_files(ADDING_A_SITE)) == {"sites/example.yaml", "recipes/example-cuda.yaml"}
    assert [b for b in BLOCKS if b.source == ADDING_A_SITE and b.mark == "run"]
    block = Block(ADDING_A_SITE, 0, "console", "", "run")
    check = subprocess.run([sys.executable, "-m", "invoke", "check"], cwd=_where(block, request),
                           env=_env(request.getfixturevalue("tmp_path") / "results"),
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert re.search(r"^ok  site   example +sites/example\.yaml$", check.stdout, re.M)
    assert re.search(r"^ok  target example-cuda +recipes/example-cuda\.yaml$", check.stdout, re.M)


@pytest.mark.slurm
def test_adding_a_site_example_is_refused_and_accepted_as_its_slurm_would(request,
                                                                         tmp_path: Path) -> None:
    """The site the page builds from its own blocks requires -C gpu of its GPU jobs and has a
    default QoS: its 2-node job carries both with no flag of the user's, the Slurm shaped like
    the site (node features, its submit filter) accepts it, and refuses it without the
    constraint."""
    from containers.inputs.sites import load_site
    from tests.fixtures.slurm import TEST_ACCOUNT, site_shaped_cluster

    root = _where(Block(ADDING_A_SITE, 0, "console", "", "run"), request)
    job = subprocess.run([sys.executable, "-m", "invoke", "job", "--target", "example-cuda",
                          "--nodes", "2", "--partition", "gpu", "--account", TEST_ACCOUNT],
                         cwd=root, env=_env(tmp_path / "results"), capture_output=True,
                         text=True, timeout=120)
    lines = job.stdout.splitlines()
    assert job.returncode == 0 and {"#SBATCH -C gpu", "#SBATCH --qos=debug"} <= set(lines), \
        job.stdout + job.stderr
    with_it, without = tmp_path / "with.sh", tmp_path / "without.sh"
    with_it.write_text(job.stdout)
    without.write_text("\n".join(line for line in lines if line != "#SBATCH -C gpu") + "\n")
    with site_shaped_cluster(load_site(root / "sites" / "example.yaml")) as cluster:
        accepted = cluster.run(["sbatch", "--test-only", str(with_it)], check=False)
        refused = cluster.run(["sbatch", "--test-only", str(without)], check=False)
    assert accepted.returncode == 0 and "to start at" in accepted.stderr, accepted.stderr
    assert refused.returncode != 0 and "requires the constraint gpu" in refused.stderr, \
        refused.stderr


@pytest.mark.slurm
@pytest.mark.apptainer
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mark == "run slurm"], ids=str)
def test_run_examples_on_the_local_slurm(block: Block, tmp_path: Path, request) -> None:
    from tests.fixtures.slurm import ensure_installed

    ensure_installed()
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster runs its daemons as root")
    if _needs_image(block):
        request.getfixturevalue("cpu_image")
    folder = Path(tempfile.mkdtemp(prefix="docs-local-slurm-"))
    folder.chmod(0o755)
    env = {**_env(tmp_path / "results"), "CONTAINERS_LOCAL_SLURM_DIR": str(folder / "c")}
    try:
        _run_bash(block, env, block.body.replace(LOCAL_SLURM_DIR, str(folder / "c")))
    finally:  # the cluster stopped by its recorded PIDs, whatever the block did
        subprocess.run([sys.executable, "-m", "invoke", "local-slurm", "--stop"], cwd=ROOT,
                       env=env, capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


# --- captured output (docs/results.md) ---------------------------------------------------------

ASSETS = ROOT / "docs" / "assets"
SMOKE = ["invoke", "smoke", "--target", "cpu", "--gpus", "2", "--sizes", "1K:4M", "--iters", "10",
         "--warmup", "2"]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def _table(output: str) -> str:
    """The smoke run's table and verdict as the results page shows them."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# all_reduce on"))
    return "\n".join(line for line in lines[start:]
                     if not line.startswith(("plot:", "json:", "table:", "perflog:"))) + "\n"


@pytest.mark.apptainer
@pytest.mark.distributed
def test_captured_smoke_output_has_todays_shape(cpu_image, tmp_path: Path) -> None:
    """The table and plot on the results page are a real run's: their columns and the plot's
    size are today's. ``DOCS_REFRESH=1`` writes them again from this run."""
    results = tmp_path / "results"
    run = subprocess.run([sys.executable, "-m", *SMOKE], cwd=ROOT, env=_env(results),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 3), run.stdout + run.stderr  # 3: slower than the reference
    png = next(results.glob("smoke/*/all_reduce.png"))
    table = _table(run.stdout + run.stderr)
    if os.environ.get("DOCS_REFRESH") == "1":
        shutil.copyfile(png, ASSETS / "allreduce-cpu.png")
        (ASSETS / "smoke-cpu.txt").write_text(table)
    assert png_size(ASSETS / "allreduce-cpu.png") == png_size(png)
    shown = (ASSETS / "smoke-cpu.txt").read_text().splitlines()
    header = [line for line in table.splitlines()  # the column names and units
              if line.startswith("#") and ("#wrong" in line or "(B)" in line)]
    assert header and all(line in shown for line in header), "\n".join(header)
    assert any(line.startswith("verdict: ") for line in shown)
    for line in ("# Collective test starting: all_reduce_perf",  # today's per-op block
                 "# Collective test concluded: all_reduce_perf"):
        assert line in shown and line in table.splitlines()
