"""Split an `sh -c` script into the words and operators the shell reads, as bash does for what
launchers' manifests and tutorials write (checked against real bash by a differential test):
blanks (space, tab) separate words; a newline ends a command (an operator word "\\n"); runs of
`;&|()<>` are operator words; `#` at the start of a word starts a comment; a backslash-newline
is removed (a line continuation: `torchrun \\` then one flag a line), any other backslash quotes
the next character; single quotes are literal; inside double quotes a backslash quotes only
`$`, a backquote, `"`, `\\` and a newline.

Expansions are the shell's at run time: a `$(...)` (nested, with quotes inside), a backquoted
command, `${...}` and `$VAR` stay in the word as written, so the word reads as decided at run time
(a `$` in it), never cut at a space or a quote inside them. Raises ValueError on an unclosed
quote or substitution: the shell would refuse the script too.
"""

from __future__ import annotations

import re

_BLANKS = " \t"
_OPERATORS = "();<>|&"
# Characters that only extend the current word.
_WORD_RUN = re.compile(r"[^ \t\n#'\"\\();<>|&$`]+")
_OPERATOR_RUN = re.compile(r"[();<>|&]+")
_DQ_RUN = re.compile(r'[^"\\$`]+')
# Scripts without quotes, escapes, expansions or comments: words, operator runs and newlines.
_SPECIAL = re.compile(r"[\"'\\#$`]")
_PLAIN = re.compile(r"[();<>|&]+|\n|[^ \t\n();<>|&]+")

# Scripts already split, by their text: every pod of a job carries its template's script, so
# all but the first are a lookup (splitting a launcher's script costs more). Bounded in
# entries (a full cache is emptied, never grown) and in what one entry may hold: a script is
# user input, and may be a megabyte.
_SPLIT: dict[str, tuple[str, ...]] = {}
_SPLIT_MAX = 256
_SPLIT_MAX_LENGTH = 8192

NEWLINE = "\n"  # the operator word of an unquoted newline: the end of a command


def split(script: str) -> list[str]:
    known = _SPLIT.get(script)
    if known is not None:
        return list(known)
    words = _PLAIN.findall(script) if not _SPECIAL.search(script) else _split(script)
    if len(script) <= _SPLIT_MAX_LENGTH:
        if len(_SPLIT) >= _SPLIT_MAX:
            _SPLIT.clear()
        _SPLIT[script] = tuple(words)
    return words


def _skip_comment(s: str, i: int) -> int:
    """The index of the newline that ends the comment at i (kept: it ends the command)."""
    end = s.find("\n", i)
    return len(s) if end < 0 else end


def _closing_quote(s: str, i: int) -> int:
    """The index after the single-quoted string that starts at i."""
    end = s.find("'", i + 1)
    if end < 0:
        raise ValueError("No closing quotation")
    return end + 1


def _expands_at(s: str, i: int) -> bool:
    """Whether an expansion the shell runs starts at i: `$(`, `${` or a backquote."""
    return s[i] == "`" or (s[i] == "$" and i + 1 < len(s) and s[i + 1] in "({")


_CLOSERS = {"(": ")", "{": "}"}
_UNCLOSED = {"(": "No closing parenthesis", "{": "No closing brace", "`": "No closing backquote",
             '"': "No closing quotation"}  # fmt: skip


def _expansion_end(s: str, i: int) -> int:
    """The index after the expansion that starts at i: `$(...)` (and `$((...))`), `${...}` or a
    backquoted command, with quotes and expansions nested inside. One pass with a stack of what
    is open, never a recursion: a tenant's script may nest `$(` 20,000 deep."""
    n = len(s)
    stack = ["`"] if s[i] == "`" else [s[i + 1]]
    j = i + 1 if s[i] == "`" else i + 2
    while stack:
        if j >= n:
            raise ValueError(_UNCLOSED[stack[-1]])
        c, top = s[j], stack[-1]
        if c == "\\":
            j += 2
        elif top == "`":
            if c == "`":
                stack.pop()
            j += 1
        elif top != '"' and c == "'":
            j = _closing_quote(s, j)
        elif _expands_at(s, j):
            stack.append("`" if c == "`" else s[j + 1])
            j += 1 if c == "`" else 2
        elif top == '"':
            if c == '"':
                stack.pop()
            j += 1
        else:  # inside ( or {: quotes open, the same bracket nests, its closer closes
            if c == '"' or c == top:
                stack.append(c)
            elif c == _CLOSERS[top]:
                stack.pop()
            j += 1
    return j


def _split(s: str) -> list[str]:
    words: list[str] = []
    n = len(s)
    i = 0
    while i < n:
        ch = s[i]
        if ch in _BLANKS:
            i += 1
            continue
        if ch == "\n":
            words.append(NEWLINE)
            i += 1
            continue
        if ch == "#":
            i = _skip_comment(s, i)
            continue
        if ch == "\\" and s.startswith("\\\n", i):  # a continuation between words
            i += 2
            continue
        if ch in _OPERATORS:
            m = _OPERATOR_RUN.match(s, i)
            assert m is not None
            words.append(m.group())
            i = m.end()
            continue
        # A word: runs, quotes, escapes and expansions until a blank, newline or operator.
        parts: list[str] = []
        while i < n:
            ch = s[i]
            if ch == "'":
                end = _closing_quote(s, i)
                parts.append(s[i + 1 : end - 1])
                i = end
            elif ch == '"':
                i = _double(s, i, parts)
            elif ch == "\\":
                if i + 1 >= n:  # a backslash that ends the script is itself, as in bash
                    parts.append(ch)
                    i += 1
                    continue
                if s[i + 1] != "\n":  # a backslash-newline joins the lines
                    parts.append(s[i + 1])
                i += 2
            elif _expands_at(s, i):
                end = _expansion_end(s, i)
                parts.append(s[i:end])
                i = end
            elif ch in _BLANKS or ch == "\n" or ch in _OPERATORS:
                break
            elif ch in "#$":  # inside a word, `#` is a character; a `$` not opening ( or {
                parts.append(ch)
                i += 1
            else:
                m = _WORD_RUN.match(s, i)
                assert m is not None
                parts.append(m.group())
                i = m.end()
        words.append("".join(parts))
    return words


def _double(s: str, i: int, parts: list[str]) -> int:
    """Append the double-quoted string at i as the shell reads it; the index after it."""
    i += 1
    n = len(s)
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
            if nxt == "\n":
                pass  # removed
            elif nxt in '$`"\\':
                parts.append(nxt)
            else:
                parts.append("\\" + nxt)
            i += 2
        elif _expands_at(s, i):
            end = _expansion_end(s, i)
            parts.append(s[i:end])
            i = end
        elif c == "$":
            parts.append(c)
            i += 1
        else:
            m = _DQ_RUN.match(s, i)
            assert m is not None
            parts.append(m.group())
            i = m.end()
