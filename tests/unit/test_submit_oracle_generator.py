"""The submit oracle's generator (tests/integration/test_submit_oracle_slurm.py) sends no
case that kills the release's slurmctld: before 24.11.4 a heterogeneous job refused in a
later component, whose leader asks for mail at its end, made slurmctld fatal (SchedMD
ticket 22103; seen in a CI trial of 22.05 and reproduced there by hand).  Read back with
the product's own sbatch parser, not the generator's bookkeeping."""

from __future__ import annotations

import random
from pathlib import Path

from slurm_gpupool.core.submit.sbatch_args import scan, table_for
from slurm_gpupool.core.submit.sbatch_script import directive_args, read_directives
from tests.integration.test_submit_oracle_slurm import HET_END_MAIL_SAFE_FROM, MAIL_AT_END, Generator

CASES = 330  # one oracle run's plain cases
SEEDS = range(12)  # a het leader asks for mail in about 1 case of 100: enough of them to meet END


def het_leader_mail(version: tuple[int, int, int], seed: int, tmp: Path) -> tuple[int, list[str]]:
    """How many of one run's cases on Slurm ``version`` are heterogeneous, and the
    ``--mail-type`` values their first components ask for (on the command line or in the
    script before ``hetjob``)."""
    table = table_for(f"{version[0]}.{version[1]:02d}")
    gen = Generator(table, random.Random(seed), tmp, "7", het_end_mail=version >= HET_END_MAIL_SAFE_FROM)
    hets, mails = 0, []
    for k in range(CASES):
        sub = gen.submission(k)
        line = scan(sub.argv, table)
        script = sub.stdin if sub.stdin is not None else next(iter(sub.files.values()), None)
        in_script = len(read_directives(script, table.release).components) > 1 if script else False
        if line.components == 1 and not in_script:
            continue
        hets += 1
        leader = [o for o in line.options if o.component == 0]
        if script is not None:
            leader += directive_args(script, table, 0).options
        mails += [o.value or "" for o in leader if o.name == "mail-type"]
    return hets, mails


def test_on_22_05_no_het_job_s_leader_asks_for_mail_at_its_end(tmp_path: Path):
    asked = []
    for seed in SEEDS:
        hets, mails = het_leader_mail((22, 5, 8), seed, tmp_path)
        assert hets >= 30, (seed, hets)
        assert not [m for m in mails if MAIL_AT_END.search(m)], (seed, mails)
        asked += mails
    assert len(asked) >= 5, "a het job's leader still asks for other mail"


def test_where_slurm_survives_it_the_het_leader_s_end_mail_is_still_sent(tmp_path: Path):
    found = [m for seed in SEEDS for m in het_leader_mail((24, 11, 5), seed, tmp_path)[1]]
    assert any(MAIL_AT_END.search(m) for m in found), found
