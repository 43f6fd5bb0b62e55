"""The Ansible role's public variables agree everywhere they are declared.

Each lives in three places: ``defaults/main.yml`` (value), ``meta/argument_specs.yml``
(type, default, checked when the role starts) and the table in ``ansible/README.md``.
A variable added to one and forgotten in another is a silent defect; this finds it
without running Ansible (the integration test runs it).  ``ansible-lint`` on the production
profile needs no Slurm either, so it runs here, once.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "gpupool"
README = ROLE.parents[1] / "README.md"
TYPES = {"str": str, "bool": bool, "int": int, "list": list, "dict": dict}


def defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def specs() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def readme_rows() -> dict[str, tuple[str, str]]:
    """``| `name` | type | `default` | ... |`` rows: name -> (type, default text)."""
    rows = re.findall(r"^\| `(gpupool_\w+)` \| ([^|]+?) \| (.*?) \|", README.read_text(), re.M)
    return {name: (kind.split()[0], default) for name, kind, default in rows}  # "list of str" -> list


def test_every_public_variable_is_in_defaults_specs_and_readme():
    spec = specs()
    public = set(defaults())
    assert all(name.startswith("gpupool_") for name in public | set(spec))
    # gpupool_host_role is required (set by each play of site.yml), so it has no default
    assert set(spec) - public == {"gpupool_host_role"} and spec["gpupool_host_role"]["required"]
    assert public <= set(spec), sorted(public - set(spec))
    assert set(readme_rows()) == set(spec), sorted(set(readme_rows()) ^ set(spec))


@pytest.mark.parametrize("name", sorted(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())))
def test_defaults_match_their_spec_and_readme_row(name: str):
    value, spec = defaults()[name], specs()[name]
    assert isinstance(value, TYPES[spec["type"]]), (name, value, spec["type"])
    assert spec.get("default") == value, (name, spec.get("default"), value)
    kind, shown = readme_rows()[name]
    assert kind == spec["type"]
    if "{{" not in str(value):  # a templated default is described, not shown
        assert shown.startswith("`") and shown.endswith("`"), (name, shown)
        cell = shown[1:-1]
        assert (cell if isinstance(value, str) and cell != '""' else yaml.safe_load(cell)) == value, (name, shown)
    assert spec.get("description"), name


def test_the_sandbox_marks_its_hooks_with_the_roles_marker():
    """The role replaces the sandbox's own hook lines with its include (blockinfile, same
    marker): from Slurm 24.11 a second ``Prolog=`` would run a second prolog."""
    from slurm_gpupool.sandbox.configs import ANSIBLE_ROLE_MARKER

    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["_gpupool_marker"] == ANSIBLE_ROLE_MARKER
    template = (ROLE.parents[2] / "templates" / "sandbox" / "slurm.conf.j2").read_text()
    block = template.split('role_marker.replace("{mark}", "BEGIN")')[1].split('role_marker.replace("{mark}", "END")')[0]
    assert "Prolog=" in block and "Epilog=" in block and "TaskProlog=" in block and "HealthCheckProgram=" in block
    hooks = re.compile(r"^(Prolog|Epilog|TaskProlog|HealthCheckProgram)=", re.M)
    assert len(hooks.findall(template)) == len(hooks.findall(block)) == 4  # no hook outside the block


def test_ansible_lint_production_profile(tmp_path):
    lint = shutil.which("ansible-lint", path=str(Path(sys.executable).parent))
    assert lint, "ansible-lint is not installed beside this Python: `scripts/bootstrap dev` installs it"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "ANSIBLE_HOME": str(tmp_path)}
    proc = subprocess.run(
        [lint, "--offline", "--profile", "production"],
        cwd=ROLE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
