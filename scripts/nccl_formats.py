"""NCCL's own format strings for the lines `hostnet-rdma verify` reads, at every minor release
2.4 to the newest (its newest patch tag), read from NCCL's source:

    python3 scripts/nccl_formats.py NCCL_GIT_DIR > tests/nccl-formats/formats.tsv
    python3 scripts/nccl_formats.py --aws-ofi-nccl AWS_OFI_NCCL_GIT_DIR > tests/nccl-formats/aws-ofi-nccl.tsv
    python3 scripts/nccl_formats.py --rccl RCCL_GIT_DIR > tests/nccl-formats/rccl.tsv   # ROCm's fork, same macros

NCCL_GIT_DIR is a clone (or bare mirror) of github.com/NVIDIA/nccl with its tags. For each tag,
every INFO(...)/WARN(...) call under src/ whose format matches one of KEYS below: one row with the
tag, the key, the level, file:line, the printf format (its string literals joined; a macro in it
kept as {MACRO}) and the argument expressions (which tests/nccl_render.py maps to a run's values).
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache

# What the reader relies on, by the words of NCCL's format strings (searched in the format).
KEYS: dict[str, str] = {
    "bootstrap-using": r"^Bootstrap ?: Using%s$",
    "bootstrap-no-iface": r"^Bootstrap ?: no socket interface found",
    "net-plugin-none": r"^(?:NET|%s)/Plugin ?: (?:No plugin found|Could not find)",
    "net-plugin-dlopen": r"^(?:NET|%s)/Plugin ?: (?:%s: )?%s: %s$|^(?:NET|%s)/Plugin ?: %s$|^NET/Plugin ?: Plugin load",
    "net-plugin-init-failed": r"^Failed to initialize NET plugin %s",
    "net-plugin-initialized": r"^Initialized NET plugin %s",
    "net-plugin-assigned": r"^Assigned NET plugin %s to comm",
    "net-none": r"^Failed to initialize any NET plugin",
    "ib-no-device": r"^NET/IB ?: No device found",
    "ib-using": r"^NET/IB ?: Using%s",
    "ibverbs-open-failed": r"(?:Failed to open|Count not open) libibverbs|^Count not open %s$",  # sic, 2.30
    "socket-using": r"^NET/Socket ?: Using%s",
    "socket-no-iface": r"^NET/Socket ?: no interface found",
    "using-network": r"^Using network %s",
    "init-start": r"Init START$",
    "init-complete": r"Init COMPLETE$",
    "nnodes": r"^comm %p rank %d nRanks %d nNodes %d",
    "channel-net": r"^(?:Ring|Channel) %02d.*via NET/%s/%d",
    "channel-p2p": r"^(?:Ring|Channel) %02d.*via P2P",
    "gdr-nic": r"GPU Direct RDMA (?:Disabled|%s) for HCA",
    "gdr-distance": r"GPU Direct RDMA (?:Disabled|Enabled) for GPU",
    "dmabuf": r"DMA-BUF is available",
    "ib-completion": r"Got completion (?:from peer %s )?with",
    "ib-async": r"[Aa]sync (?:fatal |error |non-fatal )?event",
    "connect-failed": r"[Cc]onnect to %s (?:failed|returned)",
    "remote-closed": r"Connection closed by remote peer",
    "env-set": r"^%s set by environment to %",
}
_CALL = re.compile(r"\b(INFO|WARN)\(")
# aws-ofi-nccl logs through NCCL's logger with its own macros, "NET/OFI " before each format
# (include/nccl_ofi_log.h): every WARN it prints, and its INFO lines of DMA-BUF and the provider.
_OFI_CALL = re.compile(r"\bNCCL_OFI_(INFO|WARN)\(")
OFI_KEYS: dict[str, str] = {
    "ofi-dmabuf": r"DMA-?BUF|dmabuf",
    "ofi-provider": r"[Pp]rovider",
    "ofi-gdr": r"GDR|GPUDirect",
}
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def ofi_tags(repo: str) -> list[str]:
    """aws-ofi-nccl's newest tag of each minor from 1.5 (v1.M.P[-aws])."""
    newest: dict[int, tuple[int, str]] = {}
    for tag in git(repo, "tag").split():
        m = re.fullmatch(r"v1\.(\d+)\.(\d+)(?:-aws)?", tag)
        if m and int(m.group(1)) >= 5:
            minor, patch = int(m.group(1)), int(m.group(2))
            if minor not in newest or newest[minor][0] <= patch:
                newest[minor] = (patch, tag)
    return [newest[k][1] for k in sorted(newest)]


def rccl_tags(repo: str) -> list[str]:
    """RCCL's newest tag of each ROCm minor from 4.0 (rocm-M.m.p)."""
    newest: dict[tuple[int, int], tuple[int, str]] = {}
    for tag in git(repo, "tag").split():
        m = re.fullmatch(r"rocm-(\d+)\.(\d+)\.(\d+)", tag)
        if m and int(m.group(1)) >= 4:
            key, patch = (int(m.group(1)), int(m.group(2))), int(m.group(3))
            if key not in newest or newest[key][0] <= patch:
                newest[key] = (patch, tag)
    return [newest[k][1] for k in sorted(newest)]


def release_tags(repo: str) -> list[str]:
    """The newest patch tag of each minor from 2.4 (v2.M.P-N)."""
    newest: dict[tuple[int, int], tuple[int, int, str]] = {}
    for tag in git(repo, "tag").split():
        m = re.fullmatch(r"v2\.(\d+)\.(\d+)-(\d+)", tag)
        if m and int(m.group(1)) >= 4:
            minor, patch, build = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if (2, minor) not in newest or newest[(2, minor)][:2] < (patch, build):
                newest[(2, minor)] = (patch, build, tag)
    return [newest[k][2] for k in sorted(newest)]


@cache
def source(repo: str, tag: str, path: str) -> list[str]:
    return git(repo, "show", f"{tag}:{path}").splitlines()


def call_at(lines: list[str], start: int, col: int) -> str:
    """The call's text from its name to its closing parenthesis (it may span lines)."""
    depth, out, i, j = 0, [], start, col
    in_str = False
    while i < len(lines):
        text = lines[i]
        while j < len(text):
            c = text[j]
            out.append(c)
            if in_str:
                if c == "\\":
                    j += 1
                    if j < len(text):
                        out.append(text[j])
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return "".join(out)
            j += 1
        out.append(" ")
        i, j = i + 1, 0
        if i - start > 8:
            break
    return "".join(out)


def split_args(inner: str) -> list[str]:
    args, depth, cur, in_str = [], 0, [], False
    k = 0
    while k < len(inner):
        c = inner[k]
        if in_str:
            cur.append(c)
            if c == "\\" and k + 1 < len(inner):
                cur.append(inner[k + 1])
                k += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        k += 1
    if cur:
        args.append("".join(cur).strip())
    return args


def fmt_of(expr: str) -> str:
    """The format of a format argument: its string literals joined, a macro between them as {NAME}."""
    parts: list[str] = []
    pos = 0
    for m in _STRING.finditer(expr):
        between = expr[pos : m.start()].strip()
        if between:
            parts.append("{" + between + "}")
        parts.append(m.group(1))
        pos = m.end()
    rest = expr[pos:].strip()
    if rest:
        parts.append("{" + rest + "}")
    return "".join(parts).replace("\\n", "").replace("\\t", " ")


def rows(repo: str, tag: str, ofi: bool = False) -> list[tuple[str, str, str, str, str, str]]:
    out = []
    call_re, where = (_OFI_CALL, ["src", "include"]) if ofi else (_CALL, ["src"])
    grep = subprocess.run(["git", "-C", repo, "grep", "-n", "-E", call_re.pattern, tag, "--", *where],
                          capture_output=True, text=True).stdout  # fmt: skip
    for hit in grep.splitlines():
        _, path, line_no, _ = hit.split(":", 3)
        if not path.endswith((".cc", ".h", ".cu", ".c", ".cpp")):
            continue
        lines = source(repo, tag, path)
        n = int(line_no) - 1
        m = call_re.search(lines[n])
        if not m or "#define" in lines[n]:
            continue
        call = call_at(lines, n, m.start())
        inner = call[call.index("(") + 1 : -1]
        args = split_args(inner)
        if m.group(1) == "INFO":
            if len(args) < 2:
                continue
            fmt, rest = fmt_of(args[1]), args[2:]
        else:
            if not args:
                continue
            fmt, rest = fmt_of(args[0]), args[1:]
        if '"' not in inner:
            continue
        if ofi:
            fmt = "NET/OFI " + fmt
            key = (
                "ofi-warn" if m.group(1) == "WARN" else next((k for k, p in OFI_KEYS.items() if re.search(p, fmt)), "")
            )
            if key:
                out.append(
                    (tag, key, m.group(1), f"{path}:{line_no}", fmt, " | ".join(a.replace("\t", " ") for a in rest))
                )
            continue
        for key, pattern in KEYS.items():
            if re.search(pattern, fmt):
                out.append(
                    (tag, key, m.group(1), f"{path}:{line_no}", fmt, " | ".join(a.replace("\t", " ") for a in rest))
                )
                break
    return out


def main() -> None:
    ofi = sys.argv[1] == "--aws-ofi-nccl"
    repo = sys.argv[-1]
    print("tag\tkey\tlevel\tsource\tformat\targs")
    tags = ofi_tags(repo) if ofi else rccl_tags(repo) if sys.argv[1] == "--rccl" else release_tags(repo)
    for tag in tags:
        for row in sorted(set(rows(repo, tag, ofi)), key=lambda r: (r[1], r[3])):
            print("\t".join(row))


if __name__ == "__main__":
    main()
