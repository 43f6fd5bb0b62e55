"""Quoting per target format, so a value reaches a rendered file as one value: the way
jinja2's autoescape quotes for HTML, for the formats we write (Slurm's config files,
cron, systemd units, Lua).

A template's ``{{ value }}`` goes through :func:`finalizer` of its format: a value that
is already quoted for it (:class:`Quoted`, what the filters below return) passes as is;
any other value is quoted by the format's rule, or refused where the format has no
quoting for it (a newline in a Slurm or cron line ends the line: nothing can carry it).
Pure text functions: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote as url_quote

# Characters that end or split a line in one of our formats: the C0 controls (newline,
# carriage return, NUL, ...), DEL, and the Unicode line breaks some readers honour.
_BREAKING = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
TARGETS = ("slurm", "cron", "systemd", "lua")


class Quoted(str):
    """Text already quoted for the template's format: the finalizer leaves it alone."""


class UnsafeValue(ValueError):
    """A value the target format cannot hold (a newline in a Slurm line, say)."""

    def __init__(self, target: str, value: str, why: str) -> None:
        super().__init__(f"{value[:80]!r} cannot be written into a {target} file: {why}")
        self.target = target
        self.value = value
        self.why = why


def breaking_char(text: str) -> str | None:
    """The first character of ``text`` that would end or split a line, as ``\\xNN``; None if none."""
    m = _BREAKING.search(text)
    return None if m is None else _escape_char(m.group())


def _escape_char(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def comment(text: Any) -> Quoted:
    """``text`` made safe for one comment line in each of our formats: line breaks and
    other control characters shown as ``\\xNN``, and the backslash too (a line ending in
    one continues onto the next in Slurm's parser and in systemd's)."""
    s = str(text)
    return Quoted(re.sub(r"[\x00-\x1f\x7f\x85\u2028\u2029\\]", lambda m: _escape_char(m.group()), s))


def cron_command(argv: Sequence[str]) -> Quoted:
    """An argument list as a cron command: shell-quoted (cron runs it with /bin/sh), and
    every ``%`` escaped as ``\\%`` (cron turns an unescaped one into a newline and feeds
    the rest to the command's stdin; crontab(5)).  A newline has no escape there: refused."""
    for a in argv:
        bad = breaking_char(a)
        if bad:
            raise UnsafeValue("cron", a, f"it holds {bad}, and a cron command is one line")
    return Quoted(shlex.join(argv).replace("%", "\\%"))


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:+@,=-]+")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_word(arg: str) -> str:
    """One command-line word for ``ExecStart=`` (systemd.syntax(7), systemd.service(5)):
    plain when it holds only plain characters, else double-quoted with C escapes; ``%``
    doubled (a specifier) and ``$`` doubled (a variable)."""
    if _SYSTEMD_PLAIN.fullmatch(arg):
        return arg
    out = []
    for c in arg:
        if c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        elif _BREAKING.fullmatch(c):  # U+0085, U+2028, U+2029: as code points (\\x would be one byte)
            out.append(f"\\u{ord(c):04x}")
        elif c == "%":
            out.append("%%")
        elif c == "$":
            out.append("$$")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def systemd_command(argv: Sequence[str]) -> Quoted:
    """An argument list as the value of ``ExecStart=``, each word quoted by :func:`systemd_word`."""
    return Quoted(" ".join(systemd_word(a) for a in argv))


def systemd_value(text: Any) -> str:
    """A setting's value in a unit file: ``%`` doubled (systemd expands specifiers in most
    settings); a line break refused (a value is one line)."""
    s = str(text)
    bad = breaking_char(s)
    if bad:
        raise UnsafeValue("systemd", s, f"it holds {bad}, and a unit setting is one line")
    return s.replace("%", "%%")


def file_url(path: str) -> Quoted:
    """``file://`` URL of a path, percent-encoded (a space would split systemd's
    ``Documentation=`` list), then with ``%`` doubled for systemd's specifiers."""
    return Quoted(("file://" + url_quote(path, safe="/")).replace("%", "%%"))


def lua_string(text: str) -> str:
    """A Lua 5.1 string literal of ``text``: printable ASCII as is, ``"`` and ``\\``
    escaped, every other byte of its UTF-8 as a three-digit ``\\ddd`` escape (the only
    numeric escape Lua 5.1 reads; ``\\u`` is not one)."""
    out = ['"']
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.extend(f"\\{b:03d}" for b in c.encode("utf-8", "surrogatepass"))
    out.append('"')
    return "".join(out)


def _refuse_breaks(target: str) -> Callable[[Any], Any]:
    def finalize(value: Any) -> Any:
        if isinstance(value, Quoted) or value is None or isinstance(value, bool | int | float):
            return value
        s = str(value)
        bad = breaking_char(s)
        if bad:
            raise UnsafeValue(target, s, f"it holds {bad}, which would end the line")
        return value

    return finalize


def _systemd_finalize(value: Any) -> Any:
    if isinstance(value, Quoted) or value is None or isinstance(value, bool | int | float):
        return value
    return systemd_value(value)


def finalizer(target: str) -> Callable[[Any], Any]:
    """jinja2's ``finalize`` for a template of ``target`` (one of :data:`TARGETS`)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target format {target!r}")
    return _systemd_finalize if target == "systemd" else _refuse_breaks(target)
