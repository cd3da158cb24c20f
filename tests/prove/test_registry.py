"""The workload registry: every name a job takes maps to the kind that owns its options, run
options, estimate and judge; commands ask it instead of comparing names."""

from __future__ import annotations

import ast
from typing import Iterator

import pytest

from containers.errors import UsageError, VerdictFailed
from containers.inputs import flags
from containers.prove import registry
from containers.prove.smoke import SMOKE, SmokeOptions
from containers.prove.train import EXAMPLES, TRAINS, TrainOptions
from tests.fixtures import ROOT


def test_every_workload_name_has_its_kind() -> None:
    assert list(registry.WORKLOADS) == ["smoke", *EXAMPLES, "run", "build"]
    assert {registry.kind_of(name).name for name in EXAMPLES} == {"train"}
    assert [registry.kind_of(name).workload for name in registry.WORKLOADS] == \
        list(registry.WORKLOADS)
    assert registry.kind_of("run") is registry.RUN and registry.kind_of("build") is registry.BUILD


def test_an_unknown_workload_is_refused_with_a_suggestion() -> None:
    with pytest.raises(UsageError, match=r"--workload must be one of smoke, ddp, deepspeed, "
                                         r"fsdp, run, build \(got 'smok'\).*smoke"):
        registry.kind_of("smok")


def test_a_kinds_run_options_are_what_its_options_type_declares() -> None:
    """Declared once, on the options type: a job takes all but the ranks and the example, which
    it sets by flags of its own (--gpus-per-node, --workload)."""
    assert registry.RUN.run_options == registry.BUILD.run_options == {}
    assert list(SMOKE.run_options) == ["sizes", "iters", "warmup", "timeout", "dtype", "cycles",
                                       "op"]
    assert set(TRAINS["ddp"].run_options) == set(flags.declared(TrainOptions)) - {"gpus",
                                                                                   "example"}
    assert registry.RUN_OPTIONS["timeout"] is SMOKE.run_options["timeout"][0]


@pytest.mark.parametrize("option, kinds", [("lr", ["train"]), ("op", ["smoke"]),
                                           ("timeout", ["smoke", "train"]), ("nodes", [])])
def test_applies_to_names_the_kinds_that_take_an_option(option, kinds) -> None:
    assert registry.applies_to(option) == kinds


def test_estimates_are_the_kinds() -> None:
    assert [registry.kind_of(n).estimate for n in ("smoke", "ddp", "run", "build")] == \
        [1800, 3600, 3600, 7200]


def test_job_options_are_made_by_the_kind() -> None:
    smoke = registry.job_options(SMOKE, gpus=4, given={"iters": "7"})
    assert smoke == SmokeOptions(gpus=4, iters=7)
    train = registry.job_options(TRAINS["deepspeed"], gpus=2, given={"zero_stage": "2"})
    assert train == TrainOptions(example="deepspeed", gpus=2, zero_stage=2)
    assert registry.job_options(registry.RUN, gpus=1, given={}) is None
    assert registry.job_options(registry.BUILD, gpus=1, given={}) is None


@pytest.mark.parametrize("workload, given, message", [
    ("smoke", {"lr": 0.1}, "applies to train jobs, not --workload smoke; leave it out"),
    ("build", {"timeout": 9}, "applies to smoke and train jobs, not --workload build"),
    ("ddp", {"zero_stage": 2}, "--zero-stage applies to --workload deepspeed, not --workload "
                               "ddp"),
])
def test_job_options_refuse_what_the_kind_does_not_take(workload, given, message) -> None:
    with pytest.raises(UsageError, match=message):
        registry.job_options(registry.kind_of(workload), gpus=1, given=given)


def test_resized_keeps_given_options_of_the_kind_else_defaults() -> None:
    given = TrainOptions(example="ddp", gpus=1, epochs=5)
    assert TRAINS["fsdp"].resized(given, gpus=4) == TrainOptions(example="fsdp", gpus=4,
                                                                 epochs=5)
    assert TRAINS["ddp"].resized(SmokeOptions(gpus=1), gpus=2) == \
        TrainOptions(example="ddp", gpus=2)
    assert SMOKE.resized(SmokeOptions(gpus=1, iters=3), gpus=8) == \
        SmokeOptions(gpus=8, iters=3)
    assert registry.RUN.resized(None, gpus=2) is None


def test_a_kind_without_options_refuses_given_values() -> None:
    with pytest.raises(UsageError, match="--workload run takes no run options"):
        registry.RUN.make_options(gpus=1, given={"iters": 3})


# ------------------------------------------------------- each kind answers for itself
class _Bodies:
    """A planner that says which job a kind picked."""

    def build(self) -> str:
        return "build"

    def command(self) -> str:
        return "command"

    def workload(self) -> str:
        return "workload"


def test_each_kind_picks_its_job_body() -> None:
    assert [registry.kind_of(n).job_body(_Bodies()) for n in ("smoke", "ddp", "run", "build")] \
        == ["workload", "workload", "command", "build"]


def test_what_a_kinds_job_needs_is_asked_of_the_kind(tmp_path) -> None:
    smoke, run, build = SMOKE, registry.RUN, registry.BUILD
    assert [k.workdir(lambda: "/here") for k in (smoke, run, build)] == [None, "/here", None]
    assert [k.needs_node_tool("aarch64", "x86_64") for k in (smoke, run, build)] == [
        False, False, True]
    assert not build.needs_node_tool("x86_64", "x86_64")
    assert [k.judged_off_host("aarch64", "x86_64") for k in (smoke, TRAINS["ddp"], run, build)] == [
        True, True, False, False]
    assert not SMOKE.judged_off_host("x86_64", "x86_64")
    checked: list[str] = []
    for kind in (smoke, run, build):
        kind.before_submit(lambda: checked.append(kind.name))
    assert checked == ["smoke", "run"]


def test_only_a_kind_this_checkout_judges_is_judged_here(tmp_path) -> None:
    SMOKE.check_judged_here(tmp_path)
    with pytest.raises(VerdictFailed, match="is a run job's; the job judges itself"):
        registry.RUN.check_judged_here(tmp_path)
    with pytest.raises(VerdictFailed, match="is a build job's, which has no verdict"):
        registry.BUILD.check_judged_here(tmp_path)


def test_deepspeed_alone_takes_its_zero_stage() -> None:
    from containers.prove.train import EXAMPLE_ARGS

    assert list(EXAMPLE_ARGS) == ["deepspeed"]
    assert EXAMPLE_ARGS["deepspeed"](TrainOptions(example="deepspeed", gpus=1)) == [
        "--zero-stage", "1"]


# ------------------------------------------ no code outside the kinds decides on a kind
#: The kinds' own files: the only places a kind's flags or a workload's name decide anything.
KIND_FILES = {"containers/prove/kind.py", "containers/prove/registry.py",
              "containers/prove/smoke.py", "containers/prove/train.py"}
#: A kind's flags and needs, which callers ask the kind about instead of reading.
FLAGS = {"builds_image", "takes_command", "multinode", "judge", "needs_image"}
#: What a workload's name travels as.
NAMES = {"workload", "example"}


def _tests(tree: ast.AST) -> Iterator[ast.AST]:
    """The expressions of ``tree`` that decide: conditions, and every comparison."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs
        elif isinstance(node, (ast.Compare, ast.BoolOp)):
            yield node


def _named(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in NAMES) or \
        (isinstance(node, ast.Attribute) and node.attr in NAMES)


def kind_branches(source: str) -> set[tuple[int, int]]:
    """Where ``source`` decides on a kind's flag (read, not called) or compares a workload's
    name with a string literal: (line, column) of each."""
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = set()
    for test in _tests(tree):
        for node in ast.walk(test):
            if isinstance(node, ast.Attribute) and node.attr in FLAGS and id(node) not in called:
                found.add((node.lineno, node.col_offset))
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides) \
                        and any(_named(s) for s in sides):
                    found.add((node.lineno, node.col_offset))
    return found


def test_the_counter_finds_each_way_of_deciding_on_a_kind() -> None:
    source = ("if kind.builds_image: pass\n"
              "x = 1 if request.kind.takes_command else 2\n"
              "ok = kind.judge == 'checkout' and not kind.multinode\n"
              "if options.example == 'deepspeed': pass\n"
              "same = workload != 'build'\n"
              "fine = kind.needs_node_tool(a, b) or sitefit.judge(stack)\n")
    assert len(kind_branches(source)) == 6


def test_no_code_outside_the_kinds_branches_on_a_kind() -> None:
    """Adding a workload kind touches its kind's file (and its test), never its callers."""
    found = {}
    for path in [ROOT / "tasks.py", *sorted((ROOT / "containers").rglob("*.py"))]:
        name = path.relative_to(ROOT).as_posix()
        if name not in KIND_FILES:
            found.update({f"{name}:{line}": col for line, col in
                          kind_branches(path.read_text(encoding="utf-8"))})
    assert not found, f"branches on a kind's flags or name outside the kinds: {sorted(found)}"


def workload_names_typed_str(source: str) -> list[int]:
    """The lines of ``source`` where a parameter or a dataclass field named ``workload`` is
    typed ``str``: a name handed down where its kind should be."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arguments):
            named = [a for a in (*node.posonlyargs, *node.args, *node.kwonlyargs)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            named = [ast.arg(arg=node.target.id, annotation=node.annotation,
                             lineno=node.lineno)]
        else:
            continue
        found += [a.lineno for a in named if a.arg == "workload" and a.annotation is not None
                  and ast.unparse(a.annotation).strip("'\"") == "str"]
    return found


def test_the_counter_finds_a_workload_name_typed_str() -> None:
    source = ("def f(workload: str): pass\n"
              "def g(*, x: int, workload: 'str' = 's'): pass\n"
              "class R:\n    workload: str\n"
              "def h(kind: Kind, workload: Kind): pass\n")
    assert workload_names_typed_str(source) == [1, 2, 4]


def test_a_kind_is_handed_down_never_its_name() -> None:
    """A kind is resolved once where its name comes in (:func:`registry.kind_of`)."""
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in [ROOT / "tasks.py", *sorted((ROOT / "containers").rglob("*.py"))]
             # a record's field is the name as its JSON file holds it, read where it is resolved
             if path != ROOT / "containers" / "records.py"
             for line in workload_names_typed_str(path.read_text(encoding="utf-8"))]
    assert not found, f"workload names typed str: {found}"


def test_a_kind_differs_by_override_not_by_flags() -> None:
    for kind in registry.WORKLOADS.values():
        assert not FLAGS & set(dir(kind)), kind.workload
