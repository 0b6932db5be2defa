"""Benchmark of Algorithm 1 on Dask (issue 14), measured side by side in one run.

(a) partition: cut edges of the recursive Kernighan-Lin bisection vs its breadth-first start
    vs random shards, and its time;
(b) serial (``backend="numpy"``) vs 2 worker processes (``backend="dask"``, 2 shards) on a
    ``side x side`` grid (default 316 x 316 = 99,856 nodes, 199,080 edges), squared losses
    (5 rows, d = 2), Norm2, default step rule: seconds per iteration, the ratio, and the largest
    difference of the iterates (the same iterates: 0);
(c) bytes the driver sends per iteration vs the cut (2, 4, 8 shards; KL and random shards) on
    a smaller grid;
(d) orchestration overhead per iteration (a model with one node per shard: no computation to
    speak of), 2, 4, 8 shards, fitted as ``a + b * shards``;
(e) an estimate (extrapolated from (b)-(d), not measured) for 10^7 nodes on 100 workers;
(f) certificates: summed from the shards' partial sums (``certificates="sharded"``) vs the
    iterate gathered and certified at the driver (``"gathered"``), bytes and seconds per
    certificate, 2 shards, on a ``cert_side x cert_side`` grid;
(g) routing (issue 30 item 7): boundary rows from worker to worker (``routing="workers"``)
    vs through the driver (``"driver"``), 2, 4 and 8 shards, one worker process per shard,
    on a ring lattice with shortcuts (``--routing-nodes`` nodes, average degree 10,
    ``--routing-dim`` = d, squared losses with 5 rows, contiguous shards): seconds per
    iteration (interleaved repeats, median and range), the busiest shard's computing, the
    driver's bytes per iteration and the bytes between shards per iteration; then the
    orchestration alone (one node per shard on a ring of shards: no computation to speak of),
    both routings, fitted as ``a + b * shards`` per iteration.

Run: ``python benchmarks/bench_dask.py [--side 316] [--iters 40] [--small-side 100]
[--cert-side 316] [--only-certificates] [--only-routing --routing-nodes 20000
--routing-dim 10 --rewire 0.02 --repeats 3]``.
"""

from __future__ import annotations

import argparse
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np
from distributed import Client, LocalCluster

import gtvmodel as gm
from gtvmodel.primal_dual.sharding import cut_of, partition_nodes


def grid_model(side: int, m: int = 5, d: int = 2, seed: int = 0) -> gm.GTVModel:
    """A ``side x side`` grid, two regions of local linear models, squared losses."""
    rng = np.random.default_rng(seed)
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(side, side))
    model = gm.GTVModel(G, d, lam=0.5)
    a, b = rng.standard_normal(d), rng.standard_normal(d)
    X = rng.standard_normal((side * side, m, d))
    for i in range(side * side):
        w = a if (i % side) < side // 2 else b
        model.set_loss(i, gm.SquaredLoss(X[i], X[i] @ w + 0.1 * rng.standard_normal(m)))
    return model


def per_iteration(model: gm.GTVModel, iters: int, **kw) -> tuple[float, object]:
    """Seconds per iteration of ``iters`` iterations (no certificates; setup excluded)."""
    res = gm.solve_primal_dual(model, max_iter=iters, tol=0.0, record_every=None, **kw)
    t = res.timings
    return t.get("iterations", t["node_updates"] + t["edge_updates"]) / iters, res


def part_a(model: gm.GTVModel) -> np.ndarray:
    print("(a) partition into 2 shards:")
    out = None
    for kl in (0, 10):
        t0 = time.perf_counter()
        labels = partition_nodes(model, 2, kl_passes=kl)
        dt = time.perf_counter() - t0
        print(f"    {'KL 10 passes' if kl else 'breadth-first'}: cut {cut_of(model, labels)[0]} "
              f"edges in {dt:.2f} s")
        out = labels
    rnd = np.random.default_rng(0).integers(0, 2, model.num_nodes)
    print(f"    random: cut {cut_of(model, rnd)[0]} edges")
    return out


def part_b(model: gm.GTVModel, client: Client, labels: np.ndarray, iters: int) -> None:
    print(f"(b) {model.num_nodes} nodes, {model.num_edges} edges, {iters} iterations:")
    t0 = time.perf_counter()
    s_serial, a = per_iteration(model, iters)
    t_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    s_dask, b = per_iteration(model, iters, backend=gm.DaskBackend(client, shards=labels))
    t_dask = time.perf_counter() - t0
    diff = max(np.abs(a.weights - b.weights).max(), np.abs(a.flows - b.flows).max())
    print(f"    serial: {1e3 * s_serial:.1f} ms/iteration (run {t_serial:.1f} s with setup)")
    print(f"    dask, 2 workers: {1e3 * s_dask:.1f} ms/iteration (run {t_dask:.1f} s with "
          f"setup {b.timings['setup']:.1f} s, {b.setup_bytes / 1e6:.1f} MB of shard data)")
    busy = b.timings["shard_compute_max"] / iters
    print(f"    of which computing on the busiest shard {1e3 * busy:.1f} ms/iteration, the "
          f"rest ({1e3 * (s_dask - busy):.1f} ms) messages, routing and waiting")
    print(f"    dask / serial per iteration: {s_dask / s_serial:.2f}x; max |difference| of "
          f"the iterates: {diff:.1e}")
    print(f"    driver sends {np.median(b.bytes_sent):.0f} bytes/iteration (median) for "
          f"{b.boundary_nodes} boundary nodes + {b.boundary_edges} boundary edges")


def part_c(model: gm.GTVModel, client: Client, iters: int) -> float:
    print(f"(c) bytes sent per iteration vs the cut ({model.num_nodes} nodes):")
    print("    shards  partition  cut edges  boundary rows  bytes/iter  bytes/boundary row")
    per_row = []
    for S in (2, 4, 8):
        for name in ("KL", "random"):
            labels = (partition_nodes(model, S) if name == "KL" else
                      np.random.default_rng(S).permutation(np.arange(model.num_nodes) % S))
            res = gm.solve_primal_dual(model, max_iter=iters, tol=0.0, record_every=None,
                                       backend=gm.DaskBackend(client, shards=labels))
            rows = res.boundary_nodes + res.boundary_edges
            b = float(np.median(res.bytes_sent))
            per_row.append(b / rows)
            print(f"    {S:6d}  {name:>9}  {res.cut_edges:9d}  {rows:13d}  {b:10.0f}  "
                  f"{b / rows:18.1f}")
    return float(np.median(per_row))


def part_d(client: Client, iters: int, how: str) -> tuple[float, float]:
    print(f"(d) orchestration overhead (one node per shard), actor calls {how}:")
    shards = np.array([2, 4, 8])
    secs = []
    for S in shards:
        model = gm.GTVModel(nx.path_graph(int(S)), 2, lam=0.5)
        for i in range(int(S)):
            model.set_loss(i, gm.QuadraticLoss([float(i), 0.0]))
        s, _ = per_iteration(model, iters, backend=gm.DaskBackend(client, shards=int(S)))
        secs.append(s)
        print(f"    {S} shards: {1e3 * s:.2f} ms/iteration")
    b, a = np.polyfit(shards, secs, 1)
    print(f"    fit: {1e3 * a:.2f} ms + {1e3 * b:.2f} ms per shard per iteration")
    return a, b


def part_e(model: gm.GTVModel, s_per_node: float, a: float, b: float, bytes_row: float
           ) -> None:
    n, W = 10**7, 100
    side = int(np.sqrt(n / W))  # 100 square blocks of a 3163 x 3163 grid
    rows = W * (4 * side) * 2  # boundary nodes + edges, about 4 sides per block
    compute = s_per_node * n / W
    orchestration = a + b * W
    mb = rows * bytes_row / 1e6
    print("(e) ESTIMATE (extrapolated, not measured) for 10^7 nodes on 100 workers, d = 2:")
    print(f"    compute {1e3 * compute:.0f} ms (serial {1e6 * s_per_node:.2f} us/node x "
          f"{n // W} nodes per worker) + orchestration {1e3 * orchestration:.0f} ms "
          f"(fit of (d) at 100 shards) + {mb:.1f} MB through the driver per iteration "
          f"({rows} boundary rows x {bytes_row:.0f} B): about "
          f"{1e3 * (compute + orchestration):.0f} ms/iteration plus the transfer")


def part_f(model: gm.GTVModel, client: Client, labels: np.ndarray) -> None:
    print(f"(f) certificates, {model.num_nodes} nodes, {model.num_edges} edges, 2 shards "
          "(8 certificates each, every 5 iterations):")
    out = {}
    for how in ("sharded", "gathered"):
        res = gm.solve_distributed(model, max_iter=40, tol=0.0, record_every=5,
                                   certificate_budget=None, client=client, shards=labels,
                                   certificates=how)
        per = res.timings["certificate"] / len(res.history.gap)
        out[how] = (float(np.median(res.certificate_bytes)), per, res.certificate.gap)
        print(f"    {how}: {out[how][0]:,.0f} bytes and {per * 1e3:.1f} ms per certificate "
              f"(gathered {res.certificates_gathered} of {len(res.history.gap)}); last gap "
              f"{res.certificate.gap:.6g}")
    (bs, ts, gs), (bg, tg, gg) = out["sharded"], out["gathered"]
    print(f"    gathered / sharded: {bg / bs:,.0f}x the bytes, {tg / ts:.2f}x the time; "
          f"relative difference of the gaps {abs(gs - gg) / max(gg, 1e-300):.1e}")


def ring_model(n: int, d: int, rewire: float, m: int = 5, seed: int = 0) -> gm.GTVModel:
    """A ring lattice of ``n`` nodes, each joined to its 10 nearest, a fraction ``rewire`` of
    the edges rewired (Watts-Strogatz), squared losses with ``m`` rows in ``d`` dimensions."""
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(n, 10, rewire, seed=seed)
    model = gm.GTVModel(G, d, lam=0.5)
    a, b = rng.standard_normal(d), rng.standard_normal(d)
    X = rng.standard_normal((n, m, d))
    for i in range(n):
        w = a if i < n // 2 else b
        model.set_loss(i, gm.SquaredLoss(X[i], X[i] @ w + 0.1 * rng.standard_normal(m)))
    return model


def part_g(n: int, d: int, rewire: float, iters: int, repeats: int) -> None:
    model = ring_model(n, d, rewire)
    print(f"(g) routing: {n} nodes, {model.num_edges} edges ({100 * rewire:g} % rewired), "
          f"d = {d}, {iters} iterations (default step rule: residuals every 10), {repeats} "
          "interleaved repeats:")
    s_serial, ref = per_iteration(model, iters)
    print(f"    serial: {1e3 * s_serial:.1f} ms/iteration")
    print("    shards  routing  ms/iter median (min-max)  busiest shard ms/iter  "
          "driver B/iter  between shards B/iter  max |diff| vs serial")
    for S in (2, 4, 8):
        labels = np.arange(n) * S // n  # contiguous arcs of the ring
        with LocalCluster(n_workers=S, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            rows: dict[str, list] = {"workers": [], "driver": []}
            for _ in range(repeats):
                for how in rows:
                    s, res = per_iteration(model, iters, backend=gm.DaskBackend(
                        client, shards=labels, routing=how))
                    rows[how].append((s, res))
        for how, runs in rows.items():
            secs = np.array([s for s, _ in runs])
            res = runs[-1][1]
            busy = np.median([r.timings["shard_compute_max"] for _, r in runs]) / iters
            diff = max(np.abs(res.weights - ref.weights).max(),
                       np.abs(res.flows - ref.flows).max())
            print(f"    {S:6d}  {how:>7}  {1e3 * np.median(secs):8.1f} ({1e3 * secs.min():.1f}-"
                  f"{1e3 * secs.max():.1f})  {1e3 * busy:21.1f}  "
                  f"{res.bytes_sent.sum() / iters:13,.0f}  "
                  f"{res.peer_bytes / iters:21,.0f}  {diff:.1e}")
        ends = labels[model.edges]
        pairs = np.unique(ends[ends[:, 0] != ends[:, 1]], axis=0)
        nbrs = np.bincount(np.concatenate([pairs[:, 0], pairs[:, 1]]), minlength=S)
        print(f"            cut {res.cut_edges} edges; boundary {res.boundary_nodes} nodes + "
              f"{res.boundary_edges} edges; neighbour shards per shard {nbrs.min()}-"
              f"{nbrs.max()}; setup {res.timings['setup']:.1f} s")


def part_g_overhead(iters: int, repeats: int) -> None:
    print(f"(g) orchestration per iteration, one node per shard (a ring), one worker process "
          f"per shard, {iters} iterations, {repeats} interleaved repeats:")
    shards, med = np.array([2, 4, 8]), {"workers": [], "driver": []}
    for S in shards:
        model = gm.GTVModel(nx.cycle_graph(int(S)) if S > 2 else nx.path_graph(2), 2, lam=0.5)
        for i in range(int(S)):
            model.set_loss(i, gm.QuadraticLoss([float(i), 0.0]))
        secs: dict[str, list[float]] = {"workers": [], "driver": []}
        with LocalCluster(n_workers=int(S), threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            for _ in range(repeats):
                for how in secs:
                    s, _ = per_iteration(model, iters, backend=gm.DaskBackend(
                        client, shards=int(S), routing=how))
                    secs[how].append(s)
        for how, v in secs.items():
            med[how].append(float(np.median(v)))
            print(f"    {S} shards, {how:>7}: {1e3 * np.median(v):.2f} ms/iteration "
                  f"({1e3 * min(v):.2f}-{1e3 * max(v):.2f})")
    for how, v in med.items():
        b, a = np.polyfit(shards, v, 1)
        print(f"    fit, {how}: {1e3 * a:.2f} ms + {1e3 * b:.2f} ms per shard per iteration")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", type=int, default=316)
    p.add_argument("--small-side", type=int, default=100)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--cert-side", type=int, default=316)
    p.add_argument("--only-certificates", action="store_true", help="run (f) alone")
    p.add_argument("--only-routing", action="store_true", help="run (g) alone")
    p.add_argument("--routing-nodes", type=int, default=20_000)
    p.add_argument("--routing-dim", type=int, default=10)
    p.add_argument("--rewire", type=float, default=0.02)
    p.add_argument("--overhead-only", action="store_true", help="(g)'s orchestration alone")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.overhead_only:
        part_g_overhead(100, args.repeats)
        return
    if args.only_routing:
        part_g(args.routing_nodes, args.routing_dim, args.rewire, args.iters, args.repeats)
        part_g_overhead(100, args.repeats)
        return
    if args.only_certificates:
        cmodel = grid_model(args.cert_side)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            part_f(cmodel, client, partition_nodes(cmodel, 2, kl_passes=0))
        return
    t0 = time.perf_counter()
    model = grid_model(args.side)
    print(f"built the {args.side}x{args.side} grid model in {time.perf_counter() - t0:.1f} s; "
          f"BLAS threads {_pin_threads.THREADS}")
    labels = part_a(model)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        part_b(model, client, labels, args.iters)
        s_serial, _ = per_iteration(model, args.iters)
        bytes_row = part_c(grid_model(args.small_side), client, max(10, args.iters // 2))
        a, b = part_d(client, 100, "through the scheduler (default Client)")
        with Client(cluster, direct_to_workers=True) as direct:
            a, b = part_d(direct, 100, "direct (Client(direct_to_workers=True))")
        cmodel = model if args.cert_side == args.side else grid_model(args.cert_side)
        part_f(cmodel, client, labels if cmodel is model else partition_nodes(cmodel, 2))
    part_e(model, s_serial / model.num_nodes, a, b, bytes_row)


if __name__ == "__main__":
    main()
