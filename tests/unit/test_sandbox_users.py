"""The sandbox's accounting records (``sandbox/accounting.py``) and unprivileged users
(``sandbox/users.py``): the records ``up`` registers, once, against a fake ``sacctmgr`` that
keeps them as slurmdbd would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_gpupool.sandbox.accounting import ACCOUNT, MARKER_TEXT, Accounting
from slurm_gpupool.sandbox.users import ACCOUNTS, USERS, as_user


class FakeSacctmgr:
    """``sacctmgr -i add cluster|account|user`` and ``-n -P show cluster|account|assoc``."""

    def __init__(self) -> None:
        self.clusters: set[str] = set()
        self.accounts: set[str] = set()
        self.assocs: set[tuple[str, str]] = set()  # (account, user)
        self.adds: list[tuple[str, ...]] = []

    def __call__(self, *argv: str, timeout_s: float = 20, input_text: str | None = None):
        assert argv[0] == "sacctmgr"
        args = argv[1:]
        out = ""
        if args[:2] == ("-i", "add"):
            self.adds.append(args[2:])
            kind, names = args[2], args[3].split(",")
            opts = dict(a.split("=", 1) for a in args[4:])
            if kind == "cluster":
                self.clusters |= set(names)
            elif kind == "account":
                self.accounts |= set(names)
            elif kind == "user":
                assert opts["Account"] in self.accounts | {ACCOUNT}, opts
                self.assocs |= {(opts["Account"], n) for n in names}
        elif args[:4] == ("-n", "-P", "show", "cluster"):
            out = "\n".join(self.clusters)
        elif args[:4] == ("-n", "-P", "show", "account"):
            out = "\n".join(self.accounts)
        elif args[:4] == ("-n", "-P", "show", "assoc"):
            where = dict(a.split("=", 1) for a in args[4:] if not a.startswith("format="))
            rows = [(a, u) for a, u in self.assocs if where.get("account", a) == a]
            fmt = next(a for a in args if a.startswith("format=")).removeprefix("format=")
            out = "\n".join(u if fmt == "User" else f"{a}|{u}" for a, u in rows)
        return subprocess.CompletedProcess(argv, 0, out + "\n", "")


def test_up_registers_three_users_in_two_accounts_once(tmp_path: Path):
    fake = FakeSacctmgr()
    marker = tmp_path / "accounting.done"
    Accounting(fake, tmp_path / "slurmdbd.log", lambda _m: None).register("c1", marker)
    assert len({u.name for u in USERS}) >= 3 and len(ACCOUNTS) >= 2
    assert fake.accounts >= {ACCOUNT, *ACCOUNTS}
    assert fake.assocs == {(ACCOUNT, "root")} | {(u.account, u.name) for u in USERS}
    assert "root" not in {u.name for u in USERS}
    # one add for the users' accounts, one per account for its users
    assert sum(a[0] == "account" and a[1] != ACCOUNT for a in fake.adds) == 1
    assert sum(a[0] == "user" and a[1] != "root" for a in fake.adds) == len(ACCOUNTS)
    n = len(fake.adds)
    Accounting(fake, tmp_path / "slurmdbd.log", lambda _m: None).register("c1", marker)
    assert len(fake.adds) == n  # the marker: a later up asks nothing


def test_a_sandbox_registered_before_the_users_gets_them_and_nothing_twice(tmp_path: Path):
    fake = FakeSacctmgr()
    fake.clusters, fake.accounts, fake.assocs = {"c1"}, {ACCOUNT}, {(ACCOUNT, "root")}
    marker = tmp_path / "accounting.done"
    marker.write_text("ok\n")  # what an earlier release of the sandbox wrote
    Accounting(fake, tmp_path / "slurmdbd.log", lambda _m: None).register("c1", marker)
    assert fake.assocs == {(ACCOUNT, "root")} | {(u.account, u.name) for u in USERS}
    assert [a[0] for a in fake.adds] == ["account"] + ["user"] * len(ACCOUNTS)
    assert marker.read_text() == MARKER_TEXT


def test_as_user_runs_the_command_as_that_user():
    assert as_user("gpupool-bob", ["sbatch", "--wrap", "id"]) == [
        "runuser",
        "-u",
        "gpupool-bob",
        "--",
        "sbatch",
        "--wrap",
        "id",
    ]
