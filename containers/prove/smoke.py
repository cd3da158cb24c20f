"""``invoke smoke``: the collective benchmark across ranks inside an image, as a workload kind.
Sanity, per op: measured, no wrong values, its ``<op>.json`` the report's part; for the run:
sizes done, ranks agreeing on wrong values, the transport proven. Performance is judged per op."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from containers.files import read_json_object
from containers.inputs import flags, names
from containers.prove.kind import GPUS, TIMEOUT, Invocation, WorkloadKind
from containers.prove.performance import Judgement, judge

if TYPE_CHECKING:  # the kind is declared when the command line starts (invoke --list): light
    from containers.inputs.settings import Settings
    from containers.inputs.sites import Site
    from containers.prove import verdict
    from containers.records import OpSummary, SmokeReport


@dataclass(frozen=True)
class SmokeOptions:
    """``invoke smoke``'s options, checked when made (the benchmark's rules, ``jobs/choices``)."""

    gpus: int = GPUS.field(2)
    sizes: str = flags.option("message sizes MIN:MAX in bytes (K/M/G suffixes), doubling; or a "
                              "comma list", flags.SIZES, "1K:128M")
    iters: int = flags.option("timed iterations per size", flags.POSITIVE_INT, 20)
    warmup: int = flags.option("untimed warm-up iterations per size", flags.NON_NEGATIVE_INT, 5)
    timeout: float = TIMEOUT.field(600)
    dtype: str = flags.option("element type", flags.DTYPE, "float32")
    cycles: int = flags.option("repeat the whole sweep this many times (a corruption soak, "
                               "nccl-tests' -N); any wrong value in any cycle fails, naming the "
                               "cycles and sizes", flags.POSITIVE_INT, 1)
    #: The collectives, a canonical comma list (``all`` becomes every one; None: all_reduce).
    op: str = flags.option("the collectives to measure, each with its nccl-tests table, bus "
                           "factor, check and verdict (comma list, or all; default: all_reduce)",
                           flags.OPS)
    fault: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        flags.check(self)
        object.__setattr__(self, "op", self.op or DEFAULT_OP)
        flags.sizes("--sizes", self.sizes, self.dtype)

    @property
    def largest_size(self) -> int:
        """The largest message in bytes (the benchmark holds about three buffers of it)."""
        return max(names.check_sizes(self.sizes, self.dtype))

    @property
    def kind(self) -> "SmokeKind":
        return SMOKE


SUMMING = ("all_reduce", "reduce_scatter", "reduce")
#: A row of a report written before ``--op`` existed measured all_reduce.
DEFAULT_OP = "all_reduce"


def _rows(result: verdict.Result, op: str | None = None) -> list[dict]:
    """The report's rows (of one op when named), as the plot and the judge take them."""
    return [row.model_dump() for row in result.run_report.rows(op)]


def op_of(row: dict) -> str:
    """The collective of a report row or perflog record (those before ``--op``: all_reduce)."""
    return str(row.get("op") or DEFAULT_OP)


def _modes(row: dict) -> list[dict]:
    """The modes a row measured (alltoall and sendrecv have no in-place form: ``ip`` null)."""
    return [row[mode] for mode in ("oop", "ip") if isinstance(row.get(mode), dict)]


def asked_ops(result: verdict.Result) -> list[str]:
    """The collectives the run was asked for (``--op``; without one, all_reduce)."""
    args = list(result.plan.launch.args)
    if "--op" in args[:-1]:
        return args[args.index("--op") + 1].split(",")
    return [DEFAULT_OP]


def wrong_total(result: verdict.Result, op: str | None = None) -> int:
    """Wrong values over every size measured so far, of one op or all."""
    return sum(mode["wrong"] or 0 for row in _rows(result, op) for mode in _modes(row))


def _summary(report: SmokeReport, op: str) -> OpSummary:
    from containers.records import OpSummary  # pydantic: not at start-up

    return report.collectives.get(op) or OpSummary()


def _op_reasons(result: verdict.Result, op: str) -> list[str]:
    """What is wrong with one op's part: refused, wrong values, or (finished) not measured."""
    reasons = []
    refused = _summary(result.run_report, op).unsupported
    if refused:
        reasons.append(f"{op}: {refused}")
    wrong, cycles = wrong_total(result, op), result.run_report.cycles
    if wrong:
        sizes = [f"{r['bytes']} B" + (f" (cycle{'s' if len(r['wrong_cycles']) > 1 else ''} "
                                      f"{', '.join(map(str, r['wrong_cycles']))})"
                                      if cycles > 1 and r.get("wrong_cycles") else "")
                 for r in _rows(result, op) if any(mode["wrong"] for mode in _modes(r))]
        exact = "the exact sum" if op in SUMMING else "the exact values each rank must hold"
        reasons.append(f"{wrong} wrong values ({op} results differ from {exact}) at sizes "
                       f"{', '.join(sizes)}" + (f" in a soak of {cycles} cycles" if cycles > 1
                                                else ""))
    if not refused and result.run_report.finished and not _rows(result, op):
        reasons.append(f"{op} was asked for but the benchmark measured none of it")
    return reasons


class SmokeKind(WorkloadKind):
    name = "smoke"
    script = "allreduce.py"
    report_name = "allreduce.json"
    program = "the benchmark"
    options_type = SmokeOptions
    estimate = 30 * 60
    report_type = "SmokeReport"

    def launch(self, options: SmokeOptions, *, site: Site, settings: Settings,
               nodes: int) -> Invocation:
        args = ["--sizes", options.sizes, "--iters", str(options.iters),
                "--warmup", str(options.warmup), "--dtype", options.dtype,
                "--cycles", str(options.cycles), "--op", options.op,
                "--out", settings.results_mount, "--timeout-s", str(int(options.timeout))]
        if options.fault:
            args += ["--fault", options.fault]
        return Invocation(args=args, env=dict(options.extra_env))

    def failures(self, result: verdict.Result) -> list[str]:
        asked = asked_ops(result)
        # an op the report holds but the run did not ask for is judged too
        extra = sorted({op_of(row) for row in _rows(result)} - set(asked))
        return [reason for op in asked + extra for reason in _op_reasons(result, op)] + \
            (run_file_reasons(result.plan.out_dir, result.run_report, result.plan.ranks)
             if result.run_report.finished else [])

    def report_reasons(self, result: verdict.Result, *, settled: bool) -> list[str]:
        reasons = []
        if not result.run_report.finished and not settled:
            reasons.append("the benchmark did not complete its sizes")
        proof = result.transport
        if proof is not None and not proof.ok:
            reasons.append(proof.message)
        return reasons

    def op_performance(self, result: verdict.Result, op: str) -> Judgement:
        """One op's busbw against the site's reference FOR THAT OP."""
        if result.plan.ranks == 1:
            return Judgement("not-judged", "1 rank: no data crosses a link, so there is no "
                             "bandwidth to judge")
        from containers.host.facts import host_arch  # here: the kind is declared at start-up

        emulated = [str(arch) for arch in result.archs if arch != host_arch()]
        if emulated:  # qemu-user: a correctness proof, never a bandwidth the site's nodes give
            return Judgement("no-reference", f"ranks ran as {', '.join(emulated)} under "
                             f"emulation on this {host_arch()} machine: the site's references "
                             f"are for native runs")
        rows = _rows(result, op)
        reference = result.plan.site.reference(
            partition=result.partition, nodes=result.nodes,
            ranks_per_node=result.plan.ranks // result.nodes,
            measured={row["bytes"] for row in rows}, op=op)
        return judge(reference, rows)

    def performance(self, result: verdict.Result) -> Judgement:
        """Each op judged against its own reference; with several, the worst, naming the op."""
        ops = asked_ops(result)
        judged = {op: self.op_performance(result, op) for op in ops}
        if len(ops) == 1:
            return judged[ops[0]]
        worst = min(judged.values(), key=lambda judgement: _RANK.index(judgement.state))
        return replace(worst, message="; ".join(f"{op}: {j.state.upper()}: {j.message}"
                                                for op, j in judged.items()))

    def op_details(self, result: verdict.Result, op: str) -> dict:
        """One op's part of ``verdict.json`` and its perflog line."""
        summary = _summary(result.run_report, op)
        results = [{"op": op, "bytes": r["bytes"], "busbw_oop": r["oop"]["busbw"],
                    "busbw_ip": (r.get("ip") or {}).get("busbw"),
                    "wrong": sum(mode["wrong"] or 0 for mode in _modes(r)),
                    "wrong_cycles": r.get("wrong_cycles") or []} for r in _rows(result, op)]
        others = [r for r in result.reasons
                  if not any(r in _op_reasons(result, other) for other in asked_ops(result))]
        return {
            "op": op, "factor": summary.factor, "busbw_factor": summary.busbw_factor,
            "root": summary.root, "unsupported": summary.unsupported,
            "wrong_total": wrong_total(result, op),
            "passed": not others and not _op_reasons(result, op),
            "performance": self.op_performance(result, op).record(), "results": results,
            "largest": {key: results[-1][key] for key in ("bytes", "busbw_oop", "busbw_ip")}
            if results else None,
        }

    def details(self, result: verdict.Result) -> dict:
        ops = asked_ops(result)
        per_op = {op: self.op_details(result, op) for op in ops}
        return {
            "wrong_total": wrong_total(result),
            "cycles": result.run_report.cycles,
            "cycles_done": result.run_report.cycles_done,
            "transport": None if result.transport is None else asdict(result.transport),
            "ops": ops,
            "collectives": {op: {k: v for k, v in entry.items() if k != "results"}
                            for op, entry in per_op.items()},
            "results": [row for entry in per_op.values() for row in entry["results"]],
            "largest": per_op[ops[0]]["largest"],
        }

    def perflog_records(self, record: dict) -> list[dict]:
        """One perflog line per op, so each op has its history."""
        lines = [{**record, "op": op, "passed": entry["passed"],
                  "performance": entry["performance"], "wrong_total": entry["wrong_total"],
                  "largest": entry["largest"], "collectives": None,
                  "results": [r for r in record.get("results") or []
                              if r.get("op", DEFAULT_OP) == op]}
                 for op, entry in (record.get("collectives") or {}).items()]
        return lines or [record]

    def report_files(self, result: verdict.Result) -> list[tuple[str, Path]]:
        """The report of every op, then each op's own part and nccl-tests table."""
        out = result.plan.out_dir
        own = [(word, out / f"{op}.{ext}") for op in asked_ops(result)
               for word, ext in (("json", "json"), ("table", "txt"))]
        return super().report_files(result) + [(word, path) for word, path in own
                                               if path.is_file()]

    def write_reports(self, result: verdict.Result) -> list[Path]:
        from containers.report import plot_busbw  # rich and matplotlib: not at start-up

        if result.plan.ranks == 1:  # one rank: no bandwidth to plot
            return []
        report = result.run_report
        return [plot_busbw({**report.as_dict(), "results": rows}, result.plan.out_dir / f"{op}.png",
                           title=f"{op} busbw: {result.plan.target.name}, {result.plan.ranks} "
                                 f"ranks, {report.backend or '?'}")
                for op in asked_ops(result) if (rows := _rows(result, op))]


def read_smoke(folder: Path, name: str) -> SmokeReport | str:
    """``folder/name`` as a smoke report, or why it is none (one line naming it)."""
    from containers.records import Malformed, SmokeReport

    data = read_json_object(folder / name)
    if data is None:
        return f"no readable {name}"
    try:
        return SmokeReport.of(data, source=name)
    except Malformed as exc:
        return str(exc)


def _op_file_reasons(folder: Path, report: SmokeReport, op: str) -> list[str]:
    """The op's own ``<op>.json`` must say what the combined report says of it."""
    name = f"{op}.json"
    if _summary(report, op).unsupported or (report.schema_ < 2 and not (folder / name).exists()):
        return []  # a refused op's file says so; an older harness wrote none
    own = read_smoke(folder, name)
    if isinstance(own, str):
        return [own]
    counted = report.wrong(op)
    if (own.wrong_total or 0) != counted or (not own.ok and not counted):
        return [f"{name}: key 'ok' is {own.ok}, 'wrong_total' {own.wrong_total}, but "
                f"{SmokeKind.report_name} counts {counted} wrong {op} values"]
    if own.rows() != report.rows(op):
        return [f"{name}: key 'results' differs from {SmokeKind.report_name}'s {op} rows"]
    return []


def _rank_reasons(folder: Path, report: SmokeReport) -> list[str]:
    """Each rank's own count of wrong values (``rank-<N>.json``) must add up to the report's."""
    counts = {rank: (read_json_object(folder / f"rank-{rank}.json") or {}).get("wrong")
              for rank in range(report.world_size or 0)}
    counted = all(type(n) is int and n >= 0 for n in counts.values())
    if report.wrong_total is None or (report.schema_ < 2 and None in counts.values()) or \
            (counted and sum(counts.values()) == report.wrong_total):  # older ranks kept none
        return []
    said = [rank for rank, n in counts.items() if n != 0] or list(counts)
    return [f"rank-{rank}.json: key 'wrong' is {counts[rank]!r}, but {SmokeKind.report_name} "
            f"counts {report.wrong_total} wrong values over all ranks" for rank in said[:4]]


def run_file_reasons(folder: Path, report: SmokeReport, ranks: int) -> list[str]:
    """What a finished benchmark's files say against a pass, one line each naming the key."""
    name = SmokeKind.report_name
    if not report.results:
        return [f"{name}: key 'results' is empty: the benchmark measured no size"]
    unmeasured = [row.bytes for row in report.results
                  if ranks > 1 and any(mode is not None and mode.busbw is None
                                       for mode in (row.oop, row.ip))]
    reasons = [f"{name}: key 'results' has no busbw at {unmeasured[0]} B"] if unmeasured else []
    ops = list(report.collectives) or sorted({row.op for row in report.results})
    return reasons + [reason for op in ops for reason in _op_file_reasons(folder, report, op)] \
        + _rank_reasons(folder, report)


#: Judgement states from the worst (a run of several ops reports its worst op's).
_RANK = ("fail", "xpass", "not-measured", "no-reference", "xfail", "not-judged", "pass")


SMOKE = SmokeKind()
