"""Text from elsewhere, written where a shell or a reader meets it: one line, quoted.

A folder name, a hint or a path may hold a newline, a carriage return or a Unicode
line separator. Written as it is into a `#` comment, a command tuneup prints or an
export, it ends that line, and what follows becomes a line of its own: a command in a
job script, a key in a YAML file. Everything tuneup writes from such text goes
through here. Pure.
"""

from __future__ import annotations

import shlex
import unicodedata

# Control characters (C0, DEL, C1), format characters (bidirectional overrides, which
# make a line read other than it runs), line and paragraph separators, surrogates.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "'": "\\'"}


def is_unsafe(char: str) -> bool:
    """Whether `char` may end a line or hide what a line does."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def unsafe_character(text: str, allow: str = "") -> str | None:
    """The first control, format or line-separator character of `text` (as Python
    escapes it, e.g. '\\n'), or None when it has none; `allow` lists characters let by."""
    for char in text:
        if char not in allow and is_unsafe(char):
            return repr(char)[1:-1]
    return None


def one_line(text: str) -> str:
    """`text` with every unsafe character written as its escape: safe in a comment, a
    message or a Markdown line."""
    if unsafe_character(text) is None:
        return text
    return "".join(repr(c)[1:-1] if is_unsafe(c) else c for c in text)


def shell_word(text: str) -> str:
    """`text` as one word a shell reads back as `text`, on one line.

    `shlex.quote` keeps a newline inside its quotes, which splits a comment or a
    printed command; such text is written in bash's ANSI-C form ($'...') instead.
    """
    if unsafe_character(text) is None:
        return shlex.quote(text)
    body = "".join(_ESCAPES.get(c) or (_escape(c) if is_unsafe(c) else c) for c in text)
    return f"$'{body}'"


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x80:  # bash reads \xHH as a byte: above 0x7f, the character's code
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
