"""sbatch's command line, read exactly as sbatch reads it (pure).

sbatch parses with glibc's ``getopt_long`` and the option table of its release
(``sbatch_tables``, recorded from the real sbatch): long options are matched whole
or by an unambiguous prefix (``--partit``), take a value after ``=`` or in the next
word (``--exclude a100n1``) when they require one and only after ``=`` when it is
optional; short options cluster (``-HN1``, ``-xa100n1``); the option string starts
with ``+``, so options end at the first non-option (the script) or after ``--``.

It reads the command line twice (src/sbatch/opt.c):

* first pass: every word but the lone ``:`` separators, all components at once: it
  finds the script (the first non-option) and ``--wrap`` wherever it is, and stops
  at ``--help``/``--usage``/``--version``, which print and exit;
* second pass: each heterogeneous-job component in turn, from one ``:`` to the next:
  the options that make each component's job.

A getopt error (unknown, ambiguous, a value missing or not allowed) makes sbatch
refuse the command line; :func:`parse` records it in ``errors``.  Our own options
(``ours``) are recognised by their exact names only, before sbatch's table: none of
them is a prefix of an sbatch option, so no abbreviation sbatch takes changes.
"""

from __future__ import annotations

from slurm_gpupool.core.submit.sbatch_tables import TABLES

TYPE_CHECKING = False  # not typing's: the wrapper runs on every submission
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_RELEASE = "22.05"  # the oldest we support: the table when nothing says which sbatch runs
EXITS = frozenset({"help", "usage", "version", "autocomplete"})  # the first pass runs them: print, exit 0


class OptionTable:
    """One release's getopt table: short options and their argument, long options."""

    __slots__ = ("long", "name_of", "release", "short", "version")

    def __init__(self, release: str, version: str, optstring: str, longs: tuple[tuple[str, int, int], ...]) -> None:
        self.release, self.version = release, version
        self.long = longs
        self.short: dict[str, int] = {}  # char -> 0 no argument, 1 required, 2 optional
        body = optstring.lstrip("+")
        i = 0
        while i < len(body):
            c, n = body[i], 0
            while body[i + 1 + n : i + 2 + n] == ":":
                n += 1
            self.short[c] = min(n, 2)
            i += 1 + n
        self.name_of: dict[int, str] = {}  # val -> the option's first long name: its canonical name
        for name, _, val in longs:
            self.name_of.setdefault(val, name)

    def lookup(self, text: str) -> tuple[str, int]:
        """(canonical name, has_arg) of ``--text`` (no ``=value``), as getopt_long matches it:
        an exact name, else the one option all the names it begins count as (options with
        the same val, has_arg and flag are one); ArgError otherwise."""
        for name, has_arg, val in self.long:
            if name == text:
                return self.name_of[val], has_arg
        found = [(n, h, v) for n, h, v in self.long if n.startswith(text)]
        if not found:
            raise ArgError(f"unrecognized option '--{text}'")
        first = found[0]
        if any((h, v) != (first[1], first[2]) for _, h, v in found[1:]):
            names = " ".join(f"'--{n}'" for n, _, _ in found)
            raise ArgError(f"option '--{text}' is ambiguous; possibilities: {names}")
        return self.name_of[first[2]], first[1]


_TABLES: dict[str, OptionTable] = {}


def releases() -> list[str]:
    return sorted(TABLES, key=release_key)


def release_key(release: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in release.split(".")[:2])
    except ValueError:
        return (0, 0)


def table_for(release: str | None = None) -> OptionTable:
    """The recorded table of ``release`` ("24.11", or "24.11.5"); for a release not recorded,
    the newest recorded before it (tables change little between releases), else the oldest."""
    recorded = releases()
    pick = DEFAULT_RELEASE
    if release:
        want = release_key(str(release))
        older = [r for r in recorded if release_key(r) <= want]
        pick = older[-1] if older else recorded[0]
    if pick not in _TABLES:
        _TABLES[pick] = OptionTable(pick, *TABLES[pick])
    return _TABLES[pick]


class Option:
    """One option as typed: ``argv[start:end]`` is its word(s); ``cluster`` the short options
    typed before it in its word (``-H`` of ``-HC a100``), which stay when it is edited.
    (Plain classes in the submit path: no dataclasses, so gpupool-sbatch starts fast.)"""

    __slots__ = ("cluster", "component", "end", "name", "ours", "start", "value")

    def __init__(
        self,
        name: str,
        value: str | None,
        start: int,
        end: int,
        component: int = 0,
        cluster: str = "",
        ours: bool = False,
    ) -> None:
        self.name = name  # canonical long name (sbatch's), or ours
        self.value = value
        self.start, self.end = start, end
        self.component = component  # heterogeneous job component
        self.cluster = cluster
        self.ours = ours

    def key(self) -> tuple[str, str | None, int, int]:
        return (self.name, self.value, self.start, self.end)

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.value!r}, {self.start}, {self.end}, {self.component})"


class ArgError(ValueError):
    pass


def plain_gres(value: str, release: str) -> str:
    """A ``--gres`` value as ``release``'s Slurm reads it: from 23.11 each item without the
    ``gres/`` sbatch itself puts before it (``gres_prepend_tres_type`` folds a user's
    ``gres/gres/``: ``--gres=gres/gpu:2`` is ``gpu:2``), up to 23.02 without a ``gres:``,
    which those releases fold.  The other prefix is left, as that release refuses it.  The
    wrapper's rules read this, or a prefixed request passed every one of them unseen; what
    sbatch is given keeps the user's own text unless a rule rewrites it."""
    prefix = "gres/" if release_key(release) >= (23, 11) else "gres:"
    return ",".join(item.removeprefix(prefix) for item in value.split(","))


class SbatchArgs:
    __slots__ = ("argv", "errors", "exits", "first", "options", "script_index", "separators", "table", "wrap")

    def __init__(self, argv: list[str], table: OptionTable) -> None:
        self.argv = argv  # without the program name
        self.table = table
        self.options: list[Option] = []  # the second pass's: each with its component
        self.first: list[Option] = []  # the first pass's (all components at once, in order)
        self.script_index: int | None = None  # the script in argv; None with --wrap or stdin
        self.separators: list[int] = []  # indices of the ':' that start components
        self.wrap = False  # --wrap in any component (the first pass): no script is read
        self.exits = False  # --help, --usage or --version: sbatch prints and exits
        self.errors: list[str] = []  # what sbatch would refuse the command line for

    def last(self, name: str, component: int = 0) -> Option | None:
        """The option that counts (sbatch: the last one wins)."""
        found = [o for o in self.options if o.name == name and o.component == component]
        return found[-1] if found else None

    def value(self, name: str, component: int = 0) -> str | None:
        """The option's last value; a ``--gres`` value as Slurm reads it (:func:`plain_gres`)."""
        o = self.last(name, component)
        if o is None or o.value is None:
            return None
        return plain_gres(o.value, self.table.release) if name == "gres" else o.value

    def has(self, name: str, component: int = 0) -> bool:
        return self.last(name, component) is not None

    @property
    def components(self) -> int:
        return len(self.separators) + 1

    def first_value(self, name: str) -> str | None:
        """The value the first pass leaves (the last in the whole line): ``--chdir``, where
        sbatch looks for the script."""
        found = [o for o in self.first if o.name == name]
        return found[-1].value if found else None

    def ours(self) -> list[Option]:
        return [o for o in self.options if o.ours]

    def check(self) -> SbatchArgs:
        if self.errors:
            raise ArgError(self.errors[0])
        return self


ERROR = "?"  # getopt_long's return for a word it refuses: an Option named so carries the message


def getopt(
    argv: list[str], start: int, table: OptionTable, ours: dict[str, int] | None = None
) -> tuple[list[Option], int]:
    """glibc getopt_long with a ``+`` option string over ``argv[start:]``: what each call
    returns, in order (an :data:`ERROR` option for a word it refuses, with getopt's message
    as its value: getopt goes on after one), and the index where options end (the first
    non-option, or after ``--``)."""
    found: list[Option] = []
    ours = ours or {}

    def error(message: str, at: int) -> None:
        found.append(Option(ERROR, message, at, at + 1))

    n = len(argv)
    i = start
    while i < n:
        tok = argv[i]
        if tok == "--":
            return found, i + 1
        if not tok.startswith("-") or tok == "-":
            return found, i
        if tok.startswith("--"):
            text, eq, val = tok[2:].partition("=")
            is_ours = text in ours
            try:
                name, has_arg = (text, ours[text]) if is_ours else table.lookup(text)
            except ArgError as e:
                error(str(e) if not eq else str(e).replace(f"'--{text}'", f"'--{text}={val}'", 1), i)
                i += 1
                continue
            if eq:
                if has_arg:
                    found.append(Option(name, val, i, i + 1, ours=is_ours))
                else:
                    error(f"option '--{_full(table, name, text)}' doesn't allow an argument", i)
                i += 1
            elif has_arg == 1:
                if i + 1 < n:
                    found.append(Option(name, argv[i + 1], i, i + 2, ours=is_ours))
                else:
                    error(f"option '--{_full(table, name, text)}' requires an argument", i)
                i += 2
            else:
                found.append(Option(name, None, i, i + 1, ours=is_ours))
                i += 1
            continue
        j, end = 1, i + 1
        while j < len(tok):
            c = tok[j]
            j += 1
            has = table.short.get(c)
            if has is None or c in ":;":
                error(f"invalid option -- '{c}'", i)
                continue
            short = table.name_of.get(ord(c), f"-{c}")
            cluster = tok[: j - 1] if j > 2 else ""
            rest = tok[j:]
            if has == 0:
                found.append(Option(short, None, i, end, cluster=cluster))
                continue
            if rest:
                found.append(Option(short, rest, i, end, cluster=cluster))
            elif has == 2:
                found.append(Option(short, None, i, end, cluster=cluster))
            elif i + 1 < n:
                end = i + 2
                found.append(Option(short, argv[i + 1], i, end, cluster=cluster))
            else:
                error(f"option requires an argument -- '{c}'", i)
            break
        i = end
    return found, n


def _full(table: OptionTable, canonical: str, typed: str) -> str:
    """The name getopt prints for an option typed as ``typed``: the table's entry it matched."""
    for name, _, _ in table.long:
        if name == typed:
            return name
    return next((name for name, _, _ in table.long if name.startswith(typed)), canonical)


# sbatch's input environment variables for the options the wrapper reads (``env_vars[]`` in
# src/sbatch/opt.c, alike on 22.05, 24.11 and 26.05): sbatch ranks them above the script's
# #SBATCH lines and below its command line
ENV_OPTIONS = {
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_SIGNAL": "signal",
}


def env_args(env: Mapping[str, str], table: OptionTable | None = None) -> SbatchArgs:
    """The options sbatch takes from ``env`` (``SBATCH_GRES`` and the like), as a command
    line of their own; a value that release's sbatch would refuse is left out (sbatch
    says so itself)."""
    argv = [f"--{name}={env[var]}" for var, name in ENV_OPTIONS.items() if env.get(var)]
    return scan([a for a in argv if not scan([a], table).errors], table)


def parse(argv: list[str], table: OptionTable | None = None, ours: dict[str, int] | None = None) -> SbatchArgs:
    """Both of sbatch's passes over ``argv`` (without the program name); ArgError where
    sbatch would refuse it, unless an option that exits comes first (then ``exits``)."""
    out = scan(argv, table, ours)
    if out.errors and not out.exits:
        raise ArgError(out.errors[0])
    return out


def scan(argv: list[str], table: OptionTable | None = None, ours: dict[str, int] | None = None) -> SbatchArgs:
    """:func:`parse` without raising: the errors are in ``errors``."""
    tbl = table or table_for()
    out = SbatchArgs(list(argv), tbl)
    # first pass: the words without the ':' separators, every component at once; sbatch
    # handles each option as getopt returns it: one that exits, or a refused word, ends it
    where = [k for k, tok in enumerate(argv) if tok != ":"]
    local = [argv[k] for k in where]
    first, optind = getopt(local, 0, tbl, ours)
    out.first = first
    for o in first:
        if o.name == ERROR:
            out.errors.append(o.value or "")
            return out
        if o.name in EXITS:
            out.exits = True
            return out
        if o.name == "wrap":
            out.wrap = True
    script_argc = len(local) - optind
    if optind < len(local):
        out.script_index = where[optind]
        if out.wrap:
            out.errors.append("Script arguments not permitted with --wrap option")
    # second pass: component by component, up to the script and its arguments
    het_argc = len(argv) - script_argc
    begin, comp = 0, 0
    while True:
        opts, stop = getopt(argv[:het_argc], begin, tbl, ours)
        for o in opts:
            o.component = comp
            if o.name == ERROR:
                out.errors.append(o.value or "")
            else:
                out.options.append(o)
        if stop < het_argc and argv[stop] == ":":
            out.separators.append(stop)
            begin, comp = stop + 1, comp + 1
            continue
        break
    mapped = [(o.name, o.value, where[o.start], where[o.end - 1] + 1) for o in first]
    if not out.errors and mapped != [o.key() for o in out.options]:
        # a lone ':' taken as an option's value: sbatch's two passes read the line two ways
        out.errors.append("a ':' is read as an option's value by one of sbatch's passes and not the other")
    return out
