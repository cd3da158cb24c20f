"""Which network NCCL/RCCL really used, proven (or not) from its debug output; the software stack
a run ran on (the ranks' device reports, NCCL's log, the runtime) and what changed between two
runs of one image."""

from __future__ import annotations

from containers.host.runtime import Runtime
from containers.prove.transport import check_transport, run_stack, stack_diff, stack_from_log

CXI = "NET/OFI Selected [Pp]rovider is cxi"

# NCCL/RCCL debug output as the LUMI and Olivia documentation show it.
GOOD_RCCL = """nid005001:12345:12345 [0] NCCL INFO Bootstrap : Using hsn0:10.253.6.1<0>
nid005001:12345:12345 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
nid005001:12345:12345 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid005001:12345:12345 [0] NCCL INFO Using network AWS Libfabric
""".splitlines()
TCP_FALLBACK = """nid005001:12345:12345 [0] NCCL INFO Bootstrap : Using hsn0:10.253.6.1<0>
nid005001:12345:12345 [0] NCCL INFO NET/Plugin: Could not find: librccl-net.so. Using internal network plugin.
nid005001:12345:12345 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.253.6.1<0> [1]hsn1:10.253.6.2<0>
nid005001:12345:12345 [0] NCCL INFO Using network Socket
""".splitlines()


def test_transport_proven_fallback_and_missing() -> None:
    good = check_transport(GOOD_RCCL, expect=CXI, name="OFI over cxi")
    assert good.ok and "Selected Provider is cxi" in good.evidence
    fallback = check_transport(TCP_FALLBACK, expect=CXI, name="OFI over cxi")
    assert not fallback.ok and "fell back to TCP sockets instead of OFI over cxi" in \
        fallback.message
    assert "/opt/cray" in fallback.message and "NCCL_SOCKET_IFNAME" in fallback.message
    assert fallback.evidence.endswith("NCCL INFO NET/Socket : Using [0]hsn0:10.253.6.1<0> "
                                      "[1]hsn1:10.253.6.2<0>")
    silent = check_transport(["rank 0 ok"], expect=CXI, name="OFI over cxi")
    assert not silent.ok and "NCCL_DEBUG=INFO" in silent.message
    other = check_transport(["x NCCL INFO Using network IB"], expect=CXI, name="OFI over cxi")
    assert not other.ok and "names a network but not OFI over cxi" in other.message


# NCCL/RCCL stopping because NCCL_NET names a network they cannot load, as their sources print it
# (RCCL net.cc and NCCL up to 2.22: "Error: network %s not found."; NCCL from 2.23, plugin/net.cc:
# "Failed to initialize any NET plugin"). RCCL initialises its socket network before it compares
# the name, so the socket line comes first.
LUMI_NO_PLUGIN = """nid005001:12345:12345 [0] NCCL INFO NET/Plugin: No plugin found (librccl-net.so)
nid005001:12345:12345 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libfabric.so.1: cannot open shared object file: No such file or directory : when loading librccl-net.so
nid005001:12345:12345 [0] NCCL INFO NET/Plugin: Using internal network plugin.
nid005001:12345:12345 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.253.6.1<0>
nid005001:12345:12345 [0] net.cc:580 NCCL WARN Error: network AWS Libfabric not found.
""".splitlines()
OLIVIA_NO_PLUGIN = """gpu-1-3:8812:8812 [0] NCCL INFO NCCL version 2.26.6+cuda12.8
gpu-1-3:8812:8890 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.
gpu-1-3:8812:8890 [0] plugin/net.cc:349 NCCL WARN Failed to initialize any NET plugin
""".splitlines()
CAUSES = ("missing binds of the host's network libraries such as /opt/cray and libcxi.so.1, the "
          "plugin not on LD_LIBRARY_PATH, the plugin not installed in the image")


def test_forced_network_missing_is_named_with_its_causes() -> None:
    lumi = check_transport(LUMI_NO_PLUGIN, expect=CXI, name="OFI over cxi", net="AWS Libfabric")
    assert not lumi.ok
    assert lumi.message == (
        "OFI over cxi: NCCL/RCCL could not load the network plugin 'AWS Libfabric' "
        "(NCCL_NET='AWS Libfabric' forbids the TCP fallback); the loader could not open "
        f"libfabric.so.1: usual causes: {CAUSES}")
    assert lumi.evidence == ("nid005001:12345:12345 [0] net.cc:580 NCCL WARN Error: network AWS "
                             "Libfabric not found.")
    # The failure wins over a socket line wherever it stands, and over a proof from another rank.
    for lines in (LUMI_NO_PLUGIN[::-1], GOOD_RCCL + LUMI_NO_PLUGIN + TCP_FALLBACK):
        again = check_transport(lines, expect=CXI, name="OFI over cxi", net="AWS Libfabric")
        assert not again.ok and again.evidence.endswith("Error: network AWS Libfabric not found.")
    olivia = check_transport(OLIVIA_NO_PLUGIN, expect=CXI, name="OFI (aws-ofi-nccl) over cxi",
                             net="AWS Libfabric")
    assert not olivia.ok and olivia.message.startswith(
        "OFI (aws-ofi-nccl) over cxi: NCCL/RCCL could not load the network plugin 'AWS "
        "Libfabric' (NCCL_NET='AWS Libfabric' forbids the TCP fallback): usual causes: ")
    assert "loader" not in olivia.message
    assert olivia.evidence.endswith("NCCL WARN Failed to initialize any NET plugin")


def test_forced_network_failure_without_the_profile_value() -> None:
    # PyTorch repeats NCCL's last error on a line of its own; the network comes from it.
    relayed = check_transport(["ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for "
                               "details), NCCL version 2.21.5", "Last error:",
                               "Error: network AWS Libfabric not found."],
                              expect=CXI, name="OFI over cxi")
    assert not relayed.ok and "plugin 'AWS Libfabric' (NCCL_NET='AWS Libfabric'" in \
        relayed.message
    assert relayed.evidence == "Error: network AWS Libfabric not found."
    anonymous = check_transport(OLIVIA_NO_PLUGIN, expect=CXI, name="OFI over cxi")
    assert not anonymous.ok and anonymous.message.startswith(
        "OFI over cxi: NCCL/RCCL could not load any network plugin (an NCCL_NET setting forbids "
        "the TCP fallback): usual causes: ")


def test_unloaded_plugin_counts_only_where_the_network_is_forced() -> None:
    forced = check_transport(TCP_FALLBACK, expect=CXI, name="OFI over cxi", net="AWS Libfabric")
    assert not forced.ok and "could not load the network plugin 'AWS Libfabric'" in forced.message
    assert forced.evidence.endswith("NET/Plugin: Could not find: librccl-net.so. Using internal "
                                    "network plugin.")
    # Without NCCL_NET the same lines are a fallback, and the shared causes name the same things.
    fallback = check_transport(TCP_FALLBACK, expect=CXI, name="OFI over cxi")
    assert fallback.message.startswith("NCCL/RCCL fell back to TCP sockets") and \
        f"(usual causes: {CAUSES}, or a wrong NCCL_SOCKET_IFNAME)" in fallback.message
    # A good run that tried another plugin name first is still proven.
    tried = ["n [0] NCCL INFO NET/Plugin: No plugin found (librccl-net-ofi.so)"] + GOOD_RCCL
    good = check_transport(tried, expect=CXI, name="OFI over cxi", net="AWS Libfabric")
    assert good.ok and good.message == "transport OFI over cxi confirmed"


# Start-up lines as NCCL with aws-ofi-nccl (Olivia, CUDA) and RCCL with aws-ofi-rccl (LUMI, ROCm)
# print them (format strings from their sources: NCCL init.cc, aws-ofi-nccl nccl_ofi_net.cpp,
# RCCL init.cc, aws-ofi-rccl nccl_ofi_net.c).
NCCL_CUDA = """gpu-1-3:8812:8812 [0] NCCL INFO Bootstrap: Using hsn0:10.100.4.13<0>
gpu-1-3:8812:8812 [0] NCCL INFO cudaDriverVersion 12080
gpu-1-3:8812:8812 [0] NCCL INFO NCCL version 2.26.6+cuda12.8
gpu-1-3:8812:8890 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v10)
gpu-1-3:8812:8890 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.2
gpu-1-3:8812:8890 [0] NCCL INFO NET/OFI Using Libfabric version 2.1
gpu-1-3:8812:8890 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)
gpu-1-3:8812:8890 [0] NCCL INFO Using network AWS Libfabric
gpu-1-3:8813:8891 [1] NCCL INFO NCCL version 2.27.3+cuda12.9
""".splitlines()
RCCL_ROCM = """RCCL version 2.20.5+hip6.2 HEAD:c4d4f1b
nid005001:12345:12345 [0] NCCL INFO ROCr version 1.1
nid005001:12345:12345 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
nid005001:12345:12345 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid005001:12345:12345 [0] NCCL INFO Using network AWS Libfabric
""".splitlines()


def test_stack_from_log() -> None:
    assert stack_from_log(NCCL_CUDA) == {"nccl_log": "2.26.6+cuda12.8",
                                         "net_plugin": "aws-ofi-nccl 1.14.2",
                                         "libfabric": "2.1", "network": "AWS Libfabric"}
    assert stack_from_log(RCCL_ROCM) == {"nccl_log": "2.20.5+hip6.2",
                                         "net_plugin": "aws-ofi-rccl 1.4.0",
                                         "network": "AWS Libfabric"}
    # Older aws-ofi-nccl says "Using"; newer RCCL "RCCL version : X-<branch>:<commit>".
    assert stack_from_log(["h:1:2 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.4.0aws",
                           "RCCL version : 2.21.5-develop:7f8f3d1"]) == {
        "net_plugin": "aws-ofi-nccl 1.4.0aws", "nccl_log": "2.21.5"}
    # The network from NCCL's transport lines where no "Using network" line came; the socket
    # fallback shows as such.
    assert stack_from_log(["h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0"]) == {
        "network": "IB"}
    assert stack_from_log(TCP_FALLBACK) == {"network": "Socket"}
    # Warnings quote versions that are not the running ones.
    assert stack_from_log(["h:1:2 [0] x.cc:9 NCCL WARN compiled with NCCL version 2.28.3, "
                           "but is running ..."]) == {}
    assert stack_from_log(["rank 0 ok", "h:1:2 [0] NCCL INFO Bootstrap : Using hsn0"]) == {}
    assert stack_from_log([]) == {}


RUNTIME = Runtime(binary="apptainer", flavour="apptainer", version="1.4.5")


def test_the_stack_joins_what_ranks_disagree_on() -> None:
    reports = [{"torch": "2.5.1", "build": "cuda", "cuda": "12.4", "driver": "550.54",
                "name": "NVIDIA H100"},
               {"torch": "2.5.1", "build": "cuda", "cuda": "12.4", "driver": "560.35",
                "name": "NVIDIA H100", "hip": None, "nccl": ""}]
    found = run_stack(reports, [], runtime=RUNTIME)
    assert found == {"torch": "2.5.1", "build": "cuda", "cuda": "12.4",
                     "driver": "550.54 / 560.35", "devices": "NVIDIA H100",
                     "runtime": "apptainer 1.4.5"}


def test_changes_name_each_compared_part_and_skip_old_records() -> None:
    before = {"torch": "2.5.1", "driver": "550.54", "devices": "a", "runtime": "apptainer 1.4"}
    after = {"torch": "2.5.1", "driver": "560.35", "devices": "a / b", "net_plugin": "ofi",
             "runtime": "apptainer 1.4"}
    assert stack_diff(before, after) == ["driver 550.54 -> 560.35", "net_plugin - -> ofi"]
    assert stack_diff(None, after) == [] and stack_diff(before, {}) == []
