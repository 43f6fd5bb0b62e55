"""The one error hierarchy of slurm_gpupool.

Every failure a user can cause or meet is a :class:`GpupoolError` subclass that
carries its exit code, a short description of *what* failed, *why*, and an
optional hint.  ``slurm_gpupool.cli.errors`` is the single place that turns
them into ``gpupool: <what>: <why>`` plus ``hint: ...`` and an exit code.
"""

from __future__ import annotations

# Exit codes (see DESIGN.md §4).  Named so call sites never use bare numbers.
EXIT_OK = 0
EXIT_FAILED = 1  # assert/diff: not in desired state, or failed but left safe
EXIT_USAGE = 2
EXIT_INFEASIBLE = 65
EXIT_UNAVAILABLE = 69  # NVML or Slurm unavailable
EXIT_INTERNAL = 70
EXIT_TEMPFAIL = 75  # lock held, GPU or node busy: retry later
EXIT_DATA = 76  # accounting data (sacct output, a saved file) not in a form we can read
EXIT_CONFIG = 78


class GpupoolError(Exception):
    """Base of every error we expect to show to a person."""

    exit_code = EXIT_INTERNAL

    def __init__(self, what: str, why: str = "", hint: str | None = None) -> None:
        super().__init__(f"{what}: {why}" if why else what)
        self.what = what
        self.why = why
        self.hint = hint

    def message(self) -> str:
        """The user-facing text, without the ``gpupool:`` prefix."""
        return f"{self.what}: {self.why}" if self.why else self.what


class UsageError(GpupoolError):
    exit_code = EXIT_USAGE


class ConfigError(GpupoolError):
    """Invalid configuration: names the file and key path."""

    exit_code = EXIT_CONFIG

    def __init__(
        self,
        source: str,
        key: str,
        why: str,
        hint: str | None = None,
    ) -> None:
        where = f"{source}: {key}" if key else source
        super().__init__(where, why, hint)
        self.source = source
        self.key = key


class InfeasibleError(GpupoolError):
    """A requested MIG layout or plan cannot exist on this hardware."""

    exit_code = EXIT_INFEASIBLE


class UnavailableError(GpupoolError):
    """NVML, the driver, or Slurm cannot be reached."""

    exit_code = EXIT_UNAVAILABLE


class NvmlUnavailableError(UnavailableError):
    pass


class SlurmUnavailableError(UnavailableError):
    pass


class MailUnavailableError(UnavailableError):
    """The local MTA's command (``sendmail -t``) is not there or cannot be run."""


class BusyError(GpupoolError):
    """Temporary: a lock is held or a GPU/node is in use."""

    exit_code = EXIT_TEMPFAIL


class GpuBusyError(BusyError):
    def __init__(self, what: str, why: str, pids: list[int] | None = None, hint: str | None = None):
        super().__init__(what, why, hint)
        self.pids = list(pids or [])


class OperationFailedError(GpupoolError):
    """An operation failed, and the node was left in a safe state."""

    exit_code = EXIT_FAILED


class GpuOperationError(OperationFailedError):
    """A GPU operation failed (NVML returned an error we did not expect)."""

    def __init__(self, what: str, why: str, nvml_code: int | None = None, hint: str | None = None):
        super().__init__(what, why, hint)
        self.nvml_code = nvml_code


class StateError(GpupoolError):
    """A state file is missing, corrupt, or of an unknown schema."""

    exit_code = EXIT_FAILED


class DataError(GpupoolError):
    """Accounting input we cannot read at all (a malformed *line* is counted, not raised)."""

    exit_code = EXIT_DATA


class InternalError(GpupoolError):
    exit_code = EXIT_INTERNAL
