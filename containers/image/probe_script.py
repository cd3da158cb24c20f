"""Runs INSIDE an image (``apptainer exec IMAGE python3 -c <this file>``): prints one JSON object
of what the image holds, read from its own files. Standard library only; a part that cannot be
read is an error string in the result, so one odd image still yields everything else."""

import glob
import json
import mmap
import os
import platform
import struct
import sys

E_MACHINE = {0x3E: "x86_64", 0xB7: "aarch64", 0x03: "i386", 0x28: "arm", 0x15: "ppc64le",
             0xF3: "riscv64", 0x16: "s390x"}
DT_NEEDED = 1


def elf_machine(path):
    with open(path, "rb") as handle:
        head = handle.read(20)
    if head[:4] != b"\x7fELF":
        return None
    order = "<" if head[5] == 1 else ">"
    return E_MACHINE.get(struct.unpack(order + "H", head[18:20])[0], "unknown")


def section_headers(data, order="<"):
    """A 64-bit ELF file's section headers and the index of the one holding their names."""
    shoff, = struct.unpack_from(order + "Q", data, 0x28)
    size, count, names = struct.unpack_from(order + "HHH", data, 0x3A)
    return [struct.unpack_from(order + "IIQQQQIIQQ", data, shoff + i * size)
            for i in range(count)], names


def elf_needed(path):
    """The DT_NEEDED names of a 64-bit ELF shared object (which libraries it loads)."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    order = "<" if data[5] == 1 else ">"
    sections = section_headers(data, order)[0]
    for sh in sections:
        if sh[1] != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[sh[6]]
        names = []
        for at in range(sh[4], sh[4] + sh[5], 16):
            tag, value = struct.unpack_from(order + "qQ", data, at)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                start = strtab[4] + value
                names.append(data[start:data.index(b"\0", start)].decode())
        return names
    return []


def fatbin_listing(path):
    """The kernels in a CUDA library's fatbinary, listed as ``cuobjdump`` would."""
    with open(path, "rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    sections, names = section_headers(data)
    table, seen, kinds = sections[names][4], set(), {1: "PTX", 2: "ELF"}
    for sh in sections:
        if data[table + sh[0]:data.find(b"\0", table + sh[0])] != b".nv_fatbin":
            continue
        at, end = sh[4], sh[4] + sh[5]
        while at + 16 <= end:
            magic, _, head, body = struct.unpack_from("<IHHQ", data, at)
            if magic != 0xBA55ED50:  # fatbinaries are 8-byte aligned
                at += 8
                continue
            entry, at = at + head, at + head + body
            while entry < at:
                kind, _, head, body = struct.unpack_from("<HHIQ", data, entry)
                arch, = struct.unpack_from("<I", data, entry + 28)
                seen.add((kinds.get(kind, "?"), arch, "ptx" if kind == 1 else "cubin"))
                entry += head + body
    name = os.path.basename(path)  # one line per kind and architecture (thousands in all)
    return "\n".join("%s file %d: %s.%d.sm_%d.%s" % (kind, n, name, n, arch, ending)
                     for n, (kind, arch, ending) in enumerate(sorted(seen), 1))


def guarded(result, key, func):
    try:
        result[key] = func()
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        result[key] = None
        result.setdefault("errors", {})[key] = "%s: %s" % (type(exc).__name__, exc)


def os_release():
    found = {}
    with open("/etc/os-release", encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep:
                found[key] = value.strip('"')
    return {"id": found.get("ID"), "version_id": found.get("VERSION_ID"),
            "pretty_name": found.get("PRETTY_NAME")}


def glibc():
    text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    name, _, version = text.partition(" ")
    return version if name == "glibc" else None


def debian_packages():
    if not os.path.exists("/var/lib/dpkg/status"):
        return []
    packages, current = [], {}
    with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as handle:
        for line in list(handle) + ["\n"]:
            if not line.strip():
                if current.get("Status", "").endswith(" installed"):
                    packages.append({"name": current.get("Package"),
                                     "version": current.get("Version"),
                                     "arch": current.get("Architecture")})
                current = {}
            elif not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                current[key] = value.strip()
    return sorted(packages, key=lambda p: p["name"])


def pip_packages():
    from importlib import metadata
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower()] = {"name": name, "version": dist.version}
    return [found[k] for k in sorted(found)]


def torch_facts():
    """torch's build, runtimes and collectives library; the import is the truth of the build."""
    import torch
    facts = {"version": torch.__version__, "cuda": torch.version.cuda,
             "hip": getattr(torch.version, "hip", None), "nccl": None, "nccl_linkage": None,
             "nccl_library": None}
    facts["build"] = "rocm" if facts["hip"] else "cuda" if facts["cuda"] else "cpu"
    if facts["build"] != "cpu":
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else \
                str(version)
        except Exception as exc:  # noqa: BLE001
            facts["nccl_error"] = str(exc)
        libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
        needed = []
        for name in ("libtorch_cuda.so", "libtorch_hip.so", "libtorch_cpu.so"):
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                needed += elf_needed(path) or []
        linked = sorted({n for n in needed if n.startswith(("libnccl", "librccl"))})
        facts["nccl_library"] = linked[0] if linked else None
        facts["nccl_linkage"] = "dynamic" if linked else (
            "static" if facts["nccl"] else None)
        gpu_build_facts(torch, libdir, facts)
    return facts


def gpu_build_facts(torch, libdir, facts):
    """What torch was compiled for and with, readable without a GPU."""
    cuda_lib = os.path.join(libdir, "libtorch_cuda.so")
    if os.path.exists(cuda_lib):
        guarded(facts, "fatbin", lambda: fatbin_listing(cuda_lib))
    guarded(facts, "arch_flags", lambda: torch._C._cuda_getArchFlags())
    guarded(facts, "config", lambda: "\n".join(
        line for line in torch.__config__.show().splitlines() if "arch" in line.lower()))
    guarded(facts, "cudnn", lambda: torch.backends.cudnn.version())


def rocm_version():
    for path in ("/opt/rocm/.info/version", *sorted(glob.glob("/opt/rocm-*/.info/version"))):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip().split("-")[0]
    return None


def labels():
    path = "/.singularity.d/labels.json"
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main():
    result = {"probe": 1}
    guarded(result, "arch", lambda: elf_machine(os.path.realpath(sys.executable)))
    guarded(result, "machine", platform.machine)
    guarded(result, "os", os_release)
    guarded(result, "glibc", glibc)
    result["python"] = "%d.%d.%d" % sys.version_info[:3]
    guarded(result, "debian_packages", debian_packages)
    guarded(result, "pip_packages", pip_packages)
    guarded(result, "torch", torch_facts)
    guarded(result, "rocm", rocm_version)
    guarded(result, "labels", labels)
    sys.stdout.write("\n@@probe@@" + json.dumps(result) + "\n")


main()
