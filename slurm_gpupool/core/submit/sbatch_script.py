"""A batch script's ``#SBATCH`` lines, read as sbatch reads them, on bytes (pure).

A script is bytes, and passes through gpupool-sbatch byte for byte: it is never
decoded as a whole.  sbatch (src/sbatch/opt.c ``_opt_batch_script``) reads lines
split at ``\\n``; a line that starts with ``#SBATCH`` (or the old ``#SLURM``) holds
options; it stops at the first line whose first non-blank character is not ``#``.
``#SBATCH hetjob`` (or ``packjob``, any case) starts the next component.  Words are
cut by ``get_argument``: blanks separate them, ``'`` and ``"`` group, a backslash
takes the next character as it is (from 24.05 a backslash-blank is a blank inside the
word; before, the word ends there), and an unquoted ``#`` ends the line.  The words
of a component go through getopt like a command line; one that is not an option
makes sbatch refuse the script ("Invalid directive").

Words are handed to the option parser as ``str`` decoded with ``surrogateescape``
(as Python does for argv), so they encode back to the same bytes.
"""

from __future__ import annotations

from slurm_gpupool.core.submit.sbatch_args import ERROR, OptionTable, SbatchArgs, getopt, release_key, table_for

MAGIC = (b"#SBATCH", b"#SLURM")
SPACE = b" \t\n\v\f\r"  # C isspace() in the C locale
HET_WORDS = (b"hetjob", b"packjob")
MAX_SCRIPT_BYTES = 512 * 1024 * 1024  # sbatch's MAX_BATCH_SCRIPT_SIZE (src/common/read_config.h, 23.02+)


class Word:
    """A word of a directive line: its text and where it is in the script (byte offsets)."""

    __slots__ = ("end", "line", "start", "text")

    def __init__(self, text: bytes, line: int, start: int, end: int) -> None:
        self.text, self.line, self.start, self.end = text, line, start, end


class Directives:
    """The words of each component's ``#SBATCH`` lines, with the lines they are on."""

    __slots__ = ("components", "errors", "lines")

    def __init__(self) -> None:
        self.components: list[list[Word]] = [[]]
        self.lines: dict[int, tuple[int, int]] = {}  # line number -> (start, end) in the script
        self.errors: list[str] = []

    def words(self, component: int = 0) -> list[str]:
        if component >= len(self.components):
            return []
        return [w.text.decode("utf-8", "surrogateescape") for w in self.components[component]]


def _het_word(body: bytes, k: int) -> int:
    """The length of ``hetjob``/``packjob`` at ``body[k:]`` when a blank or the end follows, else 0."""
    for word in HET_WORDS:
        n = len(word)
        if body[k : k + n].lower() == word and (k + n == len(body) or body[k + n] in SPACE):
            return n
    return 0


def _arguments(body: bytes, release: str) -> tuple[list[tuple[bytes, int, int]], str | None]:
    """get_argument over one line's text after the magic word: (word, start, end) each,
    and the error sbatch stops at (an unmatched quote, a word starting with ':').  A word
    that comes out empty (``''``, a lone backslash, a blanked ``hetjob``) or a ``#`` ends
    the line, as get_argument's NULL does."""
    blank_escape = release_key(release) >= (24, 5)  # a backslash-blank is a blank in the word
    out: list[tuple[bytes, int, int]] = []
    k, n = 0, len(body)
    while True:
        while k < n and body[k] in SPACE:
            k += 1
        if _het_word(body, k):
            return out, None
        if body[k : k + 1] == b":":
            return out, "Unexpected `:`"
        if k >= n:
            return out, None
        start, word, quote, escape = k, bytearray(), 0, False
        while k < n and (quote or body[k] not in SPACE) and body[k] != 0x0A:
            c = body[k]
            if escape:
                escape = False
            elif c == 0x5C:  # backslash
                k += 1
                if blank_escape and body[k : k + 1] == b" ":
                    word.append(0x20)
                    k += 1
                else:
                    escape = True
                continue
            elif quote:
                if c == quote:
                    quote = 0
                    k += 1
                    continue
            elif c in (0x22, 0x27):  # " '
                quote = c
                k += 1
                continue
            elif c == 0x23:  # '#': the rest of the line is a comment
                break
            word.append(c)
            k += 1
        if quote:
            return out, f"Unmatched `{chr(quote)}`"
        if not word:
            return out, None
        out.append((bytes(word), start, k))


def read_directives(script: bytes, release: str = "22.05") -> Directives:
    """Every ``#SBATCH`` word of the script, by component, as sbatch ``release`` reads them."""
    out = Directives()
    pos, lineno = 0, 0
    size = len(script)
    while pos < size:
        nl = script.find(b"\n", pos)
        end = size if nl < 0 else nl
        line = script[pos:end].split(b"\0", 1)[0]  # C strings end at a NUL
        start = pos
        pos = end + 1
        lineno += 1
        magic = next((m for m in MAGIC if line.startswith(m)), None)
        if magic is None:
            text = line.lstrip(SPACE)
            if text and not text.startswith(b"#"):
                break  # the first command: sbatch reads no further
            continue
        body = line[len(magic) :]
        lead = len(body) - len(body.lstrip(SPACE))
        if _het_word(body, lead):
            out.components.append([])
        words, error = _arguments(body, release)
        if error:
            out.errors.append(f"line {lineno}: {error}")
        offset = start + len(magic)
        out.lines[lineno] = (start, end)
        out.components[-1] += [Word(w, lineno, offset + s, offset + e) for w, s, e in words]
    return out


def directive_args(
    script: bytes, table: OptionTable | None = None, component: int = 0, ours: dict[str, int] | None = None
) -> SbatchArgs:
    """A component's ``#SBATCH`` options as parsed options (``argv``: the words)."""
    tbl = table or table_for()
    d = read_directives(script, tbl.release)
    words = d.words(component)
    out = SbatchArgs(words, tbl)
    opts, optind = getopt(words, 0, tbl, ours)
    out.options = [o for o in opts if o.name != ERROR]
    out.errors = d.errors + [o.value or "" for o in opts if o.name == ERROR]
    if optind < len(words):
        out.errors.append(f"Invalid directive found in batch script: {words[optind]}")
    return out


def parse_directives(script: str | bytes, table: OptionTable | None = None) -> list[str]:
    """The words of the first component's ``#SBATCH`` lines."""
    raw = script.encode("utf-8", "surrogateescape") if isinstance(script, str) else script
    return read_directives(raw, (table or table_for()).release).words(0)


def strip_ours(script: bytes, table: OptionTable, ours: dict[str, int]) -> bytes:
    """The script with our options taken out of its ``#SBATCH`` lines (sbatch would refuse
    them): each changed line is kept, as it was, in a ``#gpupool-sbatch:`` comment, followed
    by an ``#SBATCH`` line with its other words exactly as typed.  Every other byte stays."""
    d = read_directives(script, table.release)
    cut: dict[int, list[tuple[int, int]]] = {}  # line -> byte ranges to remove
    for comp in d.components:
        words = [w.text.decode("utf-8", "surrogateescape") for w in comp]
        opts, _ = getopt(words, 0, table, ours)
        for o in opts:
            if not o.ours:
                continue
            for k in range(o.start, o.end):
                w = comp[k]
                same_line = [x for x in comp if x.line == w.line]
                i = same_line.index(w)
                if i > 0:  # with the blanks before it
                    cut.setdefault(w.line, []).append((same_line[i - 1].end, w.end))
                elif i + 1 < len(same_line):  # the line's first word: with the blanks after it
                    cut.setdefault(w.line, []).append((w.start, same_line[i + 1].start))
                else:
                    cut.setdefault(w.line, []).append((w.start, w.end))
    if not cut:
        return script
    out = bytearray()
    pos = 0
    for lineno in sorted(cut):
        start, end = d.lines[lineno]
        out += script[pos:start]
        line = script[start:end]
        kept = bytearray(line)
        for a, b in sorted(set(cut[lineno]), reverse=True):
            del kept[a - start : b - start]
        others = [w for comp in d.components for w in comp if w.line == lineno]
        left = [w for w in others if not any(a <= w.start and w.end <= b for a, b in cut[lineno])]
        out += b"#gpupool-sbatch: " + line
        if left:
            out += b"\n" + bytes(kept)
        pos = end
    out += script[pos:]
    return bytes(out)


def components_with_ours(script: bytes, table: OptionTable, ours: dict[str, int]) -> set[int]:
    """The components whose ``#SBATCH`` lines hold one of ``ours``."""
    d = read_directives(script, table.release)
    out = set()
    for k, comp in enumerate(d.components):
        words = [w.text.decode("utf-8", "surrogateescape") for w in comp]
        if any(o.ours for o in getopt(words, 0, table, ours)[0]):
            out.add(k)
    return out
