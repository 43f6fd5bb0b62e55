"""The ONE place where errors become messages and exit codes.

``gpupool: <what failed>: <why>`` then optionally ``hint: <what to do>``, on
stderr.  A traceback only with ``--debug`` (or ``SLURM_GPUPOOL_DEBUG=1``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import click

from slurm_gpupool.errors import EXIT_INTERNAL, EXIT_USAGE, GpupoolError


def _print_traceback() -> None:
    import traceback  # only with --debug: not at every start

    traceback.print_exc()


def format_error(e: GpupoolError, prog: str = "gpupool") -> str:
    text = f"{prog}: {e.message()}"
    if e.hint:
        text += f"\nhint: {e.hint}"
    return text


def run(entry: Callable[[], object], prog: str = "gpupool") -> int:
    """Run a click command in non-standalone mode and translate what it raises."""
    debug = "--debug" in sys.argv[1:] or os.environ.get("SLURM_GPUPOOL_DEBUG") == "1"
    try:
        rc = entry()
        return rc if isinstance(rc, int) else 0
    except GpupoolError as e:
        if debug:
            _print_traceback()
        click.echo(format_error(e, prog), err=True)
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code if e.exit_code else EXIT_USAGE
    except click.exceptions.Abort:
        click.echo(f"{prog}: aborted", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo(f"{prog}: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: say so, keep the traceback for --debug
        if debug:
            _print_traceback()
        click.echo(f"{prog}: internal error: {type(e).__name__}: {e}", err=True)
        click.echo("hint: this is a bug in slurm_gpupool; rerun with --debug and report the traceback", err=True)
        return EXIT_INTERNAL
