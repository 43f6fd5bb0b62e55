"""#30: ``gpupool report user-summary``: per user, their jobs and hours by GRES type, measured
peak memory and activity against what they held, the right-sizing rule of ``report advice`` on
their own jobs, and their median wait; printed, as JSON, or mailed through a stand-in sendmail.

Accounting in sacct's --parsable2 form with the hooks' usage spool records, as the Epilog writes
them (the other report tests' fixtures: tests/unit/test_reports.py)."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path

import pytest

from slurm_gpupool.reports.advice import advice
from slurm_gpupool.reports.dataset import Source, build
from slurm_gpupool.reports.html import render_html
from slurm_gpupool.reports.user_summary import user_summaries
from slurm_gpupool.reports.user_text import (
    address_for,
    check_address_pattern,
    mail_message,
    summaries_json,
    summary_text,
)
from tests.unit.test_reports import HISTORY, ROOT, SINCE, UNTIL, cfg, gpupool, row  # noqa: F401  (cfg: fixture)

# u_vision: three 3g.40gb jobs on h100n1 (2 h, 1 h, 1 h; waits 10, 30 and 60 min), two of them
# measured small (3000 and 5000 MiB at 20 % SM activity), one large and busy; one still pending.
# "root@evil.example" (a user name that is no login name) ran a whole A100 for an hour.
VISION = [
    row(11, "vision", "h100n1", "COMPLETED", "08:00:00", "08:10:00", "10:10:00", "", "gres/gpu:3g.40gb=1,gres/gpu=1"),
    row(12, "vision", "h100n1", "COMPLETED", "09:00:00", "09:30:00", "10:30:00", "", "gres/gpu:3g.40gb=1,gres/gpu=1"),
    row(13, "vision", "h100n1", "COMPLETED", "10:00:00", "11:00:00", "12:00:00", "", "gres/gpu:3g.40gb=1,gres/gpu=1"),
    row(14, "vision", "None assigned", "PENDING", "20:00:00", "Unknown", "Unknown", "gres/gpu:1g.10gb=1", ""),
    row(
        15, "evil", "a100n2", "COMPLETED", "01:00:00", "01:00:00", "02:00:00", "", "gres/gpu:a100=1,gres/gpu=1"
    ).replace("|u_evil|", "|root@evil.example|"),
]
MEASURED = {"11": ("08:10:00", 3000, 20.0), "12": ("09:30:00", 5000, 20.0), "13": ("11:00:00", 30000, 60.0)}


def _site(tmp_path: Path, measured: dict = MEASURED) -> tuple[Path, Path]:
    """The sacct file and a collected usage spool of h100n1 (job id -> start, peak MiB, SM %)."""
    spool = tmp_path / "h100n1"
    (spool / "jobs").mkdir(parents=True)
    for jid, (start, peak, sm) in measured.items():
        dev = {
            "index": 0,
            "type": "3g.40gb",
            "memory_total_mib": 40448,
            "peak_memory_mib": peak,
            "mean_utilization_pct": None,
            "activity_source": "gpm",
            "mean_sm_activity_pct": sm,
            "peak_sm_activity_pct": sm + 5,
        }
        t = datetime.fromisoformat(f"2026-11-16T{start}+00:00").timestamp() + 1
        rec = {"job_id": jid, "node": "h100n1", "start_time": t, "devices": [dev], "usage": [dev]}
        (spool / "jobs" / f"{jid}.json").write_text(json.dumps(rec))
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join([HISTORY, *VISION]) + "\n")
    return f, spool


@pytest.fixture
def loaded(cfg, tmp_path):  # noqa: F811
    f, spool = _site(tmp_path)
    data, _, records = build(cfg, Source(files=(f,)), SINCE, UNTIL, spools=(str(spool),), now=UNTIL)
    return data, records


def test_a_users_summary_has_their_hours_measured_use_suggestion_and_wait(loaded):
    data, records = loaded
    (s,) = user_summaries(data, records, ["u_vision"])
    assert (s.jobs, s.gpu_jobs, s.pending_now, s.started) == (4, 3, 1, 3)
    assert s.median_wait_s == 1800  # waits of 10, 30 and 60 minutes
    (t,) = s.types
    assert t.gres == "gpu:3g.40gb" and t.jobs == 3 and t.gpu_hours == pytest.approx(4.0)
    assert t.eq_hours == pytest.approx(4 * 3 / 7)
    assert (t.measured, t.peak_mem_mib, t.median_peak_mem_mib, t.offered_mib) == (3, 30000, 5000, 40448)
    assert t.activity_pct == pytest.approx(100 / 3) and t.activity_source == "SM activity"
    # two of the three (67 % >= advice's 60 %) fit a 1g.10gb: 9984 MiB, 20 % of 3/7 under 80 % of 1/7
    (tip,) = s.suggestions
    assert (tip.gres, tip.offer, tip.kind, tip.jobs, tip.measured, tip.peak_mem_mib) == (
        "gpu:3g.40gb", "1g.10gb", "mig", 2, 3, 5000,
    )  # fmt: skip
    assert tip.freed_eq_hours == pytest.approx((2 + 1) * 3 / 7 * (1 - 1 / 3))  # 3 h on 3/7, on 1/7 instead
    text = summary_text(s, data.since, data.until)
    assert text.startswith("GPU use of u_vision, 2026-11-16 00:00 to 2026-11-17 00:00 UTC\n")
    assert "gpu:3g.40gb: 3 jobs, 4.00 GPU-h, 1.71 GPU-eq-h; peak memory 29.3 GB (median 4.9 GB)" in text
    assert "of the 39.5 GB it offered, 3 measured; SM activity 33 % on average" in text
    assert (
        "your 2 jobs (of 3 measured) on 3g.40gb peaked at 4.9 GB: 1g.10gb (9.8 GB) would have fit, "
        "freeing 0.9 GPU-eq-h; next time: sbatch --gres=gpu:1g.10gb:1"
    ) in text
    assert "queue wait: median 30m 00s over 3 jobs that started; 1 still pending" in text


def test_busy_jobs_get_no_suggestion_and_every_gpu_user_has_a_section(cfg, tmp_path):  # noqa: F811
    busy = {k: (start, peak, 90.0) for k, (start, peak, _) in MEASURED.items()}  # 90 % of 3/7: no 1g fits
    f, spool = _site(tmp_path, busy)
    data, _, records = build(cfg, Source(files=(f,)), SINCE, UNTIL, spools=(str(spool),), now=UNTIL)
    every = user_summaries(data, records)
    assert [s.user for s in every] == sorted({"u_physics", "u_bio", "u_chem", "u_vision", "root@evil.example"})
    vision = next(s for s in every if s.user == "u_vision")
    assert vision.suggestions == () and vision.types[0].right_sized
    assert "right-sizing: your measured jobs needed what they asked for" in summary_text(vision, SINCE, UNTIL)
    # a user asked for by name with no job in the window is told so, not left out
    (nobody,) = user_summaries(data, records, ["u_nobody"])
    assert (nobody.jobs, nobody.gpu_jobs) == (0, 0)
    assert "no GPU jobs in this period (0 jobs in all)" in summary_text(nobody, SINCE, UNTIL)


def test_without_the_pool_config_a_type_it_cannot_name_gets_no_verdict(tmp_path):
    """Files from elsewhere: 3g.40gb names profiles of several catalog models, so nothing is
    said about right-sizing (neither a suggestion nor "needed what they asked for")."""
    f, spool = _site(tmp_path)
    data, _, records = build(None, Source(files=(f,)), SINCE, UNTIL, spools=(str(spool),), now=UNTIL)
    (s,) = user_summaries(data, records, ["u_vision"])
    assert s.types[0].measured == 3 and not s.types[0].right_sized and s.suggestions == ()
    assert "right-sizing" not in summary_text(s, SINCE, UNTIL)


def test_json_has_every_figure_and_the_text(loaded):
    data, records = loaded
    doc = summaries_json(user_summaries(data, records, ["u_vision", "u_physics"]), data.since, data.until)
    users = {u["user"]: u for u in doc["users"]}
    assert list(users) == ["u_vision", "u_physics"]  # in the order asked for
    assert users["u_vision"]["suggestions"][0]["ask_for"] == "sbatch --gres=gpu:1g.10gb:1"
    assert users["u_vision"]["median_wait_s"] == 1800 and "freeing 0.9 GPU-eq-h" in users["u_vision"]["text"]
    physics = {t["gres"]: t for t in users["u_physics"]["types"]}
    assert physics["gpu:1g.5gb"]["gpu_hours"] == pytest.approx(4.0)  # 2 slices for 2 h
    assert physics["gpu:a100"]["measured"] == 0 and physics["gpu:a100"]["peak_mem_mib"] is None
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN anywhere


def test_advice_carries_each_measured_jobs_fit_and_the_page_charts_it(loaded):
    data, records = loaded
    r = advice(data, records)
    rs = r.series["right_size"].set_index("job_id")
    assert list(rs.loc[["11", "12", "13"], "fits"]) == ["1g.10gb", "1g.10gb", ""]
    assert set(rs.loc[["11", "12", "13"], "type_offer"]) == {"1g.10gb"}  # the type's rule: 2 of 3 fit
    page = render_html([r], {"title": "t", "load": {}})
    assert "3g.40gb (n=3, 2 fit smaller)" in page and 'id="chart-right-size"' in page


@pytest.mark.parametrize(
    ("user", "domain", "pattern", "want"),
    [
        ("alice", "example.org", None, "alice@example.org"),
        ("alice", None, "%u@hpc.example.org", "alice@hpc.example.org"),
        ("a.b-c_d", None, "gpu-%u@example.org", "gpu-a.b-c_d@example.org"),
        ("root@evil.example", "example.org", None, None),  # a second address
        ("x\nBcc: everyone@example.org", "example.org", None, None),  # a header
        ("-t", "example.org", None, None),  # an option to sendmail
        ("", "example.org", None, None),
    ],
)
def test_only_plain_login_names_become_addresses(user, domain, pattern, want):
    assert address_for(user, domain, pattern) == want


def test_address_options_are_checked():
    assert check_address_pattern("example.org", None) is None
    assert check_address_pattern(None, "%u@example.org") is None
    assert "one of --domain or --address" in check_address_pattern(None, None)
    assert "one of --domain or --address" in check_address_pattern("example.org", "%u@example.org")
    assert "not a domain name" in check_address_pattern("example.org\nBcc: x@y", None)
    assert "with %u" in check_address_pattern(None, "alice@example.org")
    assert "with %u" in check_address_pattern(None, "%u@example.org, x@y.org")


def test_the_message_is_what_sendmail_t_reads():
    msg = mail_message("GPU use of alice\n  line two\n", "alice@example.org", "Your GPU use", "hpc@example.org")
    head, _, body = msg.decode().partition("\n\n")
    headers = dict(line.split(": ", 1) for line in head.splitlines())
    assert headers["To"] == "alice@example.org" and headers["From"] == "hpc@example.org"
    assert headers["Subject"] == "Your GPU use" and headers["Auto-Submitted"] == "auto-generated"
    assert body == "GPU use of alice\n  line two\n" and b"\r" not in msg


# -- the command ------------------------------------------------------------------------------


def _args(tmp_path: Path, *more: str) -> list[str]:
    f, spool = _site(tmp_path)
    common = ["--since", "2026-11-16", "--until", "2026-11-17", "--tz", "UTC", "--spool-dir", str(spool)]
    return ["--config", str(ROOT / "etc" / "gpupool.yaml"), "report", "user-summary", "--from", str(f), *common, *more]


def _stand_in(tmp_path: Path, refuse: str = "") -> Path:
    """A sendmail that records its arguments and the message it got, one file per call, and
    refuses (exit 75, as sendmail's EX_TEMPFAIL) a message to ``refuse``."""
    out = tmp_path / "sent"
    out.mkdir()
    script = tmp_path / "sendmail"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "msg = sys.stdin.buffer.read().decode()\n"
        f"out = {str(out)!r}\n"
        "import os\n"
        "n = len(os.listdir(out))\n"
        "open(f'{out}/{n}.json', 'w').write(json.dumps({'argv': sys.argv[1:], 'message': msg}))\n"
        f"if {refuse!r} and 'To: {refuse}' in msg:\n"
        "    sys.stderr.write('451 try again later\\n'); sys.exit(75)\n"
    )
    script.chmod(0o755)
    return script


def _sent(tmp_path: Path) -> list[dict]:
    files = sorted((tmp_path / "sent").iterdir(), key=lambda p: int(p.stem))
    return [json.loads(p.read_text()) for p in files]


def test_cli_prints_one_section_per_user_asked_for_and_json(tmp_path):
    res = gpupool(*_args(tmp_path, "--user", "u_vision", "--user", "u_bio"))
    assert res.returncode == 0, res.stderr
    sections = res.stdout.split("\n\n")
    assert sections[0].startswith("GPU use of u_vision") and sections[1].startswith("GPU use of u_bio")
    assert "1g.10gb (9.8 GB) would have fit" in sections[0] and "GPU use of u_physics" not in res.stdout
    doc = json.loads(gpupool(*_args(tmp_path / "j", "--json")).stdout)
    assert {u["user"] for u in doc["users"]} >= {"u_vision", "u_physics", "root@evil.example"}


def test_cli_mails_each_user_through_the_mta_command_and_skips_names_that_are_no_login(tmp_path):
    tmp_path.joinpath("j").mkdir()
    script = _stand_in(tmp_path)
    mail = ["--mail", "--domain", "example.org", "--sender", "HPC <hpc@example.org>", "--sendmail", f"{script} -t"]
    res = gpupool(*_args(tmp_path / "j", *mail))
    assert res.returncode == 0, res.stderr
    sent = _sent(tmp_path)
    to = [m["message"].split("To: ", 1)[1].split("\n", 1)[0] for m in sent]
    assert sorted(to) == ["u_bio@example.org", "u_chem@example.org", "u_physics@example.org", "u_vision@example.org"]
    assert all(m["argv"] == ["-t"] for m in sent)  # the recipients come from To:, never from argv
    vision = next(m["message"] for m in sent if "To: u_vision@" in m["message"])
    assert "From: HPC <hpc@example.org>" in vision and "Subject: Your GPU use, 2026-11-16 to 2026-11-17" in vision
    assert "your 2 jobs (of 3 measured) on 3g.40gb peaked at 4.9 GB" in vision
    assert "user 'root@evil.example': not a plain login name, not mailed" in res.stderr
    assert "mailed 4 user summaries" in res.stderr and res.stdout == ""


def test_cli_mail_goes_on_after_a_refusal_and_fails_at_the_end(tmp_path):
    tmp_path.joinpath("j").mkdir()
    script = _stand_in(tmp_path, refuse="u_bio@example.org")
    res = gpupool(*_args(tmp_path / "j", "--mail", "--address", "%u@example.org", "--sendmail", str(script)))
    assert res.returncode == 1, res.stderr
    assert len(_sent(tmp_path)) == 4  # the refused one was tried, the others still went
    assert "gpupool: mail to u_bio@example.org: " in res.stderr and "exited 75: 451 try again later" in res.stderr
    assert "gpupool: mail to 1 of 4 users: the MTA refused them" in res.stderr


def test_cli_without_sendmail_says_so_and_sends_nothing(tmp_path):
    missing = tmp_path / "no" / "sendmail"
    res = gpupool(*_args(tmp_path, "--mail", "--domain", "example.org", "--sendmail", f"{missing} -t"))
    assert res.returncode == 69, res.stderr
    assert f"gpupool: mail command {missing}: not found or not executable" in res.stderr
    assert "hint: install a local MTA" in res.stderr and "--sendmail COMMAND" in res.stderr
    not_exec = tmp_path / "sendmail.txt"
    not_exec.write_text("")
    os.chmod(not_exec, 0o644)
    res = gpupool(*_args(tmp_path / "x", "--mail", "--domain", "example.org", "--sendmail", str(not_exec)))
    assert res.returncode == 69 and "not found or not executable" in res.stderr


@pytest.mark.parametrize(
    ("more", "why"),
    [
        (["--mail"], "give one of --domain or --address"),
        (["--mail", "--address", "alice@example.org"], "with %u for the user"),
        (["--domain", "example.org"], "only with --mail"),
        (["--mail", "--domain", "example.org", "--json"], "takes no --json"),
        (["--mail", "--domain", "example.org", "--sendmail", ""], "an empty command"),
    ],
)
def test_cli_refuses_mail_options_that_make_no_sense(tmp_path, more, why):
    res = gpupool(*_args(tmp_path, *more))
    assert res.returncode == 2 and why in res.stderr, res.stderr


def test_report_window_names_utc():
    """The summary's period is said in UTC whatever zone the window was given in."""
    from datetime import timedelta, timezone

    from slurm_gpupool.reports.user_summary import UserSummary

    s = UserSummary("alice", 0, 0, 0.0, 0.0, (), (), 0, None, 0)
    paris = timezone(timedelta(hours=1))
    text = summary_text(s, datetime(2026, 11, 16, 1, tzinfo=paris), datetime(2026, 11, 17, 1, tzinfo=paris))
    assert text.startswith("GPU use of alice, 2026-11-16 00:00 to 2026-11-17 00:00 UTC")
