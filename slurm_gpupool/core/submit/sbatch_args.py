"""sbatch's command line, understood well enough to add to it without changing it (pure).

sbatch parses with ``getopt_long`` and stops at the first non-option: the script
(or, with ``--wrap``, none).  Everything after the script belongs to the script.
A lone ``:`` separates the components of a heterogeneous job.  This module finds
options, their values and the script, and edits the option list in place so
that every byte the user typed, spaces and newlines included, is passed on.
"""

from __future__ import annotations

# sbatch 22.05 long options that take a required argument (src/sbatch/opt.c).
LONG_WITH_VALUE = frozenset(
    """account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint
    container core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency
    distribution error export-file extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
    gpus-per-task gres gres-flags hint input job-name licenses mail-type mail-user mcs-label mem mem-bind
    mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu
    ntasks-per-node ntasks-per-socket open-mode output partition power prefer priority profile qos
    reservation signal sockets-per-node switches thread-spec threads-per-core time time-min tmp uid
    wait-all-nodes wckey wrap kill-on-invalid-dep burst-buffer-file""".split()
)
# Short options that take an argument, and their long names.
SHORT_WITH_VALUE = {
    "A": "account",
    "a": "array",
    "B": "extra-node-info",
    "b": "begin",
    "c": "cpus-per-task",
    "C": "constraint",
    "D": "chdir",
    "d": "dependency",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "i": "input",
    "J": "job-name",
    "L": "licenses",
    "M": "clusters",
    "m": "distribution",
    "n": "ntasks",
    "N": "nodes",
    "o": "output",
    "p": "partition",
    "q": "qos",
    "S": "core-spec",
    "t": "time",
    "w": "nodelist",
    "x": "exclude",
}
SHORT_FLAGS = frozenset("HhIkOQsVvW")


class Option:
    """One option as typed: ``argv[start:end]`` is its token(s).  (Plain classes in the
    submit path: no dataclasses, so gpupool-sbatch starts fast.)"""

    __slots__ = ("component", "end", "name", "start", "value")

    def __init__(self, name: str, value: str | None, start: int, end: int, component: int) -> None:
        self.name = name  # canonical long name
        self.value = value
        self.start, self.end = start, end
        self.component = component  # heterogeneous job component


class SbatchArgs:
    __slots__ = ("argv", "options", "script_index", "separators")

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv  # without the program name
        self.options: list[Option] = []
        self.script_index: int | None = None  # the script in argv; None with --wrap or stdin
        self.separators: list[int] = []  # indices of ':' tokens

    @property
    def end_of_options(self) -> int:
        return self.script_index if self.script_index is not None else len(self.argv)

    def last(self, name: str, component: int = 0) -> Option | None:
        """The option that counts (sbatch: the last one wins)."""
        found = [o for o in self.options if o.name == name and o.component == component]
        return found[-1] if found else None

    def value(self, name: str, component: int = 0) -> str | None:
        o = self.last(name, component)
        return o.value if o else None

    def has(self, name: str, component: int = 0) -> bool:
        return self.last(name, component) is not None

    @property
    def components(self) -> int:
        return len(self.separators) + 1


class ArgError(ValueError):
    pass


def parse(argv: list[str]) -> SbatchArgs:
    """Find sbatch's options, their values, the het-job separators and the script."""
    out = SbatchArgs(list(argv))
    i, comp = 0, 0
    while i < len(argv):
        tok = argv[i]
        if tok == ":":
            out.separators.append(i)
            comp += 1
            i += 1
            continue
        if tok == "--":
            out.script_index = i + 1 if i + 1 < len(argv) else None
            break
        if tok.startswith("--") and len(tok) > 2:
            name, eq, val = tok[2:].partition("=")
            if eq:
                out.options.append(Option(name, val, i, i + 1, comp))
                i += 1
            elif name in LONG_WITH_VALUE:
                if i + 1 >= len(argv):
                    raise ArgError(f"option --{name} needs a value")
                out.options.append(Option(name, argv[i + 1], i, i + 2, comp))
                i += 2
            else:
                out.options.append(Option(name, None, i, i + 1, comp))
                i += 1
            continue
        if tok.startswith("-") and len(tok) > 1:
            # a cluster of short options: -HW, -N2, -o out.txt
            j = 1
            while j < len(tok):
                ch = tok[j]
                if ch in SHORT_WITH_VALUE:
                    rest = tok[j + 1 :]
                    if rest:
                        out.options.append(Option(SHORT_WITH_VALUE[ch], rest, i, i + 1, comp))
                        i += 1
                    else:
                        if i + 1 >= len(argv):
                            raise ArgError(f"option -{ch} needs a value")
                        out.options.append(Option(SHORT_WITH_VALUE[ch], argv[i + 1], i, i + 2, comp))
                        i += 2
                    break
                out.options.append(Option(f"-{ch}", None, i, i + 1, comp))
                j += 1
            else:
                i += 1
            continue
        out.script_index = i
        break
    return out


def parse_directives(script: str) -> list[str]:
    """The options of ``#SBATCH`` lines (first component), as sbatch reads them.

    sbatch stops at the first non-comment, non-blank line after the shebang, and
    ``#SBATCH hetjob`` (or ``packjob``) ends the first component.
    """
    import shlex

    out: list[str] = []
    for k, line in enumerate(script.splitlines()):
        s = line.strip()
        if k == 0 and s.startswith("#!"):
            continue
        if not s:
            continue
        if not s.startswith("#"):
            break
        if s.startswith("#SBATCH"):
            body = s[len("#SBATCH") :].split("#", 1)[0].strip()
            if body in ("hetjob", "packjob"):
                break
            try:
                out.extend(shlex.split(body))
            except ValueError:
                continue  # sbatch would complain; we just do not read it
    return out
