"""#26 item 3: a batch script's #SBATCH lines, read on bytes as sbatch reads them, and
our options taken out of them with every other byte kept.

Each script below was also given to the real sbatch (22.05; the backslash case to 24.11
too) under a getopt_long tracer: the words it handed getopt are the ones asserted here.
"""

from __future__ import annotations

import pytest

from slurm_gpupool.core.submit.plan import OURS
from slurm_gpupool.core.submit.sbatch_args import table_for
from slurm_gpupool.core.submit.sbatch_script import (
    components_with_ours,
    directive_args,
    parse_directives,
    read_directives,
    strip_ours,
)


def words(script: bytes, release: str = "22.05") -> list[list[bytes]]:
    return [[w.text for w in comp] for comp in read_directives(script, release).components]


@pytest.mark.parametrize(
    ("script", "want"),
    [
        # only lines that start with #SBATCH (or #SLURM); an indented one is a comment
        (b"#!/bin/sh\n  #SBATCH -N2\n#SLURM -n3\ntrue\n", [[b"-n3"]]),
        # quotes group, an unquoted # ends the line, even inside a word
        (b"#!/bin/sh\n#SBATCH -J 'x' # c\n#SBATCH --comment=a#b\ntrue\n", [[b"-J", b"x", b"--comment=a"]]),
        # hetjob starts a component at the head of a line (the rest of that line is lost),
        # and ends the line in the middle of one
        (b"#!/bin/sh\n#SBATCH -N1 hetjob -n2\n#SBATCH hetjob -n5\n#SBATCH -n3\ntrue\n", [[b"-N1"], [b"-n3"]]),
        # an empty word ends the line: -J takes the next line's word
        (b"#!/bin/sh\n#SBATCH -J '' -N2\n#SBATCH x\ntrue\n", [[b"-J", b"x"]]),
        # blank lines and comments go on; the first command stops it
        (b"#!/bin/sh\n\n# note\n\t\n#SBATCH -t 5\n  echo hi\n#SBATCH -N9\n", [[b"-t", b"5"]]),
        # bytes that are not UTF-8 stay what they are
        (b"#!/bin/sh\n#SBATCH -J caf\xe9 --comment=\xff\xfe\n", [[b"-J", b"caf\xe9", b"--comment=\xff\xfe"]]),
    ],
)
def test_directive_words_as_sbatch_cuts_them(script, want):
    assert words(script) == want


def test_a_backslash_blank_is_a_blank_in_the_word_from_24_05():
    script = b"#!/bin/sh\n#SBATCH -J a\\ b\ntrue\n"
    assert words(script, "22.05") == [[b"-J", b"a", b"b"]]
    assert directive_args(script, table_for("22.05")).errors == ["Invalid directive found in batch script: b"]
    assert words(script, "24.11") == words(script, "26.05") == [[b"-J", b"a b"]]


@pytest.mark.parametrize(
    ("line", "error"),
    [(b"#SBATCH -J 'open", "Unmatched `'`"), (b"#SBATCH -N1 :x", "Unexpected `:`"), (b"#SBATCH -N1 x", "Invalid")],
)
def test_directives_sbatch_refuses(line, error):
    assert error in " ".join(directive_args(b"#!/bin/sh\n" + line + b"\ntrue\n").errors)


def test_the_old_reader_took_an_indented_line_for_a_directive():
    """Before, ``line.strip()`` made ``  #SBATCH --gpu-mem=18G`` a request sbatch never sees."""
    assert parse_directives("#!/bin/sh\n  #SBATCH --gpu-mem=18G\n#SBATCH -N1\n") == ["-N1"]


def test_our_options_are_taken_out_with_every_other_byte_kept():
    table = table_for("22.05")
    script = (
        b"#!/bin/bash\n"
        b"#SBATCH --gpu-mem=18G -J 'd\xe9j\xe0  vu' # \xa9\n"
        b"#SBATCH -t 5   --tier  gold --mem=1G\n"
        b"#SBATCH --explain\n"
        b"#SBATCH --gpu-share\n#SBATCH 1/4 -N1\n"
        b"tail -n +9 $0 | tar x\nexit 0\n" + bytes(range(1, 256))
    )
    out = strip_ours(script, table, OURS)
    assert out == (
        b"#!/bin/bash\n"
        b"#gpupool-sbatch: #SBATCH --gpu-mem=18G -J 'd\xe9j\xe0  vu' # \xa9\n#SBATCH -J 'd\xe9j\xe0  vu' # \xa9\n"
        b"#gpupool-sbatch: #SBATCH -t 5   --tier  gold --mem=1G\n#SBATCH -t 5 --mem=1G\n"
        b"#gpupool-sbatch: #SBATCH --explain\n"
        b"#gpupool-sbatch: #SBATCH --gpu-share\n#gpupool-sbatch: #SBATCH 1/4 -N1\n#SBATCH -N1\n"
        b"tail -n +9 $0 | tar x\nexit 0\n" + bytes(range(1, 256))
    )
    # sbatch reads the same options from it, less ours
    assert words(out) == [[b"-J", b"d\xe9j\xe0  vu", b"-t", b"5", b"--mem=1G", b"-N1"]]
    assert strip_ours(out, table, OURS) == out  # nothing of ours left
    plain = b"#!/bin/sh\n#SBATCH -J \xff\necho \x80\n"
    assert strip_ours(plain, table, OURS) is plain


def test_friendly_options_in_a_later_component_are_found():
    script = b"#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH --gpu-mem=18G\ntrue\n"
    assert components_with_ours(script, table_for(), OURS) == {1}
