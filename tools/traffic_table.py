"""Bytes per step of the busiest worker, sent plus received, for 2 to 256
MultiWorkerMirroredStrategy workers, from the traffic formulas of
tf_embedding/sharded/planning/traffic.py (docs/sharding_plans.md, "Traffic per kind"):

    .venv/bin/python tools/traffic_table.py                 # both workloads, markdown tables
    .venv/bin/python tools/traffic_table.py --compute-ms 480 --latency-us 50
                                                            # + projected step time, samples/s

Columns: before (every owner received every worker's activation gradients: the all-gather of
0.2.0), row-wise (every table row-wise, owners receive only the gradient rows of samples with
a lookup in their block), the planner's plan (`plan_tables`; "tw" counts its table-wise
tables), and TorchRec's row-wise (partial pooled sums: ids by all-to-all, a reduce-scatter of
[global batch, dim] forward and an all-gather back) and table-wise (tables dealt round-robin
over the workers: an owner receives every worker's ids and gradients and sends every worker's
pooled rows) on the same shapes. Payload only: padding and headers come on top. Uniform ids
(skewed ids have fewer distinct ids, so fewer bytes for the row-wise kinds).

With --compute-ms (a worker's step without its exchanges, measured: tools/mw_benchmark.py's
1-worker row) it also projects the DCNv2 step on links of 10, 25 and 100 Gbit/s: compute, plus
the planned busiest worker's bytes over its link (sent and received share a full-duplex link:
the larger direction counts, half the sum), plus a latency term per exchange (each of a step's
four all-to-alls waits for its N-1 peers, each of its three gathers for a ring of N-1 hops, at
--latency-us per peer or hop). What it leaves out: load imbalance (skewed ids), congestion in
the network's core, and compute that overlaps the transfers.

Workloads: MLPerf's DLRM-DCNv2 (26 Criteo features with MLPerf's multi-hot sizes, vocabularies
up to 40M, dim 128) at 2,048 samples per worker, and the `tf-embedding train` default (its
synthetic click log, dim 16) at its global batch of 4,096.
"""

import argparse
import math

from tf_embedding.job.data import spec
from tf_embedding.sharded.planning import planner
from tf_embedding.sharded.planning import traffic

WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)
# The job's synthetic click log (tf_embedding/job/data/spec.py): per table, its vocabulary and
# the mean ids per sample of each of its features (1..max_ids uniform: (1 + max_ids) / 2).
JOB_TABLES = {"user": (2_000_000, (1,)), "item": (1_000_000, (1, 10.5)),
              "query_term": (200_000, (4.5,)), "category": (10_000, (2,)),
              "country": (200, (1,)), "hour": (24, (1,))}


def dcnv2(batch: float) -> list[planner.PlannedTable]:
    """MLPerf DLRM-DCNv2's tables (`spec.MLPERF_DCNV2_*`, vocabularies up to 40M)."""
    return [planner.PlannedTable(f"C{index + 1}", traffic.TableLoad(
                vocabulary, spec.MLPERF_DCNV2_EMBEDDING_DIM, batch, hot), slots=1)
            for index, (vocabulary, hot) in enumerate(zip(spec.MLPERF_DCNV2_VOCABULARIES,
                                                          spec.MLPERF_DCNV2_MULTI_HOT))]


def job(batch: float) -> list[planner.PlannedTable]:
    return [planner.PlannedTable(name, traffic.TableLoad(
                vocabulary, 16, batch * len(hotness), sum(hotness) / len(hotness)), slots=1)
            for name, (vocabulary, hotness) in JOB_TABLES.items()]


def before(load: traffic.TableLoad, workers: int) -> float:
    """0.2.0's formula: every worker received every worker's activation gradients."""
    others = (workers - 1) / workers
    sent = (others * (8 * load.unique_ids + 4 * load.dim * load.unique_ids + 16 * load.lookups)
            + (workers - 1) * 4 * load.dim * load.rows)
    return 2 * sent


def torchrec_row_wise(load: traffic.TableLoad, workers: int) -> float:
    """Ids to the blocks' ranks, partial pooled sums reduce-scattered, gradients all-gathered:
    per rank (N-1)/N of the ids and (N-1) of its [R, dim] each way, twice (sent, received)."""
    others = (workers - 1) / workers
    return 2 * (others * 8 * load.lookups + 2 * (workers - 1) * 4 * load.dim * load.rows)


def torchrec_table_wise(tables: list[planner.PlannedTable], workers: int) -> float:
    """Tables dealt round-robin: each owner receives every other worker's ids (8 bytes each)
    and gradient rows and sends it pooled rows; the busiest worker's total."""
    load = [0.0] * workers
    for index, table in enumerate(tables):
        owner, per_worker = index % workers, table.load
        owned = (workers - 1) * (8 * per_worker.lookups + 8 * per_worker.dim * per_worker.rows)
        for rank in range(workers):
            load[rank] += owned if rank == owner else owned / (workers - 1)
    return max(load)


RATES_GBIT = (10, 25, 100)
# A step's collectives: forward and update each gather their counts (a ring of N-1 hops) and
# run two all-to-alls (N-1 peers each); the enqueue's id check is one more gather.
ALL_TO_ALLS, GATHERS = 4, 3


def projected_step_ms(busiest_bytes: float, workers: int, compute_ms: float,
                      latency_us: float, rate_gbit: float) -> float:
    """Compute + the busiest link's larger direction over the rate + per-peer latency."""
    link_ms = busiest_bytes / 2 * 8 / (rate_gbit * 1e9) * 1e3
    latency_ms = (ALL_TO_ALLS + GATHERS) * (workers - 1) * latency_us / 1e3
    return compute_ms + link_ms + latency_ms


def projection(compute_ms: float, latency_us: float, batch: int = 2048) -> None:
    print(f"\nDLRM-DCNv2 projected, {batch:,} samples per worker, the planner's plan: step ms "
          f"(thousand samples/s), compute {compute_ms:g} ms, {latency_us:g} us per peer\n")
    print("| workers | " + " | ".join(f"{rate} Gbit/s" for rate in RATES_GBIT) + " |")
    print("|---|" + "---|" * len(RATES_GBIT))
    for workers in WORKERS:
        tables = dcnv2(batch)
        busiest = planner.busiest_bytes(tables, workers, planner.plan_tables(tables, workers))
        cells = []
        for rate in RATES_GBIT:
            step_ms = projected_step_ms(busiest, workers, compute_ms, latency_us, rate)
            cells.append(f"{step_ms:,.0f} ({workers * batch / step_ms:,.0f})")
        print(f"| {workers} | " + " | ".join(cells) + " |")


def table(name: str, make, batch_of) -> None:
    print(f"\n{name} (MB per step, busiest worker, sent + received)\n")
    print("| workers | before | row-wise | planned | tw | TorchRec RW | TorchRec TW |")
    print("|---|---|---|---|---|---|---|")
    for workers in WORKERS:
        tables = make(batch_of(workers))
        plan = planner.plan_tables(tables, workers)
        row_wise = planner.busiest_bytes(tables, workers, planner.plans.ShardingPlan({}))
        cells = [sum(before(t.load, workers) for t in tables), row_wise,
                 planner.busiest_bytes(tables, workers, plan)]
        torchrec = [sum(torchrec_row_wise(t.load, workers) for t in tables),
                    torchrec_table_wise(tables, workers)]
        print(f"| {workers} | " + " | ".join(f"{value / 1e6:,.0f}" for value in cells)
              + f" | {len(plan.tables)} | "
              + " | ".join(f"{value / 1e6:,.0f}" for value in torchrec) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compute-ms", type=float,
                        help="a worker's DCNv2 step without exchanges, to project step times")
    parser.add_argument("--latency-us", type=float, default=50.0,
                        help="with --compute-ms: microseconds per peer of an exchange")
    args = parser.parse_args()
    table("DLRM-DCNv2, 2,048 samples per worker", dcnv2, lambda workers: 2048)
    table("tf-embedding train default, global batch 4,096", job,
          lambda workers: math.ceil(4096 / workers))
    if args.compute_ms is not None:
        projection(args.compute_ms, args.latency_us)


if __name__ == "__main__":
    main()
