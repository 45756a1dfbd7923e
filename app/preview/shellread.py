"""What the preview reads of a container's command before the pod exists: the kubelet's `$(VAR)`
expansion of command and args, then, for a `sh -c` script, the words torchrun will get with the
variables the pod's env defines (and the script's own plain assignments) expanded as bash does.

Pure and bounded: an expansion that would make more than MAX_EXPANDED bytes reads as unknown.
Anything known only at run time (a command substitution, a variable of no known value, a value
made inside a loop or a branch) stays unknown; the caller says which torchrun flag it decides.
Held to real bash by tests/test_shellread.py (a fake torchrun first on PATH records its argv).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from app.core import budget, shwords

# The most bytes one command's expansion may make (kubelet's and the shell's together).
MAX_EXPANDED = budget.ENV_EXPANDED_BYTES


class TooLarge(ValueError):
    """An expansion over MAX_EXPANDED: read as unknown."""


# ------------------------------------------------------------------------- the kubelet's $(VAR)
def kubelet_expand(text: str, lookup: Callable[[str], str | None], room: int = MAX_EXPANDED) -> str | None:
    """`text` as the kubelet expands a container's env value, command or args
    (k8s.io/kubernetes third_party/forked/golang/expansion: `$$` is `$`, `$(NAME)` the value of
    NAME, kept as written where NAME is not defined, an unclosed `$(` kept). `lookup(name)`: the
    value, `$(name)` when it is not defined, None when it is defined but known only at run time
    (then the whole text is None). None too past `room` bytes."""
    if "$" not in text:
        return text
    out: list[str] = []
    size = 0
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == "$":
                read, advance = "$", 1
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close < 0:
                    read, advance = "$(", 1
                else:
                    value = lookup(text[cursor + 2 : close])
                    if value is None:
                        return None
                    read, advance = value, close - cursor
            else:
                read, advance = "$" + nxt, 1
            out.append(read)
            size += len(read) + cursor - checkpoint
            if size > room:
                return None
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


# Environment variables the kubelet adds for Services (enableServiceLinks, and the `kubernetes`
# Service's always): their values are the cluster's, unknown to a preview.
_SERVICE_LINK = re.compile(r"[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT|PORT)(_[A-Z0-9_]+)?")
_ENV_FROM_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


@dataclass
class KubeletEnv:
    """The container's env as the kubelet builds it, as far as it is known before the pod runs."""

    known: dict[str, str] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)  # declared, value known only at run time
    env_from: bool = False  # envFrom: any name may be defined
    service_links: bool = True

    def lookup(self, name: str) -> str | None:
        if name in self.known:
            return self.known[name]
        if name in self.unknown or (self.env_from and _ENV_FROM_NAME.fullmatch(name)):
            return None
        if name.startswith("KUBERNETES_") or (self.service_links and _SERVICE_LINK.fullmatch(name)):
            return None
        return f"$({name})"


def kubelet_env(
    pod: Mapping[str, object], container: Mapping[str, object], resolve: Callable[[Mapping[str, object]], str | None]
) -> KubeletEnv:
    """Each env entry in order, its value expanded from the entries before it (and Services'),
    as the kubelet does; `resolve(entry)` gives a valueFrom entry's value, None when unknown."""
    spec = pod.get("spec")
    links = not (isinstance(spec, dict) and spec.get("enableServiceLinks") is False)
    out = KubeletEnv(env_from=bool(container.get("envFrom")), service_links=links)
    room = MAX_EXPANDED
    entries = container.get("env")
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            continue
        name = e["name"]
        value: str | None
        if "valueFrom" in e:
            value = resolve(e)
        else:
            raw = e.get("value")
            value = kubelet_expand(raw, out.lookup, room) if isinstance(raw, str) else "" if raw is None else None
        if value is None:
            out.known.pop(name, None)
            out.unknown.add(name)
        else:
            room -= len(value)
            out.unknown.discard(name)
            out.known[name] = value
    return out


def kubelet_argv(argv: list[str], env: KubeletEnv) -> list[str]:
    """command + args as the kubelet hands them to the runtime (every word expanded from the
    container's whole env). A word that needs a value known only at run time stays as written."""
    room = MAX_EXPANDED
    out: list[str] = []
    for word in argv:
        got = kubelet_expand(word, env.lookup, room)
        if got is None:
            got = word
        room -= len(got)
        out.append(got)
    return out


# ------------------------------------------------------------------------- the shell's words
# A word's parts: (kind, text). LIT: literal text (quoted, escaped, or plain); VAR: an
# expansion ($NAME, ${...}, $(...), `...`, $((...))) unquoted, so its value is split into
# fields; QVAR: one inside double quotes (not split).
LIT, VAR, QVAR = 0, 1, 2
Part = tuple[int, str]
Word = list[Part]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[^ \t\n#'\"\\();<>|&$`]+")
_DQ_PLAIN = re.compile(r'[^"\\$`]+')


def split_marked(s: str) -> list[Word | str]:
    """The script's words with their parts marked (see LIT, VAR, QVAR); operators as strings
    (shwords' operator words: runs of `;&|()<>`, "\\n"). As shwords.split reads it."""
    out: list[Word | str] = []
    n = len(s)
    i = 0
    while i < n:
        ch = s[i]
        if ch in " \t":
            i += 1
        elif ch == "\n":
            out.append(shwords.NEWLINE)
            i += 1
        elif ch == "#":
            end = s.find("\n", i)
            i = n if end < 0 else end
        elif s.startswith("\\\n", i):
            i += 2
        elif ch in "();<>|&":
            j = i
            while j < n and s[j] in "();<>|&":
                j += 1
            out.append(s[i:j])
            i = j
        else:
            word: Word = []
            i = _word(s, i, word)
            out.append(word)
    return out


def _dollar(s: str, i: int, kind: int, parts: Word) -> int:
    """The expansion at s[i] == "$" (or a backquote); the index after it."""
    if s[i] == "`" or s[i + 1 : i + 2] in ("(", "{"):
        end = shwords._expansion_end(s, i)
        parts.append((kind, s[i:end]))
        return end
    m = _NAME.match(s, i + 1)
    if m:
        parts.append((kind, s[i : m.end()]))
        return m.end()
    if i + 1 < len(s) and s[i + 1] in "@*#?$!-0123456789":
        parts.append((kind, s[i : i + 2]))
        return i + 2
    parts.append((LIT, "$"))
    return i + 1


def _word(s: str, i: int, parts: Word) -> int:
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "'":
            end = shwords._closing_quote(s, i)
            parts.append((LIT, s[i + 1 : end - 1]))
            i = end
        elif ch == '"':
            i = _double(s, i + 1, parts)
        elif ch == "\\":
            if i + 1 >= n:
                parts.append((LIT, ch))
                i += 1
            else:
                if s[i + 1] != "\n":
                    parts.append((LIT, s[i + 1]))
                i += 2
        elif ch in "$`":
            i = _dollar(s, i, VAR, parts)
        elif ch in " \t\n();<>|&":
            break
        elif ch == "#":
            parts.append((LIT, ch))
            i += 1
        else:
            m = _PLAIN.match(s, i)
            assert m is not None
            parts.append((LIT, m.group()))
            i = m.end()
    if not parts:
        parts.append((LIT, ""))
    return i


def _double(s: str, i: int, parts: Word) -> int:
    n = len(s)
    parts.append((LIT, ""))  # "" is a word even when empty
    while True:
        if i >= n:
            raise ValueError("No closing quotation")
        c = s[i]
        if c == '"':
            return i + 1
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("No closing quotation")
            nxt = s[i + 1]
            if nxt != "\n":
                parts.append((LIT, nxt if nxt in '$`"\\' else "\\" + nxt))
            i += 2
        elif c in "$`":
            i = _dollar(s, i, QVAR, parts)
        else:
            m = _DQ_PLAIN.match(s, i)
            assert m is not None
            parts.append((LIT, m.group()))
            i = m.end()


# ------------------------------------------------------------------------- reading the script
UNKNOWN = "\x00"  # marks a word (or part) whose value is known only at run time


SPLIT = "\x01"  # after UNKNOWN: an unquoted expansion, which bash splits into fields (none if empty)


def is_unknown(word: str) -> bool:
    return UNKNOWN in word


def shown(word: str) -> str:
    """The word as the script writes its parts known only at run time."""
    return word.replace(UNKNOWN, "").replace(SPLIT, "")


_UNQUOTED_ONLY = re.compile(f"({UNKNOWN}{SPLIT}[^{UNKNOWN}]*{UNKNOWN})+")


def may_vanish(word: str) -> bool:
    """Whether the word is only unquoted expansions known at run time (`$X`, `$(cmd)`): bash
    makes it no field when they are empty, several when they hold blanks."""
    return _UNQUOTED_ONLY.fullmatch(word) is not None


_UNKNOWN_PART = re.compile(f"{UNKNOWN}[^{UNKNOWN}]*{UNKNOWN}")


def known_parts(word: str, stand_in: str) -> str:
    """The word with each part known only at run time replaced by `stand_in` (the rest as bash
    makes it): `--rdzv-endpoint=<run time>:23456`."""
    return shown(_UNKNOWN_PART.sub(stand_in, word))


@dataclass
class Scope:
    """The shell's variables as the script sets them: a value, or None (known only at run time)."""

    values: dict[str, str | None]
    arrays: dict[str, list[str] | None] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    room: int = MAX_EXPANDED
    opaque: bool = False  # after `source`/`eval`, or envFrom: a name never set may be set
    fetched: bool = False  # after `git clone`, `curl`, `wget`: programs it runs are fetched
    # Names not set that the container's env may still hold (the kubelet's Service variables).
    maybe: Callable[[str], bool] | None = None
    unset: set[str] = field(default_factory=set)  # names the script unset: unset whatever the env held

    def get(self, name: str) -> str | None:
        """A variable's value: "" when never set (as bash), None when unknown."""
        if name in self.arrays:
            arr = self.arrays[name]
            return None if arr is None else (arr[0] if arr else "")
        if name not in self.values and name not in self.unset and self.maybe is not None and self.maybe(name):
            return None
        return self.values.get(name, None if self.opaque and name not in self.unset else "")

    def charge(self, text: str) -> str:
        self.room -= len(text)
        if self.room < 0:
            raise TooLarge(f"the script's expansions make over {MAX_EXPANDED} bytes")
        return text


_BRACED = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]*)\])?(?:(:?[-=+])(.*))?\}", re.S)


def _expansion(text: str, scope: Scope, quoted: bool) -> list[str] | None:
    """An expansion's fields (one unless `${A[@]}` unquoted... or split later); None: unknown."""
    if text.startswith("${"):
        m = _BRACED.fullmatch(text)
        if m is None:
            return None
        length, name, index, op, default = m.groups()
        if index is not None:
            scalar = scope.values.get(name, None if scope.opaque else "")
            arr = scope.arrays.get(name, None if scalar is None else [scalar] if scalar else [])
            if arr is None:
                return None
            if index in ("@", "*"):
                if length:
                    return [str(len(arr))]
                return list(arr) if (index == "@" or not quoted) else [" ".join(arr)]
            if not index.isdigit():
                return None
            k = int(index)
            value: str | None = arr[k] if k < len(arr) else ""
        else:
            value = scope.get(name)
        if value is None:
            return None
        if length:
            return [str(len(value))]
        if op is not None:
            unset = name not in scope.values and name not in scope.arrays
            empty = unset or (op.startswith(":") and value == "")
            if op.endswith("+"):
                chosen = "" if empty else default
            else:
                chosen = default if empty else value
                if not empty:
                    return [value]
            if any(c in chosen for c in "$`\\'\""):
                return None
            if op.endswith("="):
                scope.values[name] = chosen
            return [chosen]
        return [value]
    if text.startswith(("$(", "`")) or text[1:2] in tuple("@*#?$!-0123456789"):
        return None
    value = scope.get(text[1:])
    return None if value is None else [value]


def expand_word(word: Word, scope: Scope) -> list[str]:
    """The fields of a word as bash makes them (no pathname expansion: `*` stays). A field that
    needs run time is marked with UNKNOWN (and counts as one field)."""
    ifs = scope.get("IFS")
    seps = " \t\n" if "IFS" not in scope.values else (ifs or "")
    fields: list[str] = []
    cur: list[str] = []
    have = False  # cur is a field even when empty (quoted text)
    for kind, text in word:
        if kind == LIT:
            cur.append(text)
            have = True
            continue
        got = _expansion(text, scope, kind == QVAR)
        if got is None:
            # Marked at both ends (the rest is known); unquoted, it may make no field, or several.
            cur.append(UNKNOWN + (SPLIT if kind == VAR else "") + text + UNKNOWN)
            have = True
            continue
        got = [scope.charge(g) for g in got]
        if kind == QVAR:
            for k, g in enumerate(got):
                if k:
                    fields.append("".join(cur))
                    cur = []
                cur.append(g)
            have = True
            continue
        for k, g in enumerate(got):
            pieces = _ifs_split(g, seps) if seps else [g]
            if k and (cur or have):
                fields.append("".join(cur))
                cur, have = [], False
            if not pieces:
                continue
            starts = bool(g) and g[0] in seps
            ends = bool(g) and g[-1] in seps
            if starts and (cur or have):
                fields.append("".join(cur))
                cur, have = [], False
            for p, piece in enumerate(pieces):
                if p:
                    fields.append("".join(cur))
                    cur = []
                cur.append(piece)
                have = True
            if ends:
                fields.append("".join(cur))
                cur, have = [], False
    if cur or have:
        fields.append("".join(cur))
    return fields


def _ifs_split(value: str, seps: str) -> list[str]:
    white = "".join(c for c in seps if c in " \t\n")
    hard = "".join(c for c in seps if c not in " \t\n")
    if not hard:
        return value.split() if white == " \t\n" else [p for p in re.split(f"[{re.escape(white)}]+", value) if p]
    text = value.strip(white) if white else value
    parts = re.split(f"[{re.escape(white)}]*[{re.escape(hard)}][{re.escape(white)}]*|[{re.escape(white)}]+"
                     if white else f"[{re.escape(hard)}]", text)  # fmt: skip
    if parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass
class Torchrun:
    """The torchrun command a script runs, as far as known before the pod runs."""

    args: list[str]  # its arguments; words known only at run time carry UNKNOWN
    env: dict[str, str]  # what the script exports or puts before the command (known values)
    unknown_env: set[str]  # names it sets to values known only at run time
    unset: set[str] = field(default_factory=set)  # names of the container's env it unsets


_COMPOUND_OPEN = {"if", "for", "while", "until", "case", "select", "{", "(", "function"}
_COMPOUND_CLOSE = {"fi", "done", "esac", "}", ")"}
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_PREFIXES = ("exec", "nohup", "time", "command", "builtin", "stdbuf")
_MODULE_RUN = ("torch.distributed.run", "torch.distributed.launch")


def _assignment(word: Word) -> tuple[str, bool, Word] | None:
    """NAME=value (NAME+=value): the name, append, and the value's parts."""
    if not word or word[0][0] != LIT:
        return None
    m = _ASSIGN.match(word[0][1])
    if not m:
        return None
    rest = word[0][1][m.end() :]
    return m.group(1), bool(m.group(2)), ([(LIT, rest)] if rest else []) + word[1:]


@dataclass
class Reading:
    """What a script runs: its first torchrun, and the programs it runs that the file does not
    hold (a script of the image's, or one the script fetches) before it."""

    torchrun: Torchrun | None = None
    programs: list[str] = field(default_factory=list)


_REDIRECT = re.compile(r"[0-9]*(<<<|<<-?|<>|>>|>\||<&|>&|&>>|&>|<|>)")


def read_script(script: str, env: Mapping[str, str], unknown: KubeletEnv | None = None) -> Reading:
    """The first torchrun (or `python -m torch.distributed.run`) the script runs, and the programs
    it runs before. `unknown`: the container's env as the kubelet builds it, for the names it
    declares whose values are known only at run time (a secret, the node's host name), which read
    as unknown, never as unset. Raises ValueError where the shell would refuse the script,
    TooLarge past the bound."""
    values: dict[str, str | None] = dict(env)
    scope = Scope(values=values, exported=set(env))
    if unknown is not None:
        for name in unknown.unknown - set(env):
            values[name] = None
            scope.exported.add(name)
        scope.opaque = unknown.env_from
        scope.maybe = lambda name: unknown.lookup(name) is None
    items = split_marked(script)
    reading = Reading()
    depth = 0
    i = 0
    while i < len(items):
        # One simple command: its words up to an operator that ends it; redirections skipped.
        words: list[Word] = []
        here: Word | None = None
        op = ""
        while i < len(items):
            item = items[i]
            i += 1
            if not isinstance(item, str):
                words.append(item)
                continue
            if item.startswith(("<", ">", "&>")) and _REDIRECT.fullmatch(item):
                if words and item.startswith(">&") and _literal(words[-1]) in ("0", "1", "2"):
                    words.pop()  # the `2` of `2>&1`
                target = items[i] if i < len(items) else None
                if not isinstance(target, str):
                    i += 1
                    if item == "<<<" and target is not None:
                        here = target
                continue
            op = item
            break
        if "(" in op and not words:
            depth += op.count("(")
        if not words:
            if ")" in op:
                depth = max(0, depth - op.count(")"))
            continue
        first = _literal(words[0])
        body = words[1:] if first in ("then", "do", "else", "elif", "{", "!") else words
        if body:
            found = _command(body, scope, depth, here, reading)
            if found is not None:
                reading.torchrun = found
                return reading
        if first in _COMPOUND_OPEN:
            depth += 1
        elif first in _COMPOUND_CLOSE:
            depth = max(0, depth - 1)
        if ")" in op:
            depth = max(0, depth - op.count(")"))
    return reading


def _literal(word: Word) -> str | None:
    return "".join(t for _, t in word) if all(k == LIT for k, _ in word) else None


def _command(words: list[Word], scope: Scope, depth: int, here: Word | None, reading: Reading) -> Torchrun | None:
    prefix: dict[str, str | None] = {}
    k = 0
    while k < len(words):
        a = _assignment(words[k])
        if a is None:
            break
        name, append, parts = a
        text = "".join(expand_word(parts, scope)) if parts else ""  # an assignment's value is not split
        old = scope.get(name) if append else ""
        prefix[name] = None if is_unknown(text) or depth or old is None else old + text
        k += 1
    rest = words[k:]
    if not rest:  # plain assignments: the shell's own variables
        for name, value in prefix.items():
            scope.values[name] = value
            scope.arrays.pop(name, None)
        return None
    head = _literal(rest[0])
    while head in _PREFIXES and len(rest) > 1:
        rest = rest[1:]
        head = _literal(rest[0])
    if head == "env":
        rest = rest[1:]
        while rest and (a := _assignment(rest[0])) is not None:
            fields = expand_word(a[2], scope) if a[2] else [""]
            text = "".join(fields)
            prefix[a[0]] = None if is_unknown(text) else text
            rest = rest[1:]
        head = _literal(rest[0]) if rest else None
    if head in ("export", "declare", "typeset", "local", "readonly"):
        for w in rest[1:]:
            a = _assignment(w)
            if a is not None:
                text = "".join(expand_word(a[2], scope)) if a[2] else ""
                scope.values[a[0]] = None if is_unknown(text) or depth else text
                scope.exported.add(a[0])
            elif (named := _literal(w)) is not None and _NAME.fullmatch(named):
                scope.exported.add(named)
        return None
    if head == "read":
        _read(rest[1:], prefix, scope, here, depth)
        return None
    if head in ("source", ".", "eval"):
        scope.opaque = True  # whatever it sets, known only at run time
        scope.values = dict.fromkeys(scope.values)
        scope.arrays = dict.fromkeys(scope.arrays)
        if head != "eval" and len(rest) > 1:
            reading.programs.append(" ".join(_show(w) for w in rest[:2]))
        return None
    if head in ("git", "curl", "wget") or (head or "").endswith("/git"):
        scope.fetched = True
    if head in _SHELLS and len(rest) > 1 and not (_literal(rest[1]) or "-").startswith("-"):
        reading.programs.append(" ".join(_show(w) for w in rest[:2]))
        return None
    if head is not None and (head.endswith(".sh") or (head.startswith("./") and "." not in head[2:])):
        reading.programs.append(head)
        return None
    if head in ("unset",):
        for w in rest[1:]:
            if (gone := _literal(w)) is not None and not gone.startswith("-"):
                scope.values.pop(gone, None)
                scope.arrays.pop(gone, None)
                scope.exported.discard(gone)
                scope.unset.add(gone)
        return None
    if head is not None and head.rsplit("/", 1)[-1] == "torchrun":
        return _found(rest[1:], prefix, scope)
    if head is not None and re.fullmatch(r"(.*/)?python[0-9.]*", head):
        for j in range(1, len(rest) - 1):
            if _literal(rest[j]) == "-m" and _literal(rest[j + 1]) in _MODULE_RUN:
                return _found(rest[j + 2 :], prefix, scope)
        if scope.fetched and len(rest) > 1:  # a program the script fetched (git clone, curl)
            reading.programs.append(" ".join(_show(w) for w in rest[:2]))
    if head in ("for", "select", "case") and len(rest) > 1 and (loop := _literal(rest[1])) is not None:
        scope.values[loop] = None  # a loop variable: each pass its own
        scope.arrays.pop(loop, None)
    return None


def _found(args: list[Word], prefix: dict[str, str | None], scope: Scope) -> Torchrun:
    out: list[str] = []
    for w in args:
        out += expand_word(w, scope)
    env = {n: v for n in scope.exported if isinstance(v := scope.values.get(n), str)}
    unknown = {n for n in scope.exported if n in scope.values and scope.values[n] is None}
    for name, value in prefix.items():
        if value is None:
            unknown.add(name)
            env.pop(name, None)
        else:
            env[name] = value
            unknown.discard(name)
    gone = {n for n in scope.unset if n not in scope.values and n not in prefix}
    return Torchrun(out, env, unknown, gone)


def _show(word: Word) -> str:
    return "".join(t for _, t in word)


_SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/env")


def _read(words: list[Word], prefix: dict[str, str | None], scope: Scope, here: Word | None, depth: int) -> None:
    """`read [-r] [-a NAME] [NAME...] <<< WORD`: the here-string split by IFS (the prefix's, if
    any) into an array or names."""
    names: list[str] = []
    array = ""
    j = 0
    while j < len(words):
        flag = _literal(words[j]) or ""
        if flag.startswith("-") and "a" in flag:
            array = _literal(words[j + 1]) or "" if flag.endswith("a") and j + 1 < len(words) else flag.split("a", 1)[1]
            j += 2 if flag.endswith("a") else 1
            continue
        if flag.startswith("-"):
            j += 1
            continue
        names.append(flag)
        j += 1
    value: str | None = None
    if here is not None:
        text = "".join(expand_word(here, scope))
        value = None if is_unknown(text) or depth else text
    ifs = prefix.get("IFS", scope.get("IFS") if "IFS" in scope.values else " \t\n")
    fields = None if value is None or ifs is None else _ifs_split(value, ifs)
    if array:
        scope.arrays[array] = fields
        scope.values.pop(array, None)
        return
    for k, name in enumerate(names):
        if fields is None or ifs is None:
            scope.values[name] = None
        elif k == len(names) - 1:
            scope.values[name] = " ".join(fields[k:]) if ifs.strip() == "" else (ifs[:1] or " ").join(fields[k:])
        else:
            scope.values[name] = fields[k] if k < len(fields) else ""
