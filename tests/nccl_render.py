"""NCCL's log lines rendered from its own printf formats (tests/nccl-formats/formats.tsv, read
from NCCL's source at each release tag by scripts/nccl_formats.py) with the values a run prints:
the start-up scenarios users meet, at every minor release 2.4 to the newest. A format's arguments
are C expressions; `value` maps each to the run's value by what it names (the rank, the network's
name, the device line...). A line whose key a release does not have is left out, as that release
would (no Init START before 2.18, no nNodes before 2.20, no plugin loader's lines before 2.24).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

TABLE = Path(__file__).parent / "nccl-formats" / "formats.tsv"


def load(table: Path = TABLE) -> dict[str, dict[str, list[dict[str, str]]]]:
    out: dict[str, dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
    with table.open() as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            out[row["tag"]][row["key"]].append(row)
    return out


FORMATS = load()
RELEASES = sorted(FORMATS, key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t)))
# RCCL, ROCm's fork of NCCL, prints through the same macros: its releases render the same scenarios.
RCCL = load(TABLE.parent / "rccl.tsv")
RCCL_RELEASES = sorted(RCCL, key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t)))
_CONV = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+))?(hh|h|ll|l|z|j|t)?([diouxXcspf%])")


def value(expr: str, conv: str, run: dict[str, Any]) -> Any:
    """The value a run prints for one argument expression of NCCL's source."""
    e = expr.replace(" ", "")
    if '"/GDRDMA"' in e:
        return "/GDRDMA" if run.get("gdr") else ""
    if '"Enabled"' in e:
        return "Enabled" if run.get("gdr_enabled") else "Disabled"
    if '"[RO]"' in e:
        return "[RO]"
    if '"/Shared"' in e or "/Shared" in e:
        return ""
    if "StatusStr" in e:
        return "IBV_WC_RETRY_EXC_ERR"
    if "OpcodeStr" in e:
        return "IBV_WC_SEND"
    if "status" in e:
        return run.get("status", 12)
    if "ibVerbsLib" in e:
        return "libibverbs.so"
    if "pluginNames" in e:
        return "NET"
    if "NameList" in e or "couldNotFindNames" in e:
        return run.get("names", " libnccl-net.so")
    if "libName" in e:
        return run.get("lib", "libnccl-net.so")
    if "openErrStr" in e or "dlerror" in e:
        return run.get("s", "")
    if "funcName" in e:
        return "ncclCommInitRankConfig"
    if "SocketToString" in e or "socketToString" in e:
        return run.get("peer_addr") if run.get("key") in ("ib-completion", "remote-closed") else run["addr"] + "<0>"
    if "IfName" in e:
        return run["ifname"]
    if run.get("key") in ("bootstrap-using",) and e == "line":
        return f" {run['ifname']}:{run['addr']}<0>" if run.get("no_index") else f" [0]{run['ifname']}:{run['addr']}<0>"
    if run.get("key") == "socket-using" and e == "line":
        return f" [0]{run['ifname']}:{run['addr']}<0>"
    if run.get("key") == "ib-using" and e == "line":
        return f" [0]{run['hca']}:1/{run['link']}"
    if "nNodes" in e:
        return run["nodes"]
    if "localRanks" in e:
        return run["nranks"] if run["nodes"] == 1 else 1
    if "localRank" in e:
        return run["rank"] if run["nodes"] == 1 else 0
    if "nRanks" in e or "nranks" in e:
        return run["nranks"]
    if "peerInfo->rank" in e:
        return run.get("peer", 1)
    if re.search(r"myInfo->rank|myrank|comm->rank|^rank$", e):
        return run["rank"]
    if "commIdHash" in e or "commHash" in e or "commId" in e:
        return run["comm_id"]
    if "pluginLib" in e or "netPluginLibs" in e:
        return run.get("plugin", run["net"])
    if re.search(r"ncclNet->name|ncclNetName\(|netInfo->name|netName", e):
        return run["net"]
    if "props.name" in e or "devName" in e:
        return run.get("hca", "mlx5_0")
    if "channelId" in e:
        return run.get("channel", 0)
    if "distance" in e:
        return 2
    if "GdrLevel" in e:
        return 3
    if "busId" in e:
        return 0x60
    if conv == "s":
        return run.get("s", "")
    if conv == "p":
        return 0x55D900E4A6C0
    return 0


def printf(fmt: str, args: list[str], run: dict[str, Any]) -> str:
    """NCCL's format with the run's values, as C's printf writes them."""
    out, pos, k = [], 0, 0
    fmt = re.sub(r"\{[^}]*\}", "", fmt)  # a macro between literals (a version string): nothing here
    for m in _CONV.finditer(fmt):
        out.append(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, _, conv = m.groups()
        if conv == "%":
            out.append("%")
            continue
        v = value(args[k] if k < len(args) else "", conv, run)
        k += 1
        if conv in "di" or conv == "u":
            s = str(int(v))
        elif conv in "xX":
            s = format(int(v), conv)
        elif conv == "p":
            s = hex(int(v))
        elif conv == "f":
            s = f"{float(v):.{int(prec or 6)}f}"
        else:
            s = str(v)
        if width and width != "*":
            s = s.rjust(int(width), "0" if "0" in flags else " ")
        out.append(s)
    out.append(fmt[pos:])
    return "".join(out)


def _pick(rows: list[dict[str, str]], want: str) -> dict[str, str]:
    """A key's variant: the one whose format holds `want` (send/receive, commId), else the first."""
    return next((r for r in rows if want and want in r["format"]), rows[0])


def render(tag: str, steps: list[tuple[str, dict[str, Any]]], run: dict[str, Any]) -> list[str]:
    """One rank's lines, in NCCL's prefix "host:pid:tid [dev] NCCL INFO|WARN " (debug.cc; WARN with
    the source's file:line since 2.8)."""
    lines = []
    table = FORMATS[tag] if tag in FORMATS else RCCL[tag]
    for key, extra in steps:
        rows = table.get(key)
        if not rows:
            continue
        values = {**run, **extra, "key": key}
        if key == "gdr-nic" and values.get("gdr_enabled") and all("Disabled" in r["format"] for r in rows):
            continue  # before 2.14 NCCL printed only the Disabled form
        row = _pick(rows, str(extra.get("variant", "commId" if key.startswith("init-") else "")))
        if key.startswith("init-") and "commId" not in row["format"] and "parent" in row["format"]:
            row = rows[0]
        msg = printf(row["format"], [a.strip() for a in row["args"].split(" | ")] if row["args"] else [], values)
        who = f"{run['host']}:{run['pid']}:{run['pid']} [{run.get('dev', 0)}]"
        if row["level"] == "WARN":
            where = row["source"].rsplit("/", 1)[-1]
            lines.append(f"{who} {where} NCCL WARN {msg}")
        else:
            lines.append(f"{who} NCCL INFO {msg}")
    return lines


def _node(rank: int) -> dict[str, Any]:
    return {"host": f"node-{rank}", "pid": 700 + rank, "rank": rank, "peer": 1 - rank, "ifname": "eth0",
            "addr": f"10.0.0.{10 + rank}", "comm_id": 0x76DCB54BD29CA91E, "nranks": 2, "nodes": 2,
            "net": "Socket", "hca": "mlx5_0", "link": "RoCE", "peer_addr": "10.0.0.11<46339>"}  # fmt: skip


def _channels(net: str, n: int = 2, gdr: bool = False) -> list[tuple[str, dict[str, Any]]]:
    return [("channel-net", {"channel": c, "variant": way, "net": net, "gdr": gdr})
            for c in range(n) for way in ("[receive]", "[send]")]  # fmt: skip


def _start(net: str, ib: str, plugin_line: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Network set-up as NCCL prints it: the plugin loader, IB's try (`ib`: no-device, disabled,
    device, absent), the socket transport, the choice."""
    steps: list[tuple[str, dict[str, Any]]] = [("bootstrap-using", {"no_index": True})]
    steps.append(("net-plugin-none", {"names": plugin_line} if plugin_line else {}))
    if ib == "no-device":
        steps += [("ib-no-device", {}), ("net-plugin-init-failed", {"plugin": "IB"})]
    elif ib == "no-libibverbs":
        steps += [("ibverbs-open-failed", {}), ("net-plugin-init-failed", {"plugin": "IB"})]
    elif ib == "disabled":
        steps += [("net-plugin-init-failed", {"plugin": "IB"})]  # 2.24+: ncclIbInit returns an error
    elif ib == "device":
        steps += [("ib-using", {}), ("net-plugin-initialized", {"plugin": "IB"})]
    if net == "Socket":
        steps += [("socket-using", {}), ("net-plugin-initialized", {"plugin": "Socket"})]
    steps += [("net-plugin-assigned", {"plugin": net}), ("using-network", {"net": net})]
    return steps


def _init(nodes: int) -> list[tuple[str, dict[str, Any]]]:
    return [("init-start", {}), ("nnodes", {"nodes": nodes})]


# scenario: (the rank's run values, its steps, the verdict it calls for at INFO level)
def scenarios() -> dict[str, tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], str]]:
    two = _node(0)
    one = {**_node(0), "nranks": 1, "nodes": 1}
    p2p = {**_node(0), "nodes": 1}
    roce = {**_node(0), "net": "IB"}
    done = [("init-complete", {})]
    return {
        "one-node-1gpu": (one, _start("Socket", "no-device") + _init(1) + done, "healthy-single-node"),
        "one-node-2gpu-p2p": (p2p, _start("Socket", "no-device") + _init(1) + done
                              + [("channel-p2p", {"channel": c}) for c in range(2)], "healthy-single-node"),
        "one-node-p2p-no-libibverbs": (p2p, _start("Socket", "no-libibverbs") + _init(1) + done
                                       + [("channel-p2p", {"channel": c}) for c in range(2)], "healthy-single-node"),
        "two-nodes-no-libibverbs": (two, _start("Socket", "no-libibverbs") + _init(2) + done + _channels("Socket"),
                                    "libibverbs-missing"),
        "two-nodes-sockets": (two, _start("Socket", "no-device") + _init(2) + done + _channels("Socket"),
                              "socket-fallback"),
        "ib-disabled": (two, _start("Socket", "disabled") + _init(2) + done + _channels("Socket"), "healthy-socket"),
        "net-socket": (two, _start("Socket", "") + _init(2) + done + _channels("Socket"), "healthy-socket"),
        "net-plugin-missing": (two, _start("Socket", "no-device", " nosuch libnccl-net-nosuch.so") + _init(2) + done
                               + _channels("Socket"), "socket-fallback"),
        "bootstrap-no-iface": (two, [("bootstrap-no-iface", {})], "bootstrap-failure"),
        "peer-never-comes": (two, [*_start("Socket", "disabled"), ("init-start", {})], "startup-stall"),
        "mtu-blackhole-sockets": (two, [*_start("Socket", "disabled"), ("init-start", {})], "startup-stall"),
        "roce-healthy": (roce, _start("IB", "device") + _init(2) + [("gdr-nic", {"gdr_enabled": True})] + done
                         + _channels("IB", gdr=True), "healthy-verbs"),
        "roce-dmabuf-no-gdr-channel": (roce, [*_start("IB", "device"), ("dmabuf", {}), *_init(2),
                                              ("gdr-nic", {"gdr_enabled": True}), *done, *_channels("IB")],
                                       "healthy-verbs"),
        "roce-mtu-blackhole": (roce, _start("IB", "device") + _init(2) + [("gdr-nic", {"gdr_enabled": True})] + done
                               + _channels("IB", gdr=True) + [("ib-completion", {"status": 12})], "retry-exceeded"),
    }  # fmt: skip


SCENARIOS = scenarios()


def rendered(tag: str, scenario: str) -> str:
    run, steps, _ = SCENARIOS[scenario]
    return "\n".join(render(tag, steps, run))
