"""CSV cells a spreadsheet will not run (OWASP's "CSV Injection").

A cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a
formula to Excel, LibreOffice and Google Sheets: a job named ``=HYPERLINK(...)`` would
run when an admin opens the export.  OWASP's remedy: such a cell gets a leading single
quote, which spreadsheets show as text.  A cell that already starts with a quote gets one
more, so reading the export back (``--from``) removes exactly one and every name
round-trips.  Only text columns are touched: a negative number stays a number.
"""

from __future__ import annotations

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MARK = "'"


def neutralise(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose text cells a spreadsheet reads as text."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(str)
        elif s.dtype != object and not pd.api.types.is_string_dtype(s.dtype):
            continue
        text = s.map(
            lambda v: v if not isinstance(v, str) else (MARK + v if v.startswith((*FORMULA_START, MARK)) else v)
        )
        out[col] = text
    return out


def unmark(s: pd.Series) -> pd.Series:
    """What :func:`neutralise` wrote, read back: one leading quote removed where it added one."""
    text = s.astype(str)
    marked = text.str.startswith(MARK) & text.str.slice(1, 2).isin([*FORMULA_START, MARK])
    return text.where(~marked, text.str.slice(1))
