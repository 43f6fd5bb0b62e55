"""Strict validation of decoded YAML: every error names the file and the key path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_gpupool.errors import ConfigError

_TYPE_NAMES = {int: "an integer", str: "a string", dict: "a mapping", list: "a list", bool: "true/false"}


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in typ)
    return _TYPE_NAMES.get(typ, typ.__name__)


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
        return val

    def require(self, d: dict, k: str, typ: type | tuple[type, ...]) -> Any:
        if k not in d:
            raise self.key(k).error("required key is missing")
        return self.key(k).check_type(d[k], typ)

    def optional(self, d: dict, k: str, typ: type | tuple[type, ...], default: Any = None) -> Any:
        if k not in d or d[k] is None:
            return default
        return self.key(k).check_type(d[k], typ)

    def only_keys(self, d: dict, allowed: set[str]) -> None:
        for k in d:
            if k not in allowed:
                raise self.key(k).error("unknown key", hint="allowed here: " + ", ".join(sorted(allowed)))
