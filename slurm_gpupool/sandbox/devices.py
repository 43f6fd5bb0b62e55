"""The simulated device files of an emulated node, as REAL character devices.

Slurm stats every ``File=`` of gres.conf; for a plain file it still schedules
the GRES but sets neither ``SLURM_JOB_GPUS`` nor ``CUDA_VISIBLE_DEVICES``
(DESIGN.md §3).  So, like ``mknod /dev/nvidia0 c 195 0``, we create character
devices, under the sandbox root instead of ``/dev``.  Nothing ever opens them.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from slurm_gpupool.core.gres.devices import MAX_CIS, MAX_GIS, ci_cap_minor, gi_cap_minor, mig_minors_table
from slurm_gpupool.sandbox.paths import write_if_changed

NVIDIA_MAJOR = 195  # /dev/nvidia<minor>, /dev/nvidiactl (195, 255)
NVIDIACTL_MINOR = 255
# nvidia-caps gets a dynamic major on real systems (see /proc/devices); any fixed one will do here.
CAPS_MAJOR = 237


def device_plan(gpu_minors: Iterable[int]) -> dict[str, tuple[int, int]]:
    """Relative path → (major, minor) of every device file of a node with these GPUs.

    ``nvidia<minor>``, ``nvidiactl``, and under ``nvidia-caps/`` the MIG config and
    monitor caps plus the GI and CI access caps of every GI 0..14 and CI 0..7.
    """
    plan: dict[str, tuple[int, int]] = {"nvidiactl": (NVIDIA_MAJOR, NVIDIACTL_MINOR)}
    plan["nvidia-caps/nvidia-cap1"] = (CAPS_MAJOR, 1)  # config
    plan["nvidia-caps/nvidia-cap2"] = (CAPS_MAJOR, 2)  # monitor
    for minor in sorted(gpu_minors):
        plan[f"nvidia{minor}"] = (NVIDIA_MAJOR, minor)
        for gi in range(MAX_GIS):
            cap = gi_cap_minor(minor, gi)
            plan[f"nvidia-caps/nvidia-cap{cap}"] = (CAPS_MAJOR, cap)
            for ci in range(MAX_CIS):
                cap = ci_cap_minor(minor, gi, ci)
                plan[f"nvidia-caps/nvidia-cap{cap}"] = (CAPS_MAJOR, cap)
    return plan


@functools.cache
def mig_minors_text() -> str:
    """The content of ``/proc/driver/nvidia-caps/mig-minors`` (4,322 lines, the same for every
    node: made once a process, not once per node at every `sandbox start`)."""
    return "".join(f"{name} {minor}\n" for name, minor in mig_minors_table())


STAMP = ".gpupool-devices"  # the digest of the plan last made in full


def _entries(directory: Path, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every name, the special ones) in ``directory``: special means neither a regular file,
    a directory nor a symlink, from the directory's own entry types (``d_type``: no stat per
    file)."""
    names, special = set(), set()
    with os.scandir(directory) as it:
        for e in it:
            names.add(prefix + e.name)
            if not (e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False) or e.is_symlink()):
                special.add(prefix + e.name)
    return names, special


def ensure_char_devices(dev_root: Path, plan: dict[str, tuple[int, int]]) -> int:
    """``mknod`` what is missing or wrong; returns how many files were (re)created.

    A node has about a thousand cap files and every ``gpupool sandbox start`` or restart
    checks every node's: after a full check the plan's digest is kept in :data:`STAMP`, and
    while it matches and every planned name is still a special file (one listing each), the
    per-file ``lstat`` is skipped (it was a third of such a command's CPU)."""
    import hashlib  # here: `sandbox stop` and the like need no OpenSSL

    (dev_root / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(repr(sorted(plan.items())).encode()).hexdigest()
    stamp = dev_root / STAMP
    top, top_special = _entries(dev_root)
    caps, caps_special = _entries(dev_root / "nvidia-caps", "nvidia-caps/")
    try:
        if stamp.read_text() == digest and (top_special | caps_special).issuperset(plan):
            return 0
    except OSError:
        pass
    existing = top | caps  # one listing instead of a failing lstat per missing file (slow on gVisor)
    made = 0
    old_umask = os.umask(0)  # mode 0666 as the driver creates them (not cut by the umask)
    try:
        for rel, (major, minor) in plan.items():
            path = dev_root / rel
            want = os.makedev(major, minor)
            if rel in existing:
                st = os.lstat(path)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
                    continue
                path.unlink()
            os.mknod(path, stat.S_IFCHR | 0o666, want)
            made += 1
    finally:
        os.umask(old_umask)
    write_if_changed(stamp, digest)
    return made


def ensure_mig_minors(proc_root: Path) -> bool:
    """Write ``<proc_root>/driver/nvidia-caps/mig-minors`` if it differs; True if written."""
    path = proc_root / "driver" / "nvidia-caps" / "mig-minors"
    text = mig_minors_text()
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".mig-minors.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True
