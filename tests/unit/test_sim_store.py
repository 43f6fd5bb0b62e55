"""The simulated GPUs' state file: parsed once per process, re-read when another process
changed it (the prolog, the CLI and the repartitioner share it under a lock)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.errors import StateError
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import apply_node, assert_node

# A second process: for each line "<a> <b>" on stdin, it writes the state twice (value a,
# then value b, both of one width, so the file keeps its size) and answers "ok".  Two
# writes between the first process's reads free an inode and may reuse it at once, within
# one mtime tick: only a change of identity the reader can rely on shows it.
WRITER = """
import sys
from slurm_gpupool.hw.sim.state import SimStore
store = SimStore(sys.argv[1])
for line in sys.stdin:
    for value in line.split():
        with store.modify() as st:
            st["calls"]["probe"] = int(value)
    print("ok", flush=True)
"""

CONFIG = {
    "version": 1,
    "nodesets": {"hgx": {"nodes": "hgx1", "machine": "hgx-h100"}},
    "layouts": {"day": {"hgx": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": "whole"}}},
}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    path = tmp_path / "sim" / "hgx1.json"
    create_node_state(path, "hgx1", find_machine("hgx-h100"))
    return path


def test_every_change_by_another_process_is_seen_by_the_next_read(node: Path) -> None:
    store = SimStore(node)
    store.read()
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(node)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        for n in range(1000, 1300):
            writer.stdin.write(f"{n + 5000} {n}\n")
            writer.stdin.flush()
            assert writer.stdout.readline() == "ok\n"
            assert store.read()["calls"]["probe"] == n
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0


def test_a_write_of_this_process_is_the_cache_and_the_next_write_starts_from_the_file(node: Path) -> None:
    store, other = SimStore(node), SimStore(node)
    with store.modify() as st:
        st["calls"]["probe"] = 1
    parses = store.parses
    assert store.read()["calls"]["probe"] == 1
    assert store.parses == parses  # what it wrote, not parsed again
    with other.modify() as st:  # the same process, another handle: like a second process
        st["calls"]["probe"] = 2
    assert store.read()["calls"]["probe"] == 2
    with store.modify() as st:
        assert st["calls"]["probe"] == 2  # the body sees the file, not a stale cache
        st["calls"]["probe"] = 3
    assert other.read()["calls"]["probe"] == 3


def test_a_failed_modification_leaves_neither_file_nor_cache_changed(node: Path) -> None:
    store = SimStore(node)
    with pytest.raises(RuntimeError), store.modify() as st:
        st["calls"]["probe"] = 7
        raise RuntimeError("boom")
    assert "probe" not in store.read()["calls"]
    assert "probe" not in SimStore(node).read()["calls"]


def test_a_removed_or_broken_file_is_an_error_not_the_cache(node: Path) -> None:
    store = SimStore(node)
    store.read()
    node.with_name("broken.json").write_text("{not json")
    node.with_name("broken.json").replace(node)
    with pytest.raises(StateError, match="unreadable"):
        store.read()
    node.unlink()
    with pytest.raises(StateError, match="no such file"):
        store.read()


def test_a_node_assert_parses_the_state_once_however_many_nvml_calls_it_makes(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = parse_config(CONFIG, "test.yaml", Path("."))
    with open_backend("hgx1", node.parent) as b:
        apply_node(b, cfg, "day", tmp_path / "state")
    calls: list[str] = []
    real_call = SimLibraryBase._call

    def counting(self: SimLibraryBase, name: str, args: tuple) -> int:
        calls.append(name)
        return real_call(self, name, args)

    monkeypatch.setattr(SimLibraryBase, "_call", counting)
    with open_backend("hgx1", node.parent) as b:
        assert assert_node(cfg, "day", b.inventory()) == []
        store = b._library.store  # type: ignore[attr-defined]
    assert len(calls) > 100  # the inventory walks every GPU, GPU instance and MIG device
    assert store.parses == 1


def test_a_forked_child_that_closed_its_inherited_descriptors_still_writes_under_the_lock(node: Path) -> None:
    """The stand-in MPS daemon forks with the state cached (its descriptor held open), closes
    every inherited descriptor, then registers itself.  The cache's descriptor number is then
    free, and the lock's open may get it: dropping the cache must not close the lock (it did:
    the registration then ran unlocked, and lost a concurrent CUDA client's update, so that
    client's allocations found no context; the 22.05 MPS integration test, twice in CI)."""
    import fcntl
    import os

    store = SimStore(node)
    store.read()  # cached, its descriptor held
    held = store._held.fd if store._held is not None else -1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child reports through the pipe)
        code = b"?"
        try:
            os.closerange(3, w)  # as the daemon does (mps_control.start_daemon)
            os.closerange(w + 1, 65536)
            # In the daemon the cache's descriptor is the lowest free one (a fresh process's
            # first open); here, fill the ones below it so that the lock's open gets it.
            fillers = []
            while (fd := os.open(os.devnull, os.O_RDONLY)) != held:
                fillers.append(fd)
            os.close(fd)
            with store.modify() as st:
                probe = os.open(str(node) + ".lock", os.O_RDWR)
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    code = b"unlocked"
                except BlockingIOError:
                    code = b"locked"
                finally:
                    os.close(probe)
                st["calls"]["probe"] = 1
        except BaseException as e:  # reported, not raised, in a forked child
            code = repr(e).encode()
        os.write(w, code)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    assert got == b"locked", got
    assert SimStore(node).read()["calls"]["probe"] == 1
