"""Handing mail to the local MTA, as ``sendmail -t < message`` does.

The command is an argument list (``shlex.split`` of ``--sendmail``), never a shell; the
message carries its recipients in ``To:``, which ``-t`` tells sendmail to read.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

from slurm_gpupool.errors import MailUnavailableError, OperationFailedError, UsageError

DEFAULT_SENDMAIL = "/usr/sbin/sendmail -t"
TIMEOUT_S = 60.0
HINT = "install a local MTA (e.g. apt-get install exim4-daemon-light, or msmtp-mta) or give --sendmail COMMAND"


def mail_command(text: str) -> list[str]:
    """The command as arguments, checked to exist before anything is sent (``command -v``)."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise UsageError(f"--sendmail {text[:80]}", str(e)) from None
    if not argv:
        raise UsageError("--sendmail", "an empty command", hint=f"the default is {DEFAULT_SENDMAIL!r}")
    if shutil.which(argv[0]) is None:
        raise MailUnavailableError(f"mail command {argv[0]}", "not found or not executable", hint=HINT)
    return argv


def send(argv: list[str], message: bytes, to: str, timeout_s: float = TIMEOUT_S) -> None:
    """Hand one message to the MTA on stdin; its refusal is an error naming the recipient."""
    try:
        r = subprocess.run(argv, input=message, capture_output=True, timeout=timeout_s, check=False)
    except OSError as e:  # gone or not executable since mail_command looked
        raise MailUnavailableError(f"mail command {argv[0]}", e.strerror or str(e), hint=HINT) from None
    except subprocess.TimeoutExpired:
        raise OperationFailedError(f"mail to {to}", f"{argv[0]} did not finish in {timeout_s:g} s") from None
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        raise OperationFailedError(
            f"mail to {to}", f"{argv[0]} exited {r.returncode}" + (f": {why[-1][:200]}" if why else "")
        )
