"""Strict validation of decoded YAML: every error names the file and the key path."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from slurm_gpupool.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

_TYPE_NAMES = {int: "an integer", str: "a string", dict: "a mapping", list: "a list", bool: "true/false"}


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in typ)
    return _TYPE_NAMES.get(typ, typ.__name__)


def preview(val: Any, width: int = 60) -> str:
    """A short text of any YAML value for a message, never longer than ``width`` and never
    walking a collection (1 KB of aliases can stand for a billion nodes): a string or a
    number as its repr, cut; a collection as its kind."""
    if isinstance(val, str):
        return repr(val[:width])
    if isinstance(val, int) and not isinstance(val, bool) and val.bit_length() > 64:
        return f"an integer of {val.bit_length()} bits"
    if isinstance(val, bool | int | float) or val is None:
        return repr(val)[:width]
    return _actual(val)


def _actual(val: Any) -> str:
    return {bool: "true/false", int: "an integer", str: "a string", dict: "a mapping", list: "a list"}.get(
        type(val), "nothing" if val is None else type(val).__name__
    )


@dataclass(frozen=True)
class Where:
    """A position in a document: ``source`` (file) and dotted ``path``."""

    source: str
    path: str = ""

    def key(self, k: Any) -> Where:
        k = str(k)
        if "." in k or " " in k:
            k = f"[{k}]"
            return Where(self.source, f"{self.path}{k}")
        return Where(self.source, f"{self.path}.{k}" if self.path else k)

    def index(self, i: int) -> Where:
        return Where(self.source, f"{self.path}[{i}]")

    def error(self, why: str, hint: str | None = None) -> ConfigError:
        return ConfigError(self.source, self.path, why, hint)

    def check_type(self, val: Any, typ: type | tuple[type, ...]) -> Any:
        ok = isinstance(val, typ) and not (isinstance(val, bool) and typ in (int, (int, str)))
        if not ok:
            raise self.error(f"expected {_type_name(typ)}, got {_actual(val)}")
        if isinstance(val, float) and not math.isfinite(val):
            raise self.error(f"expected a finite number, got {val}")
        return val

    def require(self, d: dict, k: str, typ: type | tuple[type, ...]) -> Any:
        if k not in d:
            raise self.key(k).error("required key is missing")
        return self.key(k).check_type(d[k], typ)

    def optional(self, d: dict, k: str, typ: type | tuple[type, ...], default: Any = None) -> Any:
        if k not in d or d[k] is None:
            return default
        return self.key(k).check_type(d[k], typ)

    def check_name(self, val: Any, what: str) -> str:
        """A name that ends up in Slurm's files, features or reservation names: letters,
        digits, '.', '_', '-' (no space, '=', newline or ',' that would add a key or line)."""
        if not isinstance(val, str) or not NAME.fullmatch(val):
            raise self.error(
                f"{what} {preview(val, 70)} is not a name: letters, digits, '.', '_' or '-', at most 64",
            )
        return val

    def only_keys(self, d: dict, allowed: set[str]) -> None:
        for k in d:
            if k not in allowed:
                raise self.key(k).error("unknown key", hint="allowed here: " + ", ".join(sorted(allowed)))


MAX_DEPTH = 32  # no config, machine or mig-parted file nests deeper
MAX_BYTES = 16 << 20


def load_yaml(path: Any, what: str = "", documents: bool = False) -> Any:
    """A YAML file as plain data, or a ConfigError naming the file, the line and why.

    Stricter than ``yaml.safe_load``: the file must be UTF-8 text; a key written twice
    in one mapping is an error (YAML would silently keep the second); keys must be
    strings, numbers or booleans; nesting deeper than ``MAX_DEPTH`` is refused (a
    1,000-deep list otherwise ends in a RecursionError)."""
    source = str(path)
    try:
        data = _read_bounded(path, MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(source, "", f"cannot read{what}: {e.strerror}") from None
    if data is None:
        raise ConfigError(
            source, "", f"a FIFO or pipe that gave nothing (no writer within {FIFO_WAIT_S:g} s): cannot read{what}"
        )
    if len(data) > MAX_BYTES:
        raise ConfigError(source, "", f"larger than {MAX_BYTES >> 20} MiB: not a config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(source, f"line {line}", f"not UTF-8 text (byte 0x{data[e.start]:02x})") from None
    return parse_yaml(text, source, documents)


def _read_bounded(path: Any, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a file, without waiting forever for a writer that never comes.

    ``open`` of a FIFO waits until something opens it to write, so a FIFO left where a
    config goes (or named by mistake) hung the command.  It is opened ``O_NONBLOCK``: a pipe
    or FIFO a writer holds open (``--config <(generate)``) is then read as it comes,
    blocking again; one that gives nothing and has no writer within ``FIFO_WAIT_S`` (a
    writer may open it just after us) gives None.  A writer that holds it open and never
    writes still blocks the read, as it would ``cat``."""
    import os
    import select
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            for _ in range(round(FIFO_WAIT_S / FIFO_STEP_S)):
                try:
                    first = os.read(fd, READ_CHUNK)
                except BlockingIOError:  # a writer holds it open and has not written yet
                    break
                if first:
                    chunks.append(first)
                    break
                select.select([], [], [], FIFO_STEP_S)  # end of file, no writer yet: a pause (no clock here)
            else:
                return None  # nothing opened it to write
        os.set_blocking(fd, True)
        size = sum(map(len, chunks))
        while size < limit and (chunk := os.read(fd, min(READ_CHUNK, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


FIFO_WAIT_S = 1.0  # how long a FIFO with no writer is given one before it is refused
FIFO_STEP_S = 0.05
READ_CHUNK = 1 << 20


def parse_yaml(text: str, source: str, documents: bool = False) -> Any:
    """YAML text as plain data (see :func:`load_yaml`); ``documents``: the list of every
    document of a multi-document stream (``---``), as Kubernetes manifests are."""
    import yaml

    loader = _strict_loader_class()(text, source)
    try:
        return loader.get_documents_checked() if documents else loader.get_single_data_checked()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(source, where, f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise ConfigError(source, "", f"nested too deeply (more than {MAX_DEPTH} levels)") from None


@cache
def _strict_loader_class() -> Any:
    """Built on first use, so importing this module does not import yaml."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it

    class StrictLoader(base):
        def __init__(self, text: str, source: str) -> None:
            super().__init__(text)
            self.source = source
            self._open: set[int] = set()  # the nodes being walked: one seen again holds itself

        def get_single_data_checked(self) -> Any:
            try:
                node = self.get_single_node()
                if node is None:
                    return None
                self._check_depth(node, 0)
                return self.construct_document(node)
            finally:
                self.dispose()

        def get_documents_checked(self) -> list[Any]:
            try:
                docs = []
                while self.check_node():
                    node = self.get_node()
                    self._check_depth(node, 0)
                    docs.append(self.construct_document(node))
                return docs
            finally:
                self.dispose()

        def _check_depth(self, node: Any, depth: int, seen: dict[int, int] | None = None) -> int:
            """The node's height (0 for a scalar); ConfigError if it ends deeper than
            MAX_DEPTH or holds itself.  A node shared through aliases is walked once
            (``seen``: id → height), so 1 KB of nested aliases that stands for a billion
            nodes costs as much as its text (it took 45 s and more)."""
            seen = {} if seen is None else seen
            key = id(node)
            height = seen.get(key)
            if height is None:
                if key in self._open:
                    line = node.start_mark.line + 1
                    raise ConfigError(self.source, f"line {line}", "an alias inside its own anchor: endless nesting")
                if depth > MAX_DEPTH:
                    self._too_deep(node)
                children: list[Any] = []
                if isinstance(node, yaml.MappingNode):
                    children = [x for kv in node.value for x in kv]
                elif isinstance(node, yaml.SequenceNode):
                    children = list(node.value)
                self._open.add(key)
                try:
                    height = 1 + max((self._check_depth(c, depth + 1, seen) for c in children), default=-1)
                finally:
                    self._open.discard(key)
                seen[key] = height
            if depth + height > MAX_DEPTH:
                self._too_deep(node)
            return height

        def _too_deep(self, node: Any) -> None:
            line = node.start_mark.line + 1
            raise ConfigError(self.source, f"line {line}", f"nested too deeply (more than {MAX_DEPTH} levels)")

        def construct_yaml_int(self, node: Any) -> int:
            """An integer of at most 64 bits: no setting needs more, and a longer one is
            damage (Python refuses to read one of over 4,300 digits at all)."""
            try:
                value = super().construct_yaml_int(node)
            except ValueError:
                value = None
            if value is None or abs(value) >= 1 << 64:
                raise ConfigError(
                    self.source,
                    f"line {node.start_mark.line + 1}",
                    f"{str(node.value)[:30]}...: an integer beyond 64 bits",
                )
            return int(value)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str | int | float | bool) and key is not None:
                    raise ConfigError(
                        self.source,
                        f"line {key_node.start_mark.line + 1}",
                        f"a key must be a name, not {preview(key, 40)}",
                    )
                if key in seen:
                    raise ConfigError(
                        self.source,
                        f"line {key_node.start_mark.line + 1}",
                        f"key {preview(key)} is written twice in one mapping (first on line {seen[key]})",
                    )
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader
