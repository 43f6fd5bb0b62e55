"""No config value reaches a file it should not (#26 items 10-14).

Every value a rendered file carries is checked where the config is parsed (a path is one
line, a file name one name, a cron schedule cron's grammar, a node name no Slurm keyword),
and every template quotes for its format (util/quoting.py): a hostile value ends in exit
78 naming the file and the key, or in a file where it is one well-formed value.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.controller.gres_install import install, render
from slurm_gpupool.controller.job_submit import render_job_submit
from slurm_gpupool.controller.schedule_install import on_calendar, render_schedule
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.quoting import comment, cron_command, lua_string, systemd_command

from .test_config import BASE

TOP = Path(__file__).resolve().parents[2]


def with_(path: str, value: Any) -> dict:
    """BASE with ``a.b.c`` set to ``value``."""
    cfg = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    d = cfg
    for k in parents:
        d = d.setdefault(k, {})
    d[last] = value
    return cfg


def refused(raw: dict, key: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        parse_config(raw, "/etc/slurm-gpupool/gpupool.yaml")
    assert e.value.exit_code == 78 and e.value.key == key, (e.value.key, e.value.why)
    return e.value


# -- item 10: slurm.dev_root ------------------------------------------------------------


@pytest.mark.parametrize(
    "dev_root",
    [
        "/dev\nNodeName=evil Name=gpu File=/dev/null",
        "/dev\rx",
        "/dev x",
        "/dev,/tmp",
        "/dev#x",
        "/dev=x",
        "/dev/[0-3]",
        "/dev%n",
        "dev",
        "/srv/../etc",
        "/srv/{nodes}/dev",
        "",
    ],
)
def test_a_dev_root_that_would_change_a_gres_conf_line_is_refused(dev_root: str):
    err = refused(with_("slurm.dev_root", dev_root), "slurm.dev_root")
    assert "dev_root" in err.why


def test_a_dev_root_of_path_characters_and_node_renders_one_value_per_file():
    cfg = parse_config(with_("slurm.dev_root", "/var/tmp/sb-1/nodes/{node}/dev"), "/etc/g.yaml")
    r = render(cfg, ["pcie01"], "night", mig_ids="simulated")
    files = [line.split("File=")[1].split()[0] for line in r["gres.conf"].splitlines() if "File=" in line]
    assert files == [f"/var/tmp/sb-1/nodes/pcie01/dev/nvidia{i}" for i in range(4)]


# -- item 11: repartition.cron ------------------------------------------------------------


@pytest.mark.parametrize(
    "cron",
    [
        "@reboot root touch /tmp/x\n@hourly",
        "*/5 * * * *\n* * * * * root touch /tmp/x",
        "@reboot",
        "@every 5m",
        "60 * * * *",
        "*/0 * * * *",
        "a b c d e",
        "% * * * *",
        "1-2-3 * * * *",
        "5-1 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "* * * * mon-xyz",
        "*/5 * * *",
        "*/5 * * * * *",
        "*/5\t* * * *",
        "",
    ],
)
def test_a_cron_schedule_cron_would_refuse_or_that_adds_a_line_is_refused(cron: str):
    refused(with_("repartition.cron", cron), "repartition.cron")


@pytest.mark.parametrize(
    "cron",
    ["*/5 * * * *", "0 8-20/2 * * mon-fri", "30 7 1,15 jan-jun *", "0 0 * * 7", "0  3 * * sun", "@hourly", "@daily"],
)
def test_schedules_cron_reads_are_taken_and_render_one_crontab_line(cron: str):
    cfg = parse_config(with_("repartition.cron", cron), "/etc/slurm-gpupool/gpupool.yaml")
    assert cfg.repartition.cron == cron
    ((_, text),) = render_schedule(cfg, gpupool="/usr/bin/gpupool").items()
    jobs = [line for line in text.splitlines() if line and not line.startswith("#") and "=" not in line.split()[0]]
    assert jobs == [
        f"{cron} root /usr/bin/gpupool --config /etc/slurm-gpupool/gpupool.yaml repartition --scheduled --quiet"
    ]


def test_cron_keywords_become_systemd_calendar_events():
    assert [on_calendar(k) for k in ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly")] == [
        "hourly",
        "daily",
        "daily",
        "weekly",
        "monthly",
        "yearly",
    ]


# -- item 12: the config file's own path ---------------------------------------------------


def _site(tmp_path: Path, dirname: str) -> Path:
    """BASE installed in a directory named ``dirname``, with its config_dir beside it."""
    d = tmp_path / dirname
    d.mkdir()
    raw = with_("slurm.config_dir", str(tmp_path / "etc"))
    path = d / "gpupool.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


HOSTILE_DIRS = ["a%d\nNodeName=evil Gres=gpu:9", "pct%n%%h", "sp ace'q\"uote$HOME\\x", "tab\there\r\u2028"]


def _rendered_files(cfg: Any) -> dict[str, str]:
    r = render(cfg, ["gpu01", "pcie01"], "day", mig_ids="simulated")
    out = {role: r[role] for role in ("gres.conf", "nodes.conf", "gres-types.conf")}
    out["job_submit.lua"] = render_job_submit(cfg)
    out.update(render_schedule(cfg, systemd=True, gpupool="/usr/bin/gpupool"))
    return out


@pytest.mark.parametrize("dirname", HOSTILE_DIRS)
def test_a_config_path_with_newlines_and_specifiers_adds_no_line_to_any_rendered_file(tmp_path: Path, dirname: str):
    """The same config at a plain path and at a hostile one: every file has the same lines,
    but for the path, which stays on its own line (comments escape it)."""
    plain = _rendered_files(load_config(_site(tmp_path, "plain")))
    path = _site(tmp_path, dirname)
    hostile = _rendered_files(load_config(path))
    assert plain.keys() == hostile.keys()
    for name, text in hostile.items():
        a, b = plain[name].splitlines(), text.splitlines()
        assert len(a) == len(b), (name, b)
        for x, y in zip(a, b, strict=True):
            assert x == y or "plain" in x, (name, x, y)
            if y.startswith(("#", "--")):
                assert comment(str(path)) in y or "plain" not in x
    assert not any(line.startswith("NodeName=evil") for t in hostile.values() for line in t.splitlines())


def test_cron_refuses_a_config_path_it_cannot_hold_and_escapes_percent(tmp_path: Path):
    path = _site(tmp_path, HOSTILE_DIRS[0])
    with pytest.raises(ConfigError) as e:
        render_schedule(load_config(path), gpupool="/usr/bin/gpupool")
    assert e.value.exit_code == 78 and "cron" in e.value.why and "\\x0a" in e.value.why
    ok = load_config(_site(tmp_path, "pct%n%%h"))
    ((_, text),) = render_schedule(ok, gpupool="/usr/bin/gpupool").items()
    job = text.splitlines()[-1]
    # cron turns an unescaped % into a newline and feeds the rest to stdin (crontab(5))
    assert re.search(r"(?<!\\)%", job) is None and "pct\\%n\\%\\%h" in job


def _systemd_words(value: str) -> list[str]:
    """The words of an ``ExecStart=`` value as systemd.syntax(7) reads them (the subset we
    write: plain words, double quotes with C escapes, %% and $$)."""
    words, i = [], 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}
    while i < len(value):
        if value[i] == " ":
            i += 1
            continue
        word = ""
        if value[i] == '"':
            i += 1
            while value[i] != '"':
                if value[i] == "\\":
                    c = value[i + 1]
                    if c in "xu":
                        digits = 2 if c == "x" else 4
                        word += chr(int(value[i + 2 : i + 2 + digits], 16))
                        i += 2 + digits
                        continue
                    word += escapes[c]
                    i += 2
                    continue
                word += value[i]
                i += 1
            i += 1
        else:
            while i < len(value) and value[i] != " ":
                word += value[i]
                i += 1
        words.append(word.replace("%%", "%").replace("$$", "$"))
    return words


@pytest.mark.parametrize("dirname", HOSTILE_DIRS)
def test_systemd_execstart_carries_any_config_path_as_one_word(tmp_path: Path, dirname: str):
    path = _site(tmp_path, dirname)
    units = render_schedule(load_config(path), systemd=True, gpupool="/usr/bin/gpupool")
    service = units["/etc/systemd/system/gpupool-repartition.service"]
    (line,) = [x for x in service.splitlines() if x.startswith("ExecStart=")]
    argv = ["/usr/bin/gpupool", "--config", str(path), "repartition", "--scheduled", "--quiet"]
    assert _systemd_words(line.removeprefix("ExecStart=")) == argv
    (doc,) = [x for x in service.splitlines() if x.startswith("Documentation=")]
    assert " " not in doc and re.search(r"%(?!%)", doc.replace("%%", "")) is None


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_itself_reads_the_quoted_execstart_as_the_argument_list(tmp_path: Path):
    """systemd-analyze verify loads the unit and dumps its command line: one --config word,
    the path's newline as \\n and the specifier resolved to a single %."""
    path = _site(tmp_path, HOSTILE_DIRS[0])
    units = render_schedule(load_config(path), systemd=True, gpupool="/usr/bin/gpupool")
    unit = tmp_path / "gpupool-repartition.service"
    unit.write_text(units["/etc/systemd/system/gpupool-repartition.service"])
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = [x.strip() for x in (proc.stdout + proc.stderr).splitlines() if "Command Line:" in x]
    if not lines:
        pytest.skip(f"systemd-analyze printed no command line here: {proc.stderr[-300:]}")
    assert lines[0] == (
        'Command Line: /usr/bin/gpupool --config "' + str(path.parent).replace("\n", "\\n") + '/gpupool.yaml" '
        "repartition --scheduled --quiet"
    )


def test_quoting_helpers_round_trip():
    assert cron_command(["/bin/x", "a%b", "c d"]) == "/bin/x a\\%b 'c d'"  # sh then gets a%b
    with pytest.raises(ValueError):
        cron_command(["/bin/x", "a\nb"])
    assert _systemd_words(systemd_command(["/bin/x", "a b", '"q"', "50%", "$HOME", "t\tn\n", "\x01\u2028"])) == [
        "/bin/x",
        "a b",
        '"q"',
        "50%",
        "$HOME",
        "t\tn\n",
        "\x01\u2028",
    ]
    assert "\n" not in comment("a\nb\\") and comment("a\nb\\") == "a\\x0ab\\x5c"


def test_lua_strings_read_back_byte_exact_in_lua_5_1():
    from lupa import lua51

    lua = lua51.LuaRuntime(encoding=None)
    for s in ["plain", 'q"uote\\', "new\nline\r\x00", "ünï\u2028", "]]--", "\\u00e9"]:
        got = lua.eval(lua_string(s))
        assert got == s.encode("utf-8"), (s, got)


# -- item 13: the installed file names ------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "name", "why"),
    [
        ("gres_conf", "slurm.conf", "overwrite slurm.conf"),
        ("nodes_include", "slurmdbd.conf", "overwrite"),
        ("gres_include", "job_submit.lua", "overwrite"),
        ("nodes_include", "gpupool-hooks.json", "overwrite"),
        ("nodes_include", "gres.conf", "overwrite"),
        ("gres_conf", "../x", "not a file name"),
        ("gres_include", "/etc/passwd", "not a file name"),
        ("gres_conf", "", "not a file name"),
        ("gres_conf", ".", "not a file name"),
        ("gres_conf", "..", "not a file name"),
        ("nodes_include", "a b.conf", "not a name"),
        ("nodes_include", "x\ny", "not a name"),
        ("nodes_include", 7, "expected a string"),
    ],
)
def test_a_file_name_that_would_reach_another_file_is_refused(role: str, name: Any, why: str):
    err = refused(with_(f"slurm.{role}", name), f"slurm.{role}")
    assert why in err.why


def test_two_roles_may_not_share_a_file():
    raw = with_("slurm.nodes_include", "gpupool.conf")
    raw["slurm"]["gres_include"] = "gpupool.conf"
    assert "replace" in refused(raw, "slurm.gres_include").why
    raw = with_("slurm.nodes_include", "gres.conf")  # the default gres_conf's name
    refused(raw, "slurm.nodes_include")


def test_install_writes_only_the_named_files_in_config_dir(tmp_path: Path):
    raw = with_("slurm.config_dir", str(tmp_path / "etc"))
    raw["slurm"].update(gres_conf="gres.conf", nodes_include="pool-nodes.conf", gres_include="pool-types.conf")
    cfg = parse_config(raw, str(tmp_path / "g.yaml"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm.conf").write_text("ClusterName=x\n")
    install(cfg, render(cfg, cfg.all_nodes(), "night", mig_ids="simulated"))
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == [
        "gres.conf",
        "pool-nodes.conf",
        "pool-types.conf",
        "slurm.conf",
    ]
    assert (tmp_path / "etc" / "slurm.conf").read_text() == "ClusterName=x\n"


# -- item 14: node names Slurm reads as keywords -----------------------------------------------


@pytest.mark.parametrize("nodes", ["DEFAULT", "default", "ALL", "all", "localhost", "LocalHost", "gpu01,DEFAULT"])
def test_slurm_keywords_are_no_node_names(nodes: str):
    raw = copy.deepcopy(BASE)
    raw["nodesets"]["a30"]["nodes"] = nodes
    err = refused(raw, "nodesets.a30.nodes")
    assert "Slurm" in err.why


def test_keyword_like_names_that_are_not_keywords_are_node_names():
    raw = copy.deepcopy(BASE)
    raw["nodesets"]["a30"]["nodes"] = "default1,allnode,localhost2"
    assert parse_config(raw, "/etc/g.yaml").nodesets["a30"].nodes == ("allnode", "default1", "localhost2")


def test_path_settings_are_one_line_without_dotdot(monkeypatch: pytest.MonkeyPatch):
    for key, value in [
        ("paths.state_dir", "/var/lib/x\ny"),
        ("paths.run_dir", "run"),
        ("paths.spool_dir", "/var/spool/../../etc"),
        ("slurm.config_dir", "/etc/slurm\n"),
        ("slurm.config_dir", "etc/slurm"),
        ("hooks.dcgm_job_mapping_dir", "/run/dcgm\x00"),
        ("hooks.kmsg", "kmsg"),
        ("reports.spool_dirs", ["/srv/a", "/srv/b\nc"]),
    ]:
        err = refused(with_(key, value), key if key != "reports.spool_dirs" else "reports.spool_dirs[1]")
        assert err.why
    monkeypatch.setenv("SLURM_GPUPOOL_STATE_DIR", "/x\ny")
    with pytest.raises(ConfigError) as e:
        parse_config(copy.deepcopy(BASE), "/etc/g.yaml")
    assert e.value.source == "$SLURM_GPUPOOL_STATE_DIR"


@pytest.mark.parametrize(("launch", "ok"), [("2m", True), ("9m", True), ("10m", False), ("1h", False)])
def test_a_launch_timeout_must_be_shorter_than_the_command_timeout(launch: str, ok: bool):
    """An srun stuck in its prolog is cancelled after launch_timeout, which only helps within
    the command's own time (10 minutes by default)."""
    raw = with_("repartition.launch_timeout", launch)
    if ok:
        assert parse_config(raw, "/etc/slurm-gpupool/gpupool.yaml").repartition.launch_timeout_s > 0
    else:
        refused(raw, "repartition.launch_timeout")
