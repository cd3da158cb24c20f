"""Site profiles: ``sites/<site>.yaml``, every fact about WHERE images run.

Scheduler, partitions, GPUs and usable cores per node, CPU binding, runtime flavour, build
capability, GPU flag, binds, environment, launch pattern and reference bandwidths live in data, not
in code, so a new cluster is a new YAML file. A site may say how to recognise it from the
environment (``detect``) so ``invoke smoke`` on a login or compute node picks the right target.

Environment values may name host variables (``/tmp/$USER-miopen-cache-$SLURM_JOB_ID``): they are
expanded on the host when a command is planned (:func:`expand`), since an argv reaches the
container without a shell.
"""

from __future__ import annotations

import fnmatch
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Mapping

from containers import walltime
from containers.errors import ConfigError, raise_all
from containers.inputs.references import Reference, parse_reference, select
from containers.inputs.schema import (Field, check_mapping, input_files, is_env_name, line_of, pick,
                                      suggest)
from containers.inputs.yamlsource import LocatedDict, load_yaml_file

GPU_REQUESTS = ("gpus-per-node", "gres")
FIELDS = (
    Field("description", required=True),
    Field("scheduler", default="none", choices=("none", "slurm", "pbs")),
    # A list of names (no limits known), or a mapping of name -> PARTITION_FIELDS.
    Field("partitions", "map", default={}),
    Field("default_partition"),
    Field("build_partition"),
    Field("gpu", default="none", choices=("none", "cuda", "rocm")),
    Field("gpu_model"),
    Field("runtime", default="apptainer", choices=("apptainer", "singularity")),
    Field("gpus_per_node", "int", default=0),
    Field("cores_per_node", "int", default=0),
    Field("max_gpus_per_job", "int", default=0),
    Field("mem_per_gpu_gb", "int", default=0),
    Field("cpu_bind", "str_list", default=[]),
    Field("fakeroot", "bool", default=True),
    # How a batch job asks for GPUs (Slurm): --gpus-per-node=N, or --gres=gpu:<gres_type>:N.
    Field("gpu_request", default="gpus-per-node", choices=GPU_REQUESTS),
    Field("gres_type"),
    # Whether the scheduler refuses a job that names no account (project).
    Field("account_required", "bool", default=False),
    # Host modules every batch job loads before it starts the workload.
    Field("modules", "str_list", default=[]),
    # One of containers.run.launchers.LAUNCHERS, the only list of launchers; checked there
    # against the registry and the site's scheduler (launchers.for_site; invoke check does).
    Field("launcher", default="torchrun"),
    Field("torchrun", default="torchrun"),
    Field("binds", "str_list", default=[]),
    Field("env", "str_map", default={}),
    Field("multinode_binds", "str_list", default=[]),
    Field("multinode_env", "str_map", default={}),
    Field("multinode_modules", "str_list", default=[]),
    Field("references", "list", default=[]),
    Field("transport", "map", default={}),
    Field("default_target"),
    Field("detect", "map", default={}),
    Field("notes"),
    # What the site's nodes provide for an image to fit (driver/runtime ranges, glibc, NCCL),
    # each with its source; checked and judged by containers.image.sitefit.
    Field("fit", "map", default={}),
    # The site's own words in its batch jobs (JOB_FIELDS), each with its source.
    Field("job", "map", default={}),
)
#: A partition's limits, each as the site documents it (the profile cites the page).
PARTITION_FIELDS = (
    Field("max_time"), Field("default_time"),
    Field("max_nodes", "int"), Field("max_gpus", "int"),
    Field("gpus_per_node", "int"), Field("cores_per_node", "int"),
    Field("whole_nodes", "bool", default=False),
    Field("gpu_request", choices=GPU_REQUESTS), Field("gres_type"),
)
DETECT_FIELDS = (Field("env", "str_list", default=[]), Field("hostname", "str_list", default=[]))
#: ``net``: the NCCL_NET value every run sets, so NCCL/RCCL fail instead of falling back to TCP;
#: ``from_nodes``: the runs it applies to (2: only runs across nodes, where a site binds its network
#: stack in only for those, as Olivia does).
#: ``host_stack``: the network plugin and libfabric come from the host, so a run it applies to
#: needs ``multinode_binds`` that bring them in (a job without them is refused, never written).
TRANSPORT_FIELDS = (Field("name", required=True), Field("expect", required=True), Field("net"),
                    Field("from_nodes", "int", default=1),
                    Field("host_stack", "bool", default=False))
#: ``step_options``: what the site's launcher adds to every job step (Cray PALS' ``--cpu-bind
#: none``); ``short_names``: shorter words for job names a scheduler limits in length;
#: ``build_unset``: variables a build job unsets (a site module's binds the new image lacks).
JOB_FIELDS = (Field("step_options", "str_list", default=[]),
              Field("short_names", "str_map", default={}),
              Field("build_unset", "str_list", default=[]))
GPU_FLAGS = {"none": None, "cuda": "--nv", "rocm": "--rocm"}
#: The variable that limits which GPUs a process sees, per GPU kind.
VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES"}
#: A host variable in a site value (``$VAR``, ``${VAR}``), or ``$$``: a ``$`` for the container.
HOST_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\$))")


@dataclass(frozen=True)
class Partition:
    """One partition (queue) of a site and its documented limits; None: not documented, not
    checked. Times are in seconds (:mod:`containers.walltime`)."""

    name: str
    max_time: int | None = None
    default_time: int | None = None
    max_nodes: int | None = None
    #: GPUs one job may hold in this partition (all its nodes together).
    max_gpus: int | None = None
    #: This partition's nodes, where they differ from the site's.
    gpus_per_node: int | None = None
    cores_per_node: int | None = None
    #: Jobs get (and are billed for) whole nodes.
    whole_nodes: bool = False
    gpu_request: str | None = None
    gres_type: str | None = None


@dataclass(frozen=True)
class JobWords:
    """The site's own words in its batch jobs (the profile's ``job:`` block)."""

    step_options: tuple[str, ...] = ()
    short_names: Mapping[str, str] = field(default_factory=dict)
    build_unset: tuple[str, ...] = ()


@dataclass(frozen=True)
class Site:
    """One cluster (or the local machine) as its profile describes it."""

    name: str
    path: Path
    description: str
    scheduler: str
    gpu: str
    runtime: str
    gpus_per_node: int
    cores_per_node: int
    fakeroot: bool
    binds: tuple[str, ...]
    env: dict[str, str]
    default_target: str | None
    partitions: tuple[str, ...] = ()
    default_partition: str | None = None
    gpu_model: str | None = None
    max_gpus_per_job: int = 0
    #: Memory batch jobs ask for per GPU (GB); 0: the scheduler's default.
    mem_per_gpu_gb: int = 0
    cpu_bind: tuple[str, ...] = ()
    launcher: str = "torchrun"
    torchrun: str = "torchrun"
    multinode_binds: tuple[str, ...] = ()
    multinode_env: dict[str, str] = field(default_factory=dict)
    #: Host modules a multi-node batch job loads before launching (what multinode_binds name).
    multinode_modules: tuple[str, ...] = ()
    #: Where build jobs run (``invoke job --workload build``); default: default_partition.
    build_partition: str | None = None
    references: tuple[Reference, ...] = ()
    transport_name: str | None = None
    transport_expect: str | None = None
    #: NCCL_NET for every run (``transport.net``): NCCL/RCCL must use this network or fail.
    transport_net: str | None = None
    #: The transport (its proof and NCCL_NET) applies to runs of at least this many nodes.
    transport_from_nodes: int = 1
    #: The transport's plugin and libfabric come from the host (``multinode_binds`` bring them).
    transport_host_stack: bool = False
    detect_env: tuple[str, ...] = ()
    detect_hostname: tuple[str, ...] = ()
    notes: str | None = None
    #: Each partition's limits, by name (a profile that lists only names has empty ones).
    partition_limits: dict[str, Partition] = field(default_factory=dict)
    gpu_request: str = "gpus-per-node"
    gres_type: str | None = None
    account_required: bool = False
    modules: tuple[str, ...] = ()
    job: JobWords = field(default_factory=JobWords)
    lines: dict[str, int] = field(default_factory=dict, compare=False)

    def partition(self, name: str | None) -> Partition:
        """``name``'s limits; a partition the profile does not describe (or no partition: the
        scheduler's default) has none."""
        return self.partition_limits.get(name or "") or Partition(name=name or "")

    def transport_applies(self, nodes: int) -> bool:
        """Whether a run on ``nodes`` nodes must use (and prove) the declared transport."""
        return bool(self.transport_expect) and nodes >= self.transport_from_nodes

    @property
    def gpu_flag(self) -> str | None:
        """``--nv`` for CUDA, ``--rocm`` for ROCm, nothing for CPU sites: never both."""
        return GPU_FLAGS[self.gpu]

    def matches(self, environ: Mapping[str, str], hostname: str) -> bool:
        """True when any ``detect`` rule holds: a ``NAME`` or ``NAME=VALUE`` in the environment,
        or a host-name pattern. A site with no rules never matches."""
        for rule in self.detect_env:
            name, sep, wanted = rule.partition("=")
            if name in environ and (not sep or environ[name] == wanted):
                return True
        return any(fnmatch.fnmatch(hostname, pattern) for pattern in self.detect_hostname)

    def reference(self, *, partition: str | None, nodes: int, ranks_per_node: int,
                  measured: Collection[int] = (), op: str = "all_reduce") -> Reference | None:
        """The reference of collective ``op`` for a run of this shape (all_reduce by default:
        a reference names its op, so an all_reduce figure never judges all_gather)."""
        return select(self.references, partition=partition, nodes=nodes,
                      ranks_per_node=ranks_per_node, gpu_model=self.gpu_model, measured=measured,
                      op=op)


#: What makes Apptainer run code when it evaluates an environment value (``--env``,
#: ``APPTAINERENV_*``, the published module's variables): command substitution, ``$(`` and
#: backticks (``$((`` arithmetic too). ``$NAME`` / ``${NAME}`` stay: they only read a variable.
_CODE = re.compile(r"\$\(|`")


def code_in_value(value: str) -> str | None:
    """Why an environment value cannot be carried to the container as written, else None: it
    would run code where Apptainer evaluates it, or a newline, carriage return or NUL would cut
    it short on its way (a module file, a batch script line)."""
    for char, name in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if char in value:
            return f"holds {name}, which would cut the value short: write it on one line"
    if _CODE.search(value.replace("$$", "$")):
        return ("holds command substitution ($(...) or `...`), which Apptainer runs when the "
                "container starts; write the value itself (a $NAME variable is fine)")
    return None


def expand(value: str, environ: Mapping[str, str], *, strict: bool) -> str:
    """Expand ``$VAR``/``${VAR}`` from ``environ``; unset ones stay as written unless ``strict``.

    ``$$`` is a literal ``$`` for the CONTAINER: Apptainer evaluates ``--env`` values in the
    container's environment, so ``LD_LIBRARY_PATH: /opt/nccl/lib:$$LD_LIBRARY_PATH`` prepends to
    the image's own value instead of replacing it.
    """
    def replace(match: re.Match) -> str:
        if match.group(3):
            return "$"
        name = match.group(1) or match.group(2)
        if name in environ:
            return environ[name]
        if strict:
            raise ConfigError(f"'{value}' needs ${name}, which is not set here (inside a job "
                              f"allocation it is)", key=name)
        return match.group(0)

    expanded = HOST_VAR.sub(replace, value)
    # a host variable brought it in: it would reach the container all the same (NUL is the
    # batch script's own mark for a variable the job's shell fills; no environment holds one)
    problem = code_in_value(expanded.replace("\0", "")) if expanded != value else None
    if problem:
        raise ConfigError(f"'{value}' expands to a value that {problem}")
    return expanded


def _references(data: object, path: Path, found: list[ConfigError]
                ) -> list[tuple[int, Reference]]:
    """Each reference that parses, with its index; each one that does not adds its problem to
    ``found``."""
    if not isinstance(data, list):
        found.append(ConfigError("must be a list of references", path=path, key="references"))
        return []
    parsed = [(i, _collect(found, parse_reference, item, path=path, index=i))
              for i, item in enumerate(data)]
    return [(i, ref) for i, ref in parsed if ref is not None]


def reference_problems(references: list[tuple[int, Reference]], data: list, values: dict,
                       path: Path) -> list[ConfigError]:
    """References that can never apply to this site, so a typo would silently turn its
    performance gate off: a partition it does not have, more ranks per node than it has GPUs
    (a GPU site runs one rank per GPU)."""
    found = []
    gpus = values["gpus_per_node"]
    for index, ref in references:
        where = dict(path=path, line=line_of(data[index]))
        if ref.partition != "*" and ref.partition not in values["partitions"]:
            found.append(ConfigError(f"partition '{ref.partition}' is not one of the site's "
                                     f"partitions{suggest(ref.partition, values['partitions'])}"
                                     " (or * for any), so this reference would never apply",
                                     key=f"references[{index}].partition", **where))
        if values["gpu"] != "none" and gpus > 0 and ref.ranks_per_node > gpus:
            found.append(ConfigError(f"ranks_per_node {ref.ranks_per_node} is more than the "
                                     f"site's {gpus} GPUs per node (one rank per GPU), so this "
                                     "reference would never apply",
                                     key=f"references[{index}].ranks_per_node", **where))
    return found


def _named_partitions(data: object, path: Path) -> object:
    """The profile with a ``partitions`` list (the older form: names only) read as a mapping of
    names to empty limits, so one schema checks both forms."""
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        return data
    names = data["partitions"]
    for index, name in enumerate(names):
        if not isinstance(name, str):
            raise ConfigError("must be a list of partition names or a mapping of names to "
                              "limits", path=path, line=line_of(names, index), key="partitions")
    view = LocatedDict(data)
    view.path, view.line = getattr(data, "path", path), getattr(data, "line", None)
    view.key_lines = dict(getattr(data, "key_lines", {}))
    view["partitions"] = {name: {} for name in names}
    return view


def _partition(name: str, data: object, *, path: Path) -> Partition:
    prefix = f"partitions.{name}."
    for key in ("max_time", "default_time"):
        if isinstance(data, dict) and isinstance(data.get(key), (int, float)) \
                and not isinstance(data.get(key), bool):
            raise ConfigError("write the time in quotes (max_time: \"12:00:00\"): YAML reads an "
                              "unquoted 12:00:00 as a number", path=path,
                              line=line_of(data, key), key=prefix + key)
    values = check_mapping(data if data is not None else {}, PARTITION_FIELDS,
                           what=f"partition {name}", path=path, prefix=prefix)

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(message, path=path, line=line_of(data, key), key=prefix + key)

    times = {}
    for key in ("max_time", "default_time"):
        if values[key] is not None:
            try:
                times[key] = walltime.parse(values[key])
            except ValueError as exc:
                raise fail(key, str(exc)) from exc
    for key in ("max_nodes", "max_gpus", "gpus_per_node", "cores_per_node"):
        # gpus_per_node: 0 is a CPU partition of a GPU site (LUMI-C's small beside LUMI-G)
        least = 0 if key == "gpus_per_node" else 1
        if values[key] is not None and values[key] < least:
            raise fail(key, f"must be at least {least} (got {values[key]})")
    if times.get("default_time", 0) > times.get("max_time", 1 << 40):
        raise fail("default_time", "is longer than max_time")
    return Partition(name=name, max_time=times.get("max_time"),
                     default_time=times.get("default_time"), max_nodes=values["max_nodes"],
                     max_gpus=values["max_gpus"], gpus_per_node=values["gpus_per_node"],
                     cores_per_node=values["cores_per_node"], whole_nodes=values["whole_nodes"],
                     gpu_request=values["gpu_request"], gres_type=values["gres_type"])


#: Apptainer's bind options (``SRC:DST:OPTS``).
BIND_OPTIONS = ("ro", "rw")


def bind_problem(bind: str) -> str | None:
    """Why ``bind`` is not one ``SRC``, ``SRC:DST`` or ``SRC:DST:OPTS`` (opts ro or rw), else
    None. A comma would make Apptainer read two binds; another colon, a wrong destination."""
    if "," in bind:
        return f"'{bind}' has a comma: one bind per item (a comma starts another bind)"
    parts = bind.split(":")
    if len(parts) > 3 or not all(parts[:2]):
        return f"'{bind}' is not SRC, SRC:DST or SRC:DST:OPTS"
    if len(parts) == 3 and parts[2] not in BIND_OPTIONS:
        return f"'{bind}': bind options must be {' or '.join(BIND_OPTIONS)} (got '{parts[2]}')"
    return None


def _check_values(data: object, values: dict, path: Path) -> list[ConfigError]:
    """What the schema's types do not say: counts are not negative, binds are one bind each,
    environment names are shell identifiers and their values run no code (each problem names
    file, line and key; all are returned, so one run reports them all)."""
    found: list[ConfigError] = []
    for key in ("gpus_per_node", "cores_per_node", "mem_per_gpu_gb", "max_gpus_per_job"):
        if values[key] < 0:
            found.append(ConfigError(f"must not be negative (got {values[key]})", path=path,
                                     line=line_of(data, key), key=key))
    for key in ("binds", "multinode_binds"):
        for index, bind in enumerate(values[key]):
            problem = bind_problem(bind)
            if problem:
                found.append(ConfigError(problem, path=path, line=line_of(data[key], index),
                                         key=f"{key}[{index}]"))
    for key in ("env", "multinode_env"):
        for name, value in values[key].items():
            where = dict(path=path, line=line_of(data[key], name), key=f"{key}.{name}")
            if not is_env_name(name):
                found.append(ConfigError(f"'{name}' is not an environment variable name "
                                         "(letters, digits and _, not starting with a digit)",
                                         **where))
            problem = code_in_value(str(value))
            if problem:
                found.append(ConfigError(problem, **where))
    return found


def _job_words(data: object, *, path: Path) -> JobWords:
    """The ``job:`` block: variables to unset are shell names, short names plain words (a job
    name is a directive value)."""
    values = check_mapping(data, JOB_FIELDS, what="job words", path=path, prefix="job.")
    bad = [(key, f"'{name}' is not a variable name") for key in ("build_unset",)
           for name in values[key] if not is_env_name(name)]
    bad += [("short_names", f"'{k}: {v}' is not a word for a word (letters, digits, _)")
            for k, v in values["short_names"].items()
            if not re.fullmatch(r"[A-Za-z0-9_]+", str(k)) or not re.fullmatch(r"[A-Za-z0-9_]+",
                                                                               str(v))]
    if bad:
        key, message = bad[0]
        raise ConfigError(message, path=path, line=line_of(data, key), key=f"job.{key}")
    return JobWords(step_options=tuple(values["step_options"]),
                    short_names={str(k): str(v) for k, v in values["short_names"].items()},
                    build_unset=tuple(values["build_unset"]))


def _collect(found: list[ConfigError], check, *args, **kwargs):
    """``check(*args, **kwargs)``'s value; a :class:`ConfigError` it raises is added to
    ``found`` (None is returned), so the next check still runs."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        found.append(exc)
        return None


def load_site(path: Path) -> Site:
    data = _named_partitions(load_yaml_file(path), path)
    values = check_mapping(data, FIELDS, what="site profile", path=path)
    found = _check_values(data, values, path)  # every problem of the profile, reported together
    parsed = {str(name): _collect(found, _partition, str(name), spec, path=path)
              for name, spec in values["partitions"].items()}
    limits = {name: part for name, part in parsed.items() if part is not None}
    values["partitions"] = list(parsed)
    for part in [None, *limits.values()]:
        request = (part.gpu_request if part else None) or values["gpu_request"]
        if request == "gres" and not ((part.gres_type if part else None) or values["gres_type"]):
            where = f"partitions.{part.name}." if part and part.gpu_request else ""
            found.append(ConfigError("gpu_request gres needs gres_type (the GPU type in "
                                     "--gres=gpu:<type>:N, e.g. v100)", path=path,
                                     line=line_of(data, "gpu_request"), key=where + "gpu_request"))
    detect = (_collect(found, check_mapping, values["detect"], DETECT_FIELDS,
                       what="detect rules", path=path, prefix="detect.")
              if values["detect"] else None) or {"env": [], "hostname": []}

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(message, path=path, line=line_of(data, key) or line_of(data), key=key)

    if values["gpu"] != "none" and values["gpus_per_node"] <= 0:
        found.append(fail("gpus_per_node", "a GPU site needs gpus_per_node > 0"))
    # On a GPU site one mask per GPU of a node; on a CPU site one per rank of a full node.
    if (values["cpu_bind"] and values["gpu"] != "none"
            and len(values["cpu_bind"]) != values["gpus_per_node"]):
        found.append(fail("cpu_bind", f"one CPU mask per GPU: {len(values['cpu_bind'])} masks "
                                      f"for {values['gpus_per_node']} GPUs"))
    for mask in values["cpu_bind"]:
        if not re.fullmatch(r"0x[0-9a-fA-F]+", mask):
            found.append(fail("cpu_bind", f"'{mask}' is not a hexadecimal CPU mask (0x…)"))
    for key in ("default_partition", "build_partition"):
        if values[key] and values[key] not in values["partitions"]:
            found.append(fail(key, f"'{values[key]}' is not one of the partitions"
                                   f"{suggest(values[key], values['partitions'])}"))
    transport = _collect(found, check_mapping, values["transport"], TRANSPORT_FIELDS,
                         what="transport", path=path, prefix="transport.") \
        if values["transport"] else None
    if transport is not None:
        try:
            re.compile(transport["expect"])
        except re.error as exc:
            found.append(fail("transport", f"expect is not a valid regular expression: {exc}"))
        net = transport["net"]
        if net is not None and (not net.strip() or net != net.strip()):
            found.append(ConfigError("must name the network (NCCL_NET compares it exactly: no "
                                     "empty value, no spaces at its ends)", path=path,
                                     line=line_of(values["transport"], "net"),
                                     key="transport.net"))
        if transport["from_nodes"] < 1:
            found.append(ConfigError("must be at least 1", path=path, key="transport.from_nodes",
                                     line=line_of(values["transport"], "from_nodes")))
    job = _collect(found, _job_words, values["job"], path=path) if values["job"] else None
    references = _references(data.get("references") or [], path, found)
    found += reference_problems(references, data.get("references") or [], values, path)
    raise_all(found)
    return Site(name=path.stem, path=path, description=values["description"],
                scheduler=values["scheduler"], gpu=values["gpu"], runtime=values["runtime"],
                gpus_per_node=values["gpus_per_node"], cores_per_node=values["cores_per_node"],
                fakeroot=values["fakeroot"], binds=tuple(values["binds"]),
                env={str(k): str(v) for k, v in values["env"].items()},
                default_target=values["default_target"], partitions=tuple(values["partitions"]),
                default_partition=values["default_partition"], gpu_model=values["gpu_model"],
                max_gpus_per_job=values["max_gpus_per_job"], cpu_bind=tuple(values["cpu_bind"]),
                mem_per_gpu_gb=values["mem_per_gpu_gb"],
                launcher=values["launcher"], torchrun=values["torchrun"],
                multinode_binds=tuple(values["multinode_binds"]),
                multinode_env={str(k): str(v) for k, v in values["multinode_env"].items()},
                multinode_modules=tuple(values["multinode_modules"]),
                build_partition=values["build_partition"],
                references=tuple(ref for _, ref in references),
                transport_name=transport["name"] if transport else None,
                transport_expect=transport["expect"] if transport else None,
                transport_net=transport["net"] if transport else None,
                transport_from_nodes=transport["from_nodes"] if transport else 1,
                transport_host_stack=transport["host_stack"] if transport else False,
                detect_env=tuple(detect["env"]), detect_hostname=tuple(detect["hostname"]),
                notes=values["notes"], partition_limits=limits,
                gpu_request=values["gpu_request"], gres_type=values["gres_type"],
                account_required=values["account_required"], modules=tuple(values["modules"]),
                job=job or JobWords(), lines={key: line_of(data, key) for key in data})


def load_sites(root: Path) -> dict[str, Site]:
    """Every site profile; a file name that breaks the name rule, or a profile that is a link
    out of the project, is refused (the name becomes part of batch scripts and paths)."""
    return {p.stem: load_site(p) for p in input_files(root / "sites", kind="site", root=root)}


def get_site(sites: dict[str, Site], name: str) -> Site:
    return pick(sites, name, what="site", flag="--site")


def detect_site(sites: dict[str, Site], environ: Mapping[str, str] | None = None,
                hostname: str | None = None) -> Site | None:
    """The first site whose ``detect`` rules match this environment, if any."""
    environ = os.environ if environ is None else environ
    hostname = socket.gethostname() if hostname is None else hostname
    return next((s for s in sites.values() if s.matches(environ, hostname)), None)
