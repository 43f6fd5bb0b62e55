"""The files the sandbox's daemons read, rendered from ``templates/sandbox`` and the pool config.

``<root>/etc/gpupool.yaml`` is the user's pool config with the sandbox's paths and node
addresses; gres.conf and the slurm.conf includes come from ``gpupool gres install --live``
as on a real cluster; slurm.conf, slurmdbd.conf and my.cnf are the sandbox's own.  Each
writer returns the files it changed: they decide which daemons restart.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from slurm_gpupool.controller.gres_install import install, installed_paths, render
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.errors import SlurmUnavailableError, StateError
from slurm_gpupool.sandbox import mariadb
from slurm_gpupool.sandbox.paths import SandboxPaths, write_if_changed
from slurm_gpupool.sandbox.plan import Ports
from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version
from slurm_gpupool.slurm.versions import preempt_user_signal_setting
from slurm_gpupool.util.resources import templates_dir

DEF_MEM_PER_CPU_MIB = 1024
# The marker of the block the Ansible role manages in slurm.conf (its _gpupool_marker)
ANSIBLE_ROLE_MARKER = "# {mark} slurm_gpupool (managed by Ansible, role gpupool)"


def hook_programs(dest: Path, changed: set[Path]) -> dict[str, str]:
    """The hook programs slurmd runs: the isolated launchers (``-IS``: no site, no ``.pth``
    files; #29) of this interpreter, written into ``dest`` as the Ansible role writes them
    (``python -m slurm_gpupool.hooks.launcher``); their paths by hook."""
    from slurm_gpupool.hooks import launcher

    try:
        changed.update(Path(written) for written in launcher.install(str(dest)))
        mps_control_stand_in(dest, changed)
    except (OSError, RuntimeError, ValueError) as e:
        raise StateError(
            f"hook launchers in {dest}", str(e), hint="pip install the package (scripts/bootstrap)"
        ) from None
    return {name.removeprefix("gpupool-"): str(dest / name) for name in launcher.HOOKS}


MPS_CONTROL = "nvidia-cuda-mps-control"  # <root>/libexec/: the simulated GPUs' stand-in (hooks.mps_control)


def mps_control_stand_in(dest: Path, changed: set[Path]) -> None:
    """The stand-in ``nvidia-cuda-mps-control`` for the simulated GPUs (``hw/sim/mps_control.py``),
    beside the launchers; the sandbox's config names it as ``hooks.mps_control``."""
    from slurm_gpupool.hw.sim.mps_control import stand_in_text, write_stand_in

    path = dest / MPS_CONTROL
    if not path.is_file() or path.read_text() != stand_in_text():
        write_stand_in(str(path))
        changed.add(path)


def render_template(template: str, **context: Any) -> str:
    """One of ``templates/sandbox/*.j2`` (strict: an undefined name is an error, not a blank)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "sandbox")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    return env.get_template(template).render(**context)


def sandbox_slurm_version(env: dict[str, str]) -> tuple[int, int, int]:
    """The Slurm the sandbox runs (``slurmd -V`` before its slurm.conf exists); the oldest
    release we support, as ``gres install`` assumes, where no Slurm answers."""

    try:
        return slurm_version(SlurmRunner(env=env))
    except SlurmUnavailableError:
        return (22, 5, 0)


def write_pool_config(paths: SandboxPaths, derived: dict[str, Any], source: str) -> bool:
    """``<root>/etc/gpupool.yaml``: ``derived`` (the sandbox's view of ``source``); True if changed."""
    import yaml

    text = "# Written by `gpupool sandbox up` from " + source + "; edits are overwritten.\n"
    text += yaml.safe_dump(derived, sort_keys=False)
    return write_if_changed(paths.pool_config, text)


def install_gres(cfg: Any) -> set[Path]:
    """`gpupool gres install --live` into <root>/etc; returns the files it changed."""

    paths = installed_paths(cfg)
    before = {p: p.read_text() if p.exists() else None for p in paths.values()}
    rendered = render(cfg, cfg.all_nodes(), None)
    install(cfg, rendered, backup=False)
    install_support_files(cfg, rendered.installed_layout())
    return {p for p in paths.values() if p.read_text() != before[p]}


def healthcheck_shim(paths: SandboxPaths, program: str, changed: set[Path]) -> str:
    """slurmd runs the HealthCheckProgram with SLURMD_NODENAME as its only variable,
    so a program there finds /etc/slurm/slurm.conf, not the sandbox's.  This shim
    (what a site with slurm.conf elsewhere would install too) names it."""
    shim = paths.etc / "gpupool-healthcheck"
    text = (
        "#!/bin/sh\n"
        "# Written by `gpupool sandbox up`: slurmd gives the HealthCheckProgram no SLURM_CONF.\n"
        f"SLURM_CONF={paths.slurm_conf}; export SLURM_CONF\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH\n"
        f'exec {program} "$@"\n'
    )
    if write_if_changed(shim, text, 0o755):
        changed.add(shim)
    return str(shim)


def write_daemon_configs(
    paths: SandboxPaths,
    cluster: str,
    ports: Ports,
    db_password: str,
    version: tuple[int, int, int],
) -> set[Path]:
    """slurm.conf (hooks, the ``Include``s of ``gres install``), slurmdbd.conf (600: it holds
    the database password) and my.cnf; returns the files changed, the health check shim too."""
    p = paths
    changed: set[Path] = set()
    common = {
        "root": str(p.root),
        "cluster": cluster,
        "controller_host": socket.gethostname().split(".")[0],
        "ports": ports,
        "munge_socket": str(p.munge_socket),
    }
    hooks = hook_programs(p.root / "libexec", changed)
    hooks["healthcheck"] = healthcheck_shim(p, hooks["healthcheck"], changed)
    slurm_conf = render_template(
        "slurm.conf.j2",
        **common,
        hooks=hooks,
        role_marker=ANSIBLE_ROLE_MARKER,
        nodes_conf=str(p.nodes_conf),
        gres_types_conf=str(p.gres_types_conf),
        def_mem_per_cpu_mib=DEF_MEM_PER_CPU_MIB,
        preempt_user_signal=preempt_user_signal_setting(version),
    )
    if write_if_changed(p.slurm_conf, slurm_conf):
        changed.add(p.slurm_conf)
    dbd = render_template(
        "slurmdbd.conf.j2",
        **common,
        db_user=mariadb.DB_USER,
        db_password=db_password,
        db_name=mariadb.DB_NAME,
    )
    if write_if_changed(p.slurmdbd_conf, dbd, 0o600):
        changed.add(p.slurmdbd_conf)
    my_cnf = render_template(
        "my.cnf.j2",
        datadir=str(p.mysql_data),
        socket=str(p.mysql_socket),
        pidfile=str(p.mysql_dir / "mysqld.pid"),
        log=str(p.log / "mysqld.log"),
        tmpdir=str(p.mysql_tmp),
        port=ports.mysql,
    )
    if write_if_changed(p.my_cnf, my_cnf):
        changed.add(p.my_cnf)
    return changed
