"""cons_tres's choice of node for a one-node job (``simulate.cores``): the run of consecutive
candidates with the fewest available CPUs, in it the node with the fewest; a node's available
CPUs are those of the sockets holding the job's free records."""

from __future__ import annotations

from types import SimpleNamespace

from slurm_gpupool.simulate.cores import best_fit, bind, eval_nodes, fit_cpus, rebind, unbind
from slurm_gpupool.simulate.pool import gres_socket
from slurm_gpupool.simulate.records import SimNode
from slurm_gpupool.simulate.state import GPU, SHARD


def dgx(index: int, busy_socket1: int = 0) -> SimNode:
    """A DGX A100 in the day layout: 1g.5gb on both sockets, 3g.20gb and whole A100s on
    socket 1; 64 cores a socket, two threads a core; ``busy_socket1`` cores taken there."""
    return SimNode(
        name=f"a100n{index + 1}",
        index=index,
        layout="day",
        free={"1g.5gb": 32, "3g.20gb": 2, "a100": 2},
        cap={"1g.5gb": 32, "3g.20gb": 2, "a100": 2},
        shared={},
        shares={},
        eq={},
        sock_free={"1g.5gb": [28, 4, 0], "3g.20gb": [0, 2, 0], "a100": [0, 2, 0]},
        cores_free=[64, 64 - busy_socket1],
        tpc=2,
    )


def hgx_shared(cores: list[int], sockets: tuple[int, ...]) -> SimNode:
    """An H100 node whose GPUs are all time-sliced (4 shares each, none in use), the GPUs on
    ``sockets``, ``cores`` idle per socket."""
    return SimNode(
        name="h100n1",
        index=3,
        layout="day",
        free={},
        cap={},
        shared={"h100_shared": [0] * len(sockets)},
        shares={"h100_shared": 4},
        eq={},
        cores_free=cores,
        tpc=2,
        gpu_sock={"h100_shared": sockets},
    )


def test_the_run_of_consecutive_nodes_with_the_fewest_cpus_then_its_tightest_node():
    assert best_fit([(0, 126), (1, 124)]) == 1  # one run: the tighter node
    assert best_fit([(0, 128), (1, 128)]) == 0  # ties: the first
    # two runs, {0, 1} with 250 CPUs and {3} with 200: the run with fewer CPUs wins, even
    # though node 1 alone is tighter than node 3
    assert best_fit([(0, 130), (1, 120), (3, 200)]) == 2
    assert best_fit([(0, None), (1, None), (4, None)]) == 0  # no sockets known: the first node (first fit)
    # a node whose records' sockets have no idle core is no candidate: it does not win with
    # its 0, and it splits the run it sat in ({0} and {2} are runs of their own)
    assert best_fit([(0, 130), (1, 0), (2, 120)]) == 2
    assert best_fit([(0, 0), (1, 0)]) == 0  # unless every node is such a node


def test_a_jobs_cpus_are_those_of_the_socket_of_its_free_records():
    n = dgx(0, busy_socket1=3)
    assert fit_cpus(n, [(GPU, "3g.20gb", 1, -1)]) == 2 * 61  # socket 1 only
    # 1g.5gb sits on both: the socket with the most idle cores that has one (socket 0)
    assert fit_cpus(n, [(GPU, "1g.5gb", 1, -1)]) == 2 * 64
    # thirty of them: socket 0's 28, then socket 1's too
    assert fit_cpus(n, [(GPU, "1g.5gb", 30, -1)]) == 2 * (64 + 61)
    n.sock_free["1g.5gb"][0] = 0
    assert fit_cpus(n, [(GPU, "1g.5gb", 1, -1)]) == 2 * 61


def test_binding_takes_a_core_and_the_records_on_their_socket_and_gives_them_back():
    n = dgx(0)
    bind(n, 7, [(GPU, "3g.20gb", 1, -1)])
    assert n.sock_free["3g.20gb"] == [0, 1, 0] and n.cores_free == [64, 63]
    bind(n, 8, [(GPU, "1g.5gb", 1, -1)])
    assert n.sock_free["1g.5gb"] == [27, 4, 0] and n.cores_free == [63, 63]
    got = unbind(n, 7)
    assert unbind(n, 7) is None  # twice (a node reshaped since): nothing more
    assert n.sock_free["3g.20gb"] == [0, 2, 0] and n.cores_free == [63, 64]
    rebind(n, 7, got)  # a what-if that removed it (preemption's test) is over
    assert n.sock_free["3g.20gb"] == [0, 1, 0] and n.cores_free == [63, 63] and 7 in n.bound


def test_a_time_sliced_gpu_binds_the_job_to_that_gpus_socket():
    n = hgx_shared(cores=[56, 50], sockets=(0, 1))
    bind(n, 1, [(SHARD, "h100_shared", 2, 1)])
    assert n.cores_free == [56, 49]


def test_time_sliced_records_are_counted_per_socket_as_slurm_counts_them():
    """``_build_sock_gres_by_topo``: a shard request counts the free shards of each socket's
    GPUs not given whole, a GPU request the idle GPUs; sockets by most idle cores."""
    n = hgx_shared(cores=[50, 56], sockets=(0, 0, 1))
    # the first-fit GPU is on socket 0, but socket 1 has more idle cores and 4 free shards
    assert fit_cpus(n, [(SHARD, "h100_shared", 2, 0)]) == 2 * 56
    n.shared["h100_shared"] = [0, 0, 3]  # socket 1's GPU has one shard left: too few for 2
    assert fit_cpus(n, [(SHARD, "h100_shared", 2, 0)]) == 2 * (56 + 50)
    n.shared["h100_shared"] = [0, 0, -1]  # given whole: no shards there, and not idle
    assert fit_cpus(n, [(SHARD, "h100_shared", 2, 0)]) == 2 * 50
    assert fit_cpus(n, [(GPU, "h100_shared", 1, 0)]) == 2 * 50
    n.shared["h100_shared"] = [0, 0, 1]  # a shard in use: not idle for a GPU request
    assert fit_cpus(n, [(GPU, "h100_shared", 1, 0)]) == 2 * 50
    n.shared["h100_shared"] = [0, 0, 0]
    assert fit_cpus(n, [(GPU, "h100_shared", 1, 0)]) == 2 * 56


def test_records_bound_to_no_socket_make_every_socket_count():
    """``cnt_any_sock``: a GPU whose CPUs reach every socket (NPS0), or none, is counted on
    no socket, and while one is free every socket's idle cores count."""
    n = dgx(0, busy_socket1=3)
    n.sock_free["a100"] = [0, 1, 1]  # one whole A100 bound to socket 1, one to none
    assert fit_cpus(n, [(GPU, "a100", 1, -1)]) == 2 * (64 + 61)
    bind(n, 5, [(GPU, "a100", 1, -1)])  # from the socket cons_tres counted first, then none
    assert n.sock_free["a100"] == [0, 0, 1] and n.cores_free == [64, 60]  # its core: the busiest
    bind(n, 6, [(GPU, "a100", 1, -1)])
    assert n.sock_free["a100"] == [0, 0, 0]
    unbind(n, 5), unbind(n, 6)
    assert n.sock_free["a100"] == [0, 1, 1] and n.cores_free == [64, 61]


def test_a_gpu_is_counted_on_the_first_socket_its_cores_reach_or_on_none():
    m = SimpleNamespace(sockets=2, cores_per_socket=4, socket_of_cpu=lambda c: (c % 8) // 4)
    assert gres_socket(m, [4, 5, 12]) == 1
    assert gres_socket(m, [3, 4]) == -1  # two sockets of two: every socket, bound to none
    assert gres_socket(m, []) == -1  # no CPUs: no Cores=
    m4 = SimpleNamespace(sockets=4, cores_per_socket=4, socket_of_cpu=lambda c: (c % 16) // 4)
    assert gres_socket(m4, [9, 4]) == 1  # two of four: the first it reaches


def test_where_slurm_put_the_3g_job_the_replay_puts_it_too():
    """The partition family's seed 1d4f379c on 22.05: a100n1 held a 2-GPU job on socket 1
    (one core), a100n2 two 1-GPU jobs there (two cores); Slurm started the 3g.20gb job on
    a100n2, the busier socket.  (Replayed whole in ``test_simulate_partition_replay``.)"""
    a, b = dgx(0, busy_socket1=1), dgx(1, busy_socket1=2)
    parts = [(GPU, "3g.20gb", 1, -1)]
    assert best_fit([(n.index, fit_cpus(n, parts)) for n in (a, b)]) == 1


def test_a_job_on_several_nodes_takes_the_best_run_from_its_start():
    """``_eval_nodes`` for more than one node: a run with nodes enough and the fewest CPUs,
    its nodes from its start (not the tightest ones); without such a run, the run with the
    most CPUs first, then the next best for the rest."""
    # runs {0, 1, 2} (300 CPUs) and {5, 6} (250): two nodes fit in both, {5, 6} has fewer CPUs
    cands = [(0, 100), (1, 100), (2, 100), (5, 120), (6, 130)]
    assert eval_nodes(cands, 2) == [3, 4]
    # three nodes: only {0, 1, 2} has enough
    assert eval_nodes(cands, 3) == [0, 1, 2]
    # four: no run has enough; the most CPUs first ({0, 1, 2}), then {5, 6}'s first
    assert eval_nodes(cands, 4) == [0, 1, 2, 3]
    # from the run's start, not its tightest nodes
    assert eval_nodes([(0, 128), (1, 64), (2, 64)], 2) == [0, 1]
    # Slurm's walk: a run without nodes enough but with more CPUs displaces a better one seen
    # before it (then the next walk takes what is left of the first)
    assert eval_nodes([(0, 10), (1, 10), (4, 500)], 2) == [2, 0]
