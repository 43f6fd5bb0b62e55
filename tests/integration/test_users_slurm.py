"""The sandbox's unprivileged users (issue #27): each runs a GPU job in its own account, and
the TaskProlog, run as that user, gives it its devices' UUIDs (it once exited 127 for every
user but root, when the hook's interpreter was not theirs to run)."""

from __future__ import annotations

import re

from slurm_gpupool.sandbox.users import ACCOUNTS

from .repartition_support import job_files, wait_jobs_done

UUID = re.compile(r"^(GPU|MIG)-[0-9a-f-]+$")


def test_each_unprivileged_user_runs_a_gpu_job_in_its_account_with_the_task_prolog(sandbox):
    users = sandbox.sandbox.users
    assert len({u.name for u in users}) >= 3 and {u.account for u in users} == set(ACCOUNTS)
    assert len(ACCOUNTS) >= 2
    shared = sandbox.root / "jobs-users"  # where every user's job can write
    shared.mkdir(exist_ok=True)
    shared.chmod(0o1777)
    jobs = {}
    for u in users:
        out = shared / f"{u.name}.out"
        out.unlink(missing_ok=True)
        jobs[u.name] = sandbox.sbatch_as(
            u.name, "--chdir", str(shared), *job_files(out), "-t", "1", "--gres=gpu:v100:1",
            "--wrap", "id -un; echo CVD=$CUDA_VISIBLE_DEVICES",
        )  # fmt: skip
    states = wait_jobs_done(sandbox, list(jobs.values()))
    assert set(states.values()) == {"COMPLETED"}, states
    fields = "JobID,User,Account,State"
    shown = sandbox.run(["sacct", "-X", "-n", "-P", "-j", ",".join(jobs.values()), "-o", fields]).stdout
    got = {line.split("|")[0]: line.split("|")[1:] for line in shown.splitlines() if line}
    for u in users:
        assert got[jobs[u.name]] == [u.name, u.account, "COMPLETED"], (u, got)
        name, cvd = (shared / f"{u.name}.out").read_text().split()
        assert name == u.name
        # Slurm's own value is a GRES index ("0"); the TaskProlog's export is the device's UUID
        assert UUID.match(cvd.removeprefix("CVD=")), (u.name, cvd)
