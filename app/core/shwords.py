"""Split an `sh -c` script into words and operators exactly as
`shlex.shlex(script, posix=True, punctuation_chars=True)` with `whitespace_split = True` does,
about 10x faster: shlex reads one character per call through a StringIO, and the scripts of
launcher templates (line continuations, `$(...)`, quotes) made it a third of an admission's
time. Same quirks on purpose, since the property test compares the two on random scripts:
`#` starts a comment even inside a word, a backslash-newline outside quotes is a newline word.
Raises ValueError on an unclosed quote or a trailing backslash, as shlex does.
"""

from __future__ import annotations

import re

_WS = " \t\r\n"
_PUNCT = "();<>|&"
# A run of characters that only extends the current word (state "a" in shlex).
_WORD_RUN = re.compile(r"[^ \t\r\n#'\"\\();<>|&]+")
_PUNCT_RUN = re.compile(r"[();<>|&]+")
_DQ_RUN = re.compile(r'[^"\\]+')
# Scripts without quotes, escapes or comments: words and punctuation runs, one regex.
_SPECIAL = re.compile(r"[\"'\\#]")
_PLAIN = re.compile(r"[();<>|&]+|[^ \t\r\n();<>|&]+")


# Scripts already split, by their text: every pod of a job carries its template's script, so
# all but the first are a lookup (the launchers' scripts cost ~10 us to split). Bounded in
# entries (a full cache is emptied, never grown) and in what one entry may hold: a script is
# user input, and may be a megabyte.
_SPLIT: dict[str, tuple[str, ...]] = {}
_SPLIT_MAX = 256
_SPLIT_MAX_LENGTH = 8192


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
    end = s.find("\n", i)
    return len(s) if end < 0 else end + 1


def _split(s: str) -> list[str]:
    words: list[str] = []
    n = len(s)
    i = 0
    while i < n:
        ch = s[i]
        # Between words (shlex state " ").
        if ch in _WS:
            i += 1
            continue
        if ch == "#":
            i = _skip_comment(s, i)
            continue
        if ch in _PUNCT:
            m = _PUNCT_RUN.match(s, i)
            assert m is not None
            # A punctuation run ends at a comment, which ends the line too.
            words.append(m.group())
            i = m.end()
            if i < n and s[i] == "#":
                i = _skip_comment(s, i)
            continue
        # A word (shlex state "a"): runs, quotes and escapes until whitespace, punctuation or #.
        parts: list[str] = []
        quoted = False
        while i < n:
            ch = s[i]
            if ch == "'":
                quoted = True
                end = s.find("'", i + 1)
                if end < 0:
                    raise ValueError("No closing quotation")
                parts.append(s[i + 1 : end])
                i = end + 1
            elif ch == '"':
                quoted = True
                i += 1
                while True:
                    if i >= n:
                        raise ValueError("No closing quotation")
                    c = s[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\":
                        if i + 1 >= n:
                            raise ValueError("No escaped character")
                        nxt = s[i + 1]
                        # Inside double quotes only the quote and the backslash are escaped.
                        parts.append(nxt if nxt in '"\\' else "\\" + nxt)
                        i += 2
                        continue
                    m = _DQ_RUN.match(s, i)
                    assert m is not None
                    parts.append(m.group())
                    i = m.end()
            elif ch == "\\":
                if i + 1 >= n:
                    raise ValueError("No escaped character")
                parts.append(s[i + 1])
                i += 2
            elif ch in _WS:
                break
            elif ch == "#":
                i = _skip_comment(s, i)
                break
            elif ch in _PUNCT:
                break
            else:
                m = _WORD_RUN.match(s, i)
                assert m is not None
                parts.append(m.group())
                i = m.end()
        word = "".join(parts)
        if word or quoted:
            words.append(word)
    return words
