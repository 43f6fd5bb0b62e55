"""A user's summary as text they can act on, as JSON, and as a mail message (no I/O).

``gpupool report user-summary`` prints the text, or hands each message to the local MTA
(``util/mail.py``, as ``sendmail -t < message`` would): the message carries its own ``To:``.
User names come from accounting, so one becomes an address only if it is a plain login
name: never a header of our making from a string Slurm was given.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

from slurm_gpupool.reports.output import human_s
from slurm_gpupool.reports.sim_report import finite
from slurm_gpupool.reports.user_summary import Suggestion, TypeUse, UserSummary

PLAIN_LOGIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # POSIX portable names, as useradd takes
PLAIN_DOMAIN = re.compile(r"(?=.{1,253}$)[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*")


def _gb(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f} GB"


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _type_line(t: TypeUse) -> str:
    line = f"  {t.gres}: {_jobs(t.jobs)}, {t.gpu_hours:,.2f} GPU-h, {t.eq_hours:,.2f} GPU-eq-h"
    if t.measured:
        line += (
            f"; peak memory {_gb(t.peak_mem_mib)} (median {_gb(t.median_peak_mem_mib)}) "
            f"of the {_gb(t.offered_mib)} it offered, {t.measured} measured"
        )
    if t.activity_pct is not None:
        line += f"; {t.activity_source} {t.activity_pct:.0f} % on average"
    if not t.measured and t.activity_pct is None:
        line += "; not measured (no usage record from the job hooks)"
    return line


def ask_for(s: Suggestion) -> str:
    """How to ask for the smaller offer next time."""
    if s.kind == "shared":
        return f"gpupool-sbatch --gpu-share=1/{s.shares}"
    return f"sbatch --gres=gpu:{s.offer}:1"


def suggestion_line(s: Suggestion) -> str:
    """'your 14 jobs on 3g.40gb peaked at 6.0 GB: 1g.10gb (9.8 GB) would have fit, ...'"""
    of = "" if s.jobs == s.measured else f" (of {s.measured} measured)"
    return (
        f"  your {_jobs(s.jobs)}{of} on {s.gres.removeprefix('gpu:')} peaked at {_gb(s.peak_mem_mib)}: "
        f"{s.offer} ({_gb(s.offer_mib)}) would have fit, freeing {s.freed_eq_hours:,.1f} GPU-eq-h; "
        f"next time: {ask_for(s)}"
    )


def summary_text(s: UserSummary, since: datetime, until: datetime) -> str:
    """One user's section, in plain text."""
    when = f"{since.astimezone(UTC):%Y-%m-%d %H:%M} to {until.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    lines = [f"GPU use of {s.user}, {when}"]
    if not s.gpu_jobs and not s.pending_now:
        return "\n".join([*lines, f"  no GPU jobs in this period ({_jobs(s.jobs)} in all)", ""]) + "\n"
    lines.append(
        f"  {_jobs(s.jobs)}, {s.gpu_jobs} on GPUs: {s.gpu_hours:,.2f} GPU-hours, "
        f"{s.eq_hours:,.2f} GPU-equivalent hours (a MIG slice counts as its share of the GPU)"
    )
    lines.append("by GRES type:")
    lines += [_type_line(t) for t in s.types] or ["  none held in this period"]
    wait = (
        f"median {human_s(s.median_wait_s)} over {_jobs(s.started)} that started"
        if s.median_wait_s is not None
        else "no job submitted in this period has started"
    )
    lines.append(f"queue wait: {wait}" + (f"; {s.pending_now} still pending" if s.pending_now else ""))
    if s.suggestions:
        lines.append("right-sizing (from the measured peak memory and activity):")
        lines += [suggestion_line(x) for x in s.suggestions]
    elif any(t.right_sized for t in s.types):
        lines.append("right-sizing: your measured jobs needed what they asked for")
    return "\n".join(lines) + "\n\n"


def summaries_text(summaries: list[UserSummary], since: datetime, until: datetime) -> str:
    if not summaries:
        return "no GPU jobs in this period\n"
    return "".join(summary_text(s, since, until) for s in summaries)


def summaries_json(summaries: list[UserSummary], since: datetime, until: datetime) -> dict[str, Any]:
    """Every figure, and the text each user would get; strict JSON (no NaN)."""
    return finite(
        {
            "since": since.isoformat(),
            "until": until.isoformat(),
            "users": [
                {
                    **asdict(s),
                    "suggestions": [{**asdict(x), "ask_for": ask_for(x)} for x in s.suggestions],
                    "text": summary_text(s, since, until),
                }
                for s in summaries
            ],
        }
    )


def address_for(user: str, domain: str | None = None, pattern: str | None = None) -> str | None:
    """``user@domain``, or ``pattern`` with ``%u`` as the user; None for a user name that is not
    a plain login name (it could carry a header or a second address)."""
    if not PLAIN_LOGIN.fullmatch(user):
        return None
    if pattern is not None:
        return pattern.replace("%u", user)
    return f"{user}@{domain}"


def check_address_pattern(domain: str | None, pattern: str | None) -> str | None:
    """Why ``--domain`` / ``--address`` cannot make addresses, or None."""
    if (domain is None) == (pattern is None):
        return "give one of --domain or --address"
    if domain is not None and not PLAIN_DOMAIN.fullmatch(domain):
        return f"{domain[:60]!r} is not a domain name"
    if pattern is not None:
        local, _, host = pattern.partition("@")
        if "%u" not in local or not PLAIN_DOMAIN.fullmatch(host) or not re.fullmatch(r"[A-Za-z0-9._%+-]+", local):
            return f"{pattern[:60]!r} is not an address with %u for the user (e.g. %u@example.org)"
    return None


def mail_message(text: str, to: str, subject: str, sender: str | None = None) -> bytes:
    """An RFC 5322 message for ``sendmail -t`` (which reads the recipients from ``To:``),
    marked as auto-generated (RFC 3834) so that nobody's vacation reply answers it."""
    msg = EmailMessage(policy=SMTP.clone(linesep="\n"))  # sendmail takes the local line ending
    msg["To"] = to
    if sender:
        msg["From"] = sender
    msg["Subject"] = subject
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(text, cte="8bit")  # readable as it is; lines stay far under 998 octets
    return msg.as_bytes()
