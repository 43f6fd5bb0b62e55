"""gpupool-sbatch as a program, against a recording stand-in for sbatch (#15.13).

The stand-in (``SLURM_GPUPOOL_SBATCH``) writes what it was given (arguments, the
script it was pointed at, stdin) as JSON, so each test sees exactly what the real
sbatch would have received.  The real-Slurm behaviour is in
tests/integration/test_submit_slurm.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.pool.submit_catalog import submit_catalog

TOP = Path(__file__).resolve().parents[2]

FAKE = r"""#!PYTHON
import json, os, sys
args = sys.argv[1:]
rec = {"argv0": sys.argv[0], "argv": args, "script": None, "stdin": None, "gres_env": os.environ.get("SLURM_GPUPOOL_GRES")}
for a in args:
    if a.startswith("/proc/self/fd/"):
        with open(a, "rb") as f:
            rec["script"] = f.read().decode("utf-8", "surrogateescape")
if "--wrap" not in args and not any(a.startswith(("--wrap=", "/proc/")) for a in args) and "--version" not in args:
    if sys.stdin is not None:  # None: closed, as sbatch finds it after `<&-`
        rec["stdin"] = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
with open(os.environ["FAKE_SBATCH_OUT"], "w") as f:
    json.dump(rec, f)
print("Submitted batch job 1")
"""


@pytest.fixture
def site(tmp_path: Path) -> dict:
    raw = copy.deepcopy(yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text()))
    raw.pop("mig_parted")
    raw["schedule"]["timezone"] = "UTC"
    raw["schedule"]["rules"] = []  # night all the time: day-only requests are for later
    etc = tmp_path / "etc"
    etc.mkdir()
    catalog = submit_catalog(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")), installed="night")
    (etc / "gpupool-submit.json").write_text(json.dumps(catalog))
    fake = tmp_path / "sbatch"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "SLURM_CONF": str(etc / "slurm.conf"),
        "SLURM_GPUPOOL_SBATCH": str(fake),
        "FAKE_SBATCH_OUT": str(tmp_path / "sbatch.json"),
    }
    return {"root": tmp_path, "etc": etc, "env": env, "out": tmp_path / "sbatch.json"}


def wrapper(site: dict, *args: str, stdin: str | None = "", timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.submit.wrapper", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.PIPE,
        capture_output=True,
        text=True,
        env=site["env"],
        timeout=timeout,
    )


def given(site: dict) -> dict:
    return json.loads(site["out"].read_text())


@pytest.mark.parametrize(
    "argv",
    [
        ["-J", "--gpu-mem=18G", "--wrap", "true"],  # the job's name, not our option
        ["--comment", "--explain", "--wrap", "true"],  # the comment's text
        ["--job-name", "--dry-run", "--wrap", "true"],
        ["-o", "--submit-anyway", "--wrap", "true"],
    ],
)
def test_an_option_value_that_looks_like_ours_is_the_options_value(site: dict, argv: list[str]):
    res = wrapper(site, *argv)
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == argv and res.stderr == ""


def test_after_double_dash_nothing_is_ours(site: dict, tmp_path: Path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho $@\n")
    res = wrapper(site, "-J", "x", "--", str(script), "--dry-run", "--gpu-mem=8G")
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == ["-J", "x", "--", str(script), "--dry-run", "--gpu-mem=8G"]


def test_version_and_usage_do_not_wait_for_a_script_on_stdin(site: dict):
    res = wrapper(site, "--version", stdin=None, timeout=10)  # stdin: an open pipe nobody writes to
    assert res.returncode == 0 and given(site)["argv"] == ["--version"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--gres=gpu:²", "--wrap", "x"],
        ["--gres=gpu:a100:²", "--wrap", "x"],
        ["--gpus=٣", "--wrap", "x"],
        ["--gpus-nvlink=²", "--wrap", "x"],
        ["--gpu-mem=" + "9" * 400, "--wrap", "x"],
        ["--gpu-mem=1e400G", "--wrap", "x"],
        ["--gpu-share=nan", "--wrap", "x"],
        ["--gpu-share=1/0", "--wrap", "x"],
    ],
)
def test_odd_numbers_are_refused_or_passed_on_never_a_traceback(site: dict, argv: list[str]):
    res = wrapper(site, *argv)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr
    if res.returncode == 2:
        assert res.stderr.startswith("gpupool-sbatch: ")


@pytest.mark.parametrize(
    "catalog",
    [
        "[]",
        '{"schema": 1}',
        '{"schema": 1, "layouts": {"x": {"offers": [{"kind": "whole"}]}}}',
        '{"schema": 1, "layouts": {"x": {"offers": []}}, "schedule": {"default": "y", "rules": []}}',
        '{"schema": 1, "layouts": {"x": {"offers": []}}, "schedule": {"default": "x", "rules": [{}]}}',
        "[" * 100000,
        "",
    ],
)
def test_a_damaged_catalog_is_reported_and_ignored(site: dict, catalog: str):
    (site["etc"] / "gpupool-submit.json").write_text(catalog)
    plain = wrapper(site, "-J", "a", "--wrap", "true")
    assert plain.returncode == 0 and given(site)["argv"] == ["-J", "a", "--wrap", "true"], plain.stderr
    assert "ignoring" in plain.stderr and "Traceback" not in plain.stderr
    friendly = wrapper(site, "--gpu-mem=18G", "--wrap", "true")
    assert friendly.returncode == 2 and "no gpupool submit catalog" in friendly.stderr


def test_friendly_options_in_sbatch_lines_are_understood(site: dict, tmp_path: Path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -t 10 --gpu-mem=18G\n#SBATCH --mem=4G\npython train.py\n")
    res = wrapper(site, str(script), "arg")
    assert res.returncode == 0, res.stderr
    rec = given(site)
    fd_path = next(a for a in rec["argv"] if a.startswith("/proc/self/fd/"))
    assert rec["argv"] == ["--job-name=train.sh", "--gres=gpu:a30:1", fd_path, "arg"]
    assert rec["script"] == (
        "#!/bin/bash\n#gpupool-sbatch: #SBATCH -t 10 --gpu-mem=18G\n#SBATCH -t 10\n#SBATCH --mem=4G\npython train.py\n"
    )
    # the command line wins; a script on stdin stays on stdin; a name of its own is kept
    res = wrapper(site, "--gpu-mem=70G", "-J", "mine", stdin=script.read_text())
    rec = given(site)
    assert res.returncode == 0 and rec["argv"] == ["--gres=gpu:h100_80gb_hbm3:1", "-J", "mine"], res.stderr
    assert "#gpupool-sbatch: #SBATCH -t 10 --gpu-mem=18G\n#SBATCH -t 10\n" in rec["stdin"]


def test_a_typed_request_only_a_later_layout_offers_says_when(site: dict):
    res = wrapper(site, "--gres=gpu:1g.5gb:1", "--wrap", "true")  # MIG: by day only
    assert res.returncode == 75 and "offered only by layout day" in res.stderr, res.stderr
    assert not site["out"].exists()
    assert wrapper(site, "--gres=gpu:a100:1", "--wrap", "true").returncode == 0  # offered now
    assert wrapper(site, "--gres=gpu:tpu:1", "--wrap", "true").returncode == 0  # not ours to judge


def test_the_gres_request_is_handed_down_to_the_job(site: dict, tmp_path: Path):
    """#15.11 on 22.05: a job does not see its request (no SLURM_TRES_PER_NODE), so the
    TaskProlog cannot narrow an --exclusive allocation unless the wrapper hands it down."""
    assert wrapper(site, "--exclusive", "--gres=gpu:a100:2", "--wrap", "true").returncode == 0
    assert given(site)["gres_env"] == "gpu:a100:2"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:a100:1\n#SBATCH --exclusive\ntrue\n")
    assert wrapper(site, str(script)).returncode == 0 and given(site)["gres_env"] == "gpu:a100:1"
    assert wrapper(site, "--gres=gpu:a100:2", str(script)).returncode == 0  # the command line wins
    assert given(site)["gres_env"] == "gpu:a100:2"
    assert wrapper(site, "--wrap", "true").returncode == 0 and given(site)["gres_env"] is None
    # submitted from inside such a job: its own request, never the inherited one
    site["env"]["SLURM_GPUPOOL_GRES"] = "gpu:1g.10gb:1"
    assert wrapper(site, "--exclusive", "--wrap", "true").returncode == 0 and given(site)["gres_env"] is None
    assert wrapper(site, "--gpus-per-node=a100:1,1g.5gb:2", "--wrap", "true").returncode == 0
    assert given(site)["gres_env"] == "gpu:a100:1,gpu:1g.5gb:2"


# --- #26 items 1-4: read as sbatch reads, pass scripts byte for byte ---------------------------


def raw_wrapper(
    site: dict, *args: str, stdin: bytes | int | None = b"", timeout: float = 20
) -> subprocess.CompletedProcess:
    """The wrapper with bytes on stdin (or a file descriptor); output as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.submit.wrapper", *args],
        input=stdin if isinstance(stdin, bytes) else None,
        stdin=stdin if isinstance(stdin, int) else None,
        capture_output=True,
        env=site["env"],
        timeout=timeout,
    )


def test_an_option_whose_value_is_the_next_word_does_not_end_the_options(site: dict):
    """#26 item 1: --exclude was not known to take a value, so a100n1 was taken for the
    script and --gpu-mem/--dry-run went to sbatch raw: the job was submitted."""
    res = wrapper(site, "--exclude", "a100n1", "--gpu-mem=9G", "--dry-run", "--wrap", "hostname")
    assert res.returncode == 0, res.stderr
    assert not site["out"].exists()  # shown, not submitted
    assert res.stdout.split("\n")[0].endswith("sbatch --gres=gpu:a30:1 --exclude a100n1 --wrap hostname")


def test_a_word_sbatch_takes_as_a_value_is_not_ours(site: dict):
    """#26 item 1: sbatch takes --gpu-mem=9G as --exclude's node list; the wrapper took it for
    its own option and left --exclude to swallow --wrap."""
    argv = ["--exclude", "--gpu-mem=9G", "--wrap", ""]
    res = wrapper(site, *argv)
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == argv


@pytest.mark.parametrize(
    ("argv", "ran"),
    [
        (["--partit", "gpu", "--gpu-mem=18G", "--wrap", "x"], ["--gres=gpu:a30:1", "--partit", "gpu", "--wrap", "x"]),
        (["--job", "n", "--gpu-mem=18G", "--wrap", "x"], ["--gres=gpu:a30:1", "--job", "n", "--wrap", "x"]),
        (["-xa100n1", "--gpu-mem=18G", "--wrap", "x"], ["--gres=gpu:a30:1", "-xa100n1", "--wrap", "x"]),
        (  # the constraint edited where the user put it; the -H before it in its word stays
            ["-HC", "a100", "--gres=gpu:a100:2", "--wrap", "x"],
            ["-H", "--constraint=a100&nvlink2", "--gres=gpu:a100:2", "--wrap", "x"],
        ),
    ],
)
def test_abbreviations_and_clusters_as_getopt_reads_them(site: dict, argv: list[str], ran: list[str]):
    res = wrapper(site, *argv)
    assert res.returncode == 0, res.stderr
    got = given(site)["argv"]
    assert got == ran


def test_a_command_line_sbatch_refuses_goes_to_sbatch_as_typed_or_is_refused_with_ours(site: dict):
    plain = wrapper(site, "--gre", "gpu:1", "--wrap", "x")  # ambiguous: sbatch says so
    assert plain.returncode == 0 and given(site)["argv"] == ["--gre", "gpu:1", "--wrap", "x"]
    site["out"].unlink()
    ours = wrapper(site, "--gre", "gpu:1", "--gpu-mem=9G", "--wrap", "x")
    assert ours.returncode == 2 and "option '--gre' is ambiguous" in ours.stderr and "Traceback" not in ours.stderr
    assert not site["out"].exists()


def test_wrap_in_a_later_component_reads_no_script(site: dict):
    """#26 item 4: ``-N 1 : -N 1 --wrap hostname`` waited for a script on stdin."""
    r, w = os.pipe()  # an open pipe nobody writes to
    try:
        res = raw_wrapper(site, "-N", "1", ":", "-N", "1", "--wrap", "hostname", stdin=r, timeout=15)
    finally:
        os.close(r)
        os.close(w)
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == ["-N", "1", ":", "-N", "1", "--wrap", "hostname"]


LATIN1 = "#!/bin/bash\n# caf\xe9 na\xefve\n#SBATCH --gpu-mem=18G -J 'd\xe9j\xe0 vu'\necho \xa9 2025\n".encode("latin-1")
PAYLOAD = b"#!/bin/sh\n#SBATCH --gpu-mem=18G\ntail -n +5 $0 | tar x\nexit 0\n" + bytes(range(1, 256)) * 64


@pytest.mark.parametrize("script", [LATIN1, PAYLOAD], ids=["latin-1", "self-extracting"])
def test_a_script_with_friendly_directives_keeps_every_other_byte(site: dict, tmp_path: Path, script: bytes):
    """#26 item 3: the script was decoded with errors="replace" and encoded again: every
    non-UTF-8 byte became U+FFFD, and the job ran another script."""
    path = tmp_path / "job.sh"
    path.write_bytes(script)
    for how in ("path", "stdin"):
        res = raw_wrapper(site, *([str(path)] if how == "path" else []), stdin=script if how == "stdin" else b"")
        assert res.returncode == 0, res.stderr
        rec = given(site)
        sent = (rec["script"] if how == "path" else rec["stdin"]).encode("utf-8", "surrogateescape")
        line = next(x for x in script.split(b"\n") if x.startswith(b"#SBATCH"))
        rest = line.replace(b" --gpu-mem=18G", b"")
        kept = b"#gpupool-sbatch: " + line + (b"\n" + rest if rest != b"#SBATCH" else b"")
        assert sent == script.replace(line, kept), how
        assert "--gres=gpu:a30:1" in rec["argv"]


def test_a_script_without_friendly_directives_goes_on_untouched(site: dict):
    script = b"#!/bin/sh\n#SBATCH -J \xff\xfe\necho \x80\n"
    res = raw_wrapper(site, stdin=script)
    assert res.returncode == 0, res.stderr
    assert given(site)["stdin"].encode("utf-8", "surrogateescape") == script


@pytest.mark.parametrize("how", ["path", "stdin"])
def test_dev_zero_is_refused_plainly(site: dict, how: str):
    """#26 item 3: reading /dev/zero whole gave a MemoryError traceback."""
    if how == "path":
        res = raw_wrapper(site, "/dev/zero")
    else:
        with open("/dev/zero", "rb") as zero:
            res = raw_wrapper(site, stdin=zero.fileno())
    err = res.stderr.decode()
    assert res.returncode == 2 and "NUL byte" in err and "Traceback" not in err, err
    assert not site["out"].exists()


def test_a_closed_stdin_or_an_unreadable_script_is_said_plainly(site: dict):
    """A closed standard input (``<&-``: Python's sys.stdin is None) and a script path whose
    read fails (``/proc/self/mem``: EIO) ended in tracebacks: the first now goes on to sbatch
    with no script read (sbatch says what it lacks), the second is refused with the error."""
    closed = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.submit.wrapper", "--gres=gpu:a100:1"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=site["env"],
        timeout=20,
        preexec_fn=lambda: os.close(0),
    )
    assert b"Traceback" not in closed.stderr and closed.returncode == 0, closed.stderr
    assert given(site)["argv"] == ["--gres=gpu:a100:1"]
    mem = raw_wrapper(site, "--gres=gpu:a100:1", "/proc/self/mem")
    err = mem.stderr.decode()
    assert mem.returncode == 2 and "/proc/self/mem cannot be read" in err and "Traceback" not in err, err


def test_the_wrapper_reads_sbatchs_input_variables_as_sbatch_does(site: dict):
    """SBATCH_CONSTRAINT from the user's environment: the constraint the wrapper adds keeps it."""
    site["env"]["SBATCH_CONSTRAINT"] = "ib"
    res = wrapper(site, "--gres=gpu:a100:2", "--wrap", "true")
    assert res.returncode == 0, res.stderr
    assert [a for a in given(site)["argv"] if a.startswith("--constraint=")] == ["--constraint=ib&nvlink2"]


def test_scripts_are_read_bounded(tmp_path: Path):
    from slurm_gpupool.submit.script import ScriptError, read_all, read_path

    r, w = os.pipe()
    os.write(w, b"y\n" * 5000)
    os.close(w)
    with pytest.raises(ScriptError, match="too big: more than 8192 bytes"):
        read_all(r, "the script on standard input", limit=8192)
    os.close(r)
    big = tmp_path / "big.sh"
    big.write_bytes(b"#!/bin/sh\n" + b"#" * 9000)
    with pytest.raises(ScriptError, match="too big"):
        read_path(str(big), limit=8192)
    assert read_path(str(tmp_path / "missing.sh")) == (None, True)


def test_a_script_from_a_pipe_is_handed_over_not_lost(site: dict, tmp_path: Path):
    """``gpupool-sbatch <(make-script)``: the wrapper reads the pipe for #SBATCH lines, so
    sbatch gets the bytes it read (the pipe is empty by then), under the pipe's name."""
    import threading

    fifo = tmp_path / "63"
    os.mkfifo(fifo)
    body = b"#!/bin/sh\n#SBATCH -t 5\necho \xe9\n"

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(body)

    t = threading.Thread(target=feed)
    t.start()
    res = raw_wrapper(site, str(fifo), "arg")
    t.join(10)
    assert res.returncode == 0, res.stderr
    rec = given(site)
    assert rec["script"].encode("utf-8", "surrogateescape") == body
    assert rec["argv"][0] == "--job-name=63" and rec["argv"][2] == "arg"


def test_the_script_is_found_where_sbatch_looks(site: dict, tmp_path: Path):
    """A bare name is looked up in --chdir first, then PATH (sbatch's search_path): the
    wrapper reads that file's #SBATCH lines, not one of the same name where it runs."""
    there = tmp_path / "there"
    there.mkdir()
    (there / "job.sh").write_text("#!/bin/sh\n#SBATCH --gpu-mem=70G\ntrue\n")
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.submit.wrapper", f"--chdir={there}", "job.sh"],
        capture_output=True,
        text=True,
        env=site["env"],
        cwd=tmp_path,
        timeout=20,
    )
    assert res.returncode == 0, res.stderr
    assert "--gres=gpu:h100_80gb_hbm3:1" in given(site)["argv"]


def test_the_catalog_names_the_release_whose_options_the_wrapper_reads(site: dict, tmp_path: Path):
    """`gres install` records the cluster's Slurm in the catalog; the wrapper then reads the
    command line with that release's table (26.05's --requeue takes a value, 22.05's not)."""
    from slurm_gpupool.controller.support_files import render_support_files

    raw = copy.deepcopy(yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text()))
    raw.pop("mig_parted")
    raw["slurm"] = {**raw.get("slurm", {}), "version": "26.05.5", "config_dir": str(tmp_path)}
    files = render_support_files(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")), "night")
    assert json.loads(files[tmp_path / "gpupool-submit.json"])["sbatch"] == "26.05"
    catalog = json.loads((site["etc"] / "gpupool-submit.json").read_text())
    for release, code in (("26.05", 0), ("22.05", 2)):
        (site["etc"] / "gpupool-submit.json").write_text(json.dumps({**catalog, "sbatch": release}))
        res = wrapper(site, "--requeue=yes", "--gpu-mem=18G", "--wrap", "x")
        assert res.returncode == code, (release, res.stderr)
    assert "option '--requeue' doesn't allow an argument" in res.stderr


def test_an_untyped_request_takes_the_sites_preferred_type(site: dict):
    """#26 item 6: several whole-GPU types refused ``--gres=gpu:1``; with
    ``submit.untyped_gpu_types`` it gets the first preferred type offered now."""
    refused = wrapper(site, "--gres=gpu:1", "--wrap", "x")
    assert refused.returncode == 2 and "several whole-GPU types" in refused.stderr
    catalog = json.loads((site["etc"] / "gpupool-submit.json").read_text())
    catalog["rules"]["untyped_gpu_types"] = ["v100", "a100"]
    (site["etc"] / "gpupool-submit.json").write_text(json.dumps(catalog))
    res = wrapper(site, "--explain", "--gres=gpu:1", "--wrap", "x")
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == ["--gres=gpu:v100:1", "--wrap", "x"]
    assert "the site's preferred whole-GPU type offered now, v100 (submit.untyped_gpu_types)" in res.stderr
