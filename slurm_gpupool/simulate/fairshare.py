"""The fair-share factor as Slurm's Fair Tree computes it (pure).

``priority/multifactor`` weighs each job's association by how much of its share it has used
(``PriorityWeightFairshare``).  From Slurm's source (``fair_tree.c``, ``priority_multifactor.c``;
the same rules at 22.05, 24.11 and 26.05):

* **Usage.** Each association's ``usage_raw`` is billing-seconds, decayed: every round of the
  decay thread (every ``PriorityCalcPeriod`` from slurmctld's start) first multiplies every
  association's usage by ``df ** dt`` (``df = 1 - 0.693 / PriorityDecayHalfLife`` a second,
  ``dt`` the seconds since the last round: ``_apply_decay``), then adds each running job's
  ``billing * run * df ** run`` for its run since the last round (``_apply_new_usage``) to
  its association and every ancestor.  A job that ends adds its run since the last round then
  (``priority_p_job_end``, with ``AccountingStorageEnforce=limits``, the sandbox's), decayed at
  the next round with the rest.  A job's billing is its allocated CPUs unless the partition
  sets ``TRESBillingWeights`` (sacct's ``AllocTRES`` ``billing=``).
* **The tree** (``_calc_tree_fs``).  Among siblings, each one's level fair-share is its
  shares over the siblings' sum (``S``) over its usage over its parent's (``U``): ``S / U``,
  infinite where ``U`` is 0, 0 where ``S`` is.  Siblings are walked by level fair-share,
  highest first (users before accounts at a tie), depth first; every user association gets
  a rank counting down from the number of user associations, a user tied with the one before
  it (or the first of an account tied with the one before it) its rank, and its factor is
  its rank over that number.  The factor moves only in the decay thread's rounds; a job
  submitted between them gets its association's last one.

Associations are ``(account, user)``: ``user`` "" for an account's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Assoc = tuple[str, str]  # (account, user); user "" for the account itself
LN2_SLURM = 0.693  # ``_init_decay_vars``: not math.log(2)


def decay_factor(half_life_s: float) -> float:
    """Slurm's per-second decay of usage (``decay_factor``); 1.0 without a half-life."""
    return 1.0 - LN2_SLURM / half_life_s if half_life_s > 0 else 1.0


class FairTree:
    """The associations (``sacctmgr show assoc``), their usage and their factors."""

    def __init__(
        self,
        accounts: Iterable[tuple[str, str, int]],
        users: Iterable[tuple[str, str, int]],
        usage: Iterable[tuple[str, str, float]] = (),
        half_life_s: float = 7 * 86400.0,
    ) -> None:
        """``accounts``: (account, parent account, shares), the root account's parent "";
        ``users``: (account, user, shares); ``usage``: (account, user, usage_raw) of user
        associations to start from (accounts' usage is their users' sum, as slurmctld
        rebuilds it at its start: ``load_assoc_usage``)."""
        self.df = decay_factor(half_life_s)
        self.parent: dict[Assoc, Assoc | None] = {}
        self.shares: dict[Assoc, int] = {}
        self.children: dict[Assoc, list[Assoc]] = {}
        for account, parent, shares in accounts:
            key = (account, "")
            self.parent[key] = (parent, "") if parent else None
            self.shares[key] = shares
        for account, user, shares in users:
            key = (account, user)
            self.parent[key] = (account, "")
            self.shares[key] = shares
        for key, up in self.parent.items():  # in the order given: slurmdbd's order breaks ties
            if up is not None:
                self.children.setdefault(up, []).append(key)
        self.usage: dict[Assoc, float] = dict.fromkeys(self.parent, 0.0)
        for account, user, raw in usage:
            self.add((account, user), raw)
        self.users = [k for k in self.parent if k[1]]
        self.factor: dict[Assoc, float] = dict.fromkeys(self.users, 0.0)

    def decay(self, dt: float) -> None:
        """Every association's usage after ``dt`` seconds (a round's ``_apply_decay``)."""
        if dt > 0 and self.df < 1.0:
            f = self.df**dt
            for k in self.usage:
                self.usage[k] = max(self.usage[k] * f, 2.2250738585072014e-308)  # DBL_MIN

    def run(self, assoc: Assoc, billing: float, seconds: float) -> float:
        """A job's run of ``seconds`` added to its association and its ancestors; the amount."""
        if seconds <= 0 or assoc not in self.parent:
            return 0.0
        amount = billing * seconds * self.df**seconds
        self.add(assoc, amount)
        return amount

    def round(self, last: float, now: float, runs: Iterable[tuple[Assoc, float, float, float]]) -> dict[Assoc, float]:
        """A round of the decay thread at ``now`` (epoch s; the last one at ``last``): each run
        (association, billing, start, end; end past ``now`` while it runs) since the last
        round counted as Slurm counts it (an ended one at its end, then every usage decayed,
        then the running ones), and the tree ranked; the factors."""
        runs = list(runs)
        for assoc, billing, start, end in runs:
            if end <= now:
                self.run(assoc, billing, end - max(last, start))
        self.decay(now - last)
        for assoc, billing, start, end in runs:
            if end > now:
                self.run(assoc, billing, now - max(last, start))
        return self.rank()

    def add(self, assoc: Assoc, amount: float) -> None:
        key: Assoc | None = assoc
        while key is not None and key in self.usage:
            self.usage[key] += amount
            key = self.parent[key]

    def rank(self) -> dict[Assoc, float]:
        """Every user association's factor now (``_apply_priority_fs``): rank over count."""
        count = len(self.users)
        roots = [k for k, p in self.parent.items() if p is None]
        state = [count, count]  # rank, rnt
        for root in roots:
            self._walk(self.children.get(root, []), root, state, False, count)
        return self.factor

    def _level_fs(self, key: Assoc, parent: Assoc, level_shares: int) -> float:
        if level_shares <= 0 or self.shares[key] <= 0:
            return 0.0
        s = self.shares[key] / level_shares
        up = self.usage[parent]
        u = self.usage[key] / up if up > 0 else 0.0
        return math.inf if u == 0 else s / u

    def _walk(self, siblings: list[Assoc], parent: Assoc, state: list[int], account_tied: bool, count: int) -> None:
        level_shares = sum(max(0, self.shares[k]) for k in siblings)
        fs = {k: self._level_fs(k, parent, level_shares) for k in siblings}
        ordered = sorted(siblings, key=lambda k: (-fs[k], not k[1]))  # stable: the tree's order at a tie
        prev: float | None = None
        for i, key in enumerate(ordered):
            tied = (i == 0 and account_tied) or prev == fs[key]
            if key[1]:
                if not tied:
                    state[0] = state[1]
                self.factor[key] = state[0] / count
                state[1] -= 1
            else:
                self._walk(self.children.get(key, []), key, state, tied, count)
            prev = fs[key]


SSHARE_COLUMNS = ("Account", "User", "RawShares", "RawUsage")


def read_sshare(
    text: str, source: str
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]], list[tuple[str, str, float]]]:
    """The association tree, its shares and its usage from ``sshare -a -l -P`` (or any
    ``sshare -a -P`` whose columns include Account, User, RawShares and RawUsage): (accounts
    as (account, parent, shares), users as (account, user, shares), usage as (account, user,
    billing-seconds)), for :class:`FairTree`.  An account's parent is the account above it
    one level less indented (sshare indents the Account column by depth); ``RawShares=parent``
    (Fair Tree then ranks its children with its parent's) is refused: not replayed."""
    from slurm_gpupool.errors import UsageError

    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise UsageError(source, "empty: expected the output of `sshare -a -l -P`")
    header = lines[0].split("|")
    missing = [c for c in SSHARE_COLUMNS if c not in header]
    if missing:
        raise UsageError(f"{source}, line 1", f"no {', '.join(missing)} column: expected `sshare -a -l -P`'s header")
    col = {c: header.index(c) for c in SSHARE_COLUMNS}
    accounts: list[tuple[str, str, int]] = []
    users: list[tuple[str, str, int]] = []
    usage: list[tuple[str, str, float]] = []
    above: list[str] = []  # the accounts on the path to the current depth
    for number, line in enumerate(lines[1:], 2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise UsageError(f"{source}, line {number}", f"{len(cells)} fields, the header has {len(header)}")
        raw_account, user = cells[col["Account"]], cells[col["User"]].strip()
        account = raw_account.strip()
        depth = len(raw_account) - len(raw_account.lstrip(" "))
        shares_text, usage_text = cells[col["RawShares"]].strip(), cells[col["RawUsage"]].strip()
        where = f"{source}, line {number}"
        if shares_text == "parent":
            raise UsageError(where, f"{account} {user}: RawShares=parent is not replayed")
        try:
            shares = int(shares_text) if shares_text else 1  # (the root's is not shown)
            used = float(usage_text) if usage_text else 0.0
        except ValueError:
            raise UsageError(where, f"RawShares {shares_text!r}, RawUsage {usage_text!r}: not numbers") from None
        if user:
            users.append((account, user, shares))
            usage.append((account, user, used))
            continue
        if depth > len(above):
            raise UsageError(where, f"account {account} is indented below no account")
        del above[depth:]
        accounts.append((account, above[-1] if above else "", shares))
        above.append(account)
    if not accounts:
        raise UsageError(source, "no account in it: expected the output of `sshare -a -l -P`")
    return accounts, users, usage
