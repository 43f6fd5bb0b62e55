"""Prometheus text exposition read back by the tests: an independent reader, not the product's writer."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Exposition text → {(name, labels): value} (an independent reader for the tests)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def series(samples: dict[tuple[str, frozenset], float], name: str) -> list[tuple[dict[str, str], float]]:
    """Each series of ``name`` in :func:`parse`'s samples: (its labels, its value)."""
    return [(dict(labels), v) for (n, labels), v in samples.items() if n == name]
