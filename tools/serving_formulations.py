#!/usr/bin/env python3
"""The stock-op formulations a pooled serving lookup could use, timed side by side in one process.

    python tools/serving_formulations.py                  # zipf ids, 1 thread
    python tools/serving_formulations.py --distribution uniform --threads 2
    python tools/serving_formulations.py --quick --calls 3    # a smoke run (seconds)

`for_serving._pooled` picks one formulation per input kind (rank-2 `SparseTensor`,
`RaggedTensor`) and weighting; this command shows the measurements behind that choice. On
tools/benchmark.py's reference tables and ids (one feature per table, sum combiner; weights
uniform in [0.5, 2)), each candidate is one tf.function over the 8 features, called on 4
batches in turn, every candidate's calls alternating with the others' (round-robin), medians
reported. Every candidate's activations are checked against TF's own formulation of its kind
(relative 1e-5); `bits` says whether they are TF's bit for bit.

Candidates: `stock` (TF's: `safe_embedding_lookup_sparse`; for ragged batches the gather and
ragged `reduce_sum` of TF's serving lookup), `segment` (`SparseSegmentSum` with `num_segments`
on the table, or on the gathered rows times their weights), `gather+unsorted` (`gather`, then
`unsorted_segment_sum`), `gather+reshape` (unweighted fixed-width batches only: `gather`,
reshape to `[batch, ids_per_sample, dim]`, `reduce_sum`) and `xla-gather-sum` (the same, fused by
XLA: what `jit_compile=True` compiles, without its grid placement).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # pylint: disable=wrong-import-position
import benchmark_machine as machine  # pylint: disable=wrong-import-position
import benchmark_report  # pylint: disable=wrong-import-position
import benchmark_registry as registry  # pylint: disable=wrong-import-position
import benchmark_worker  # pylint: disable=wrong-import-position

HEADER = ["input", "weights", "candidate", "ms/call", "vs stock", "bits"]
BATCHES = 4


def candidates(tables: list[Any], per_sample: int
               ) -> dict[tuple[str, bool], dict[str, Callable[..., Any]]]:
    """{(kind, weighted): {candidate: fn(ids, rows, num_rows, weights, composite)}}: each
    candidate pools one feature (flat ids, their ascending rows, weights or None, and the
    feature as given, for TF's own formulation)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def gathered(table, ids, weights):
        rows = tf.gather(table, ids)
        return rows if weights is None else rows * weights[:, tf.newaxis]

    def segment(table, ids, rows, num_rows, weights, _):
        if weights is None:
            return tf.sparse.segment_sum(table.read_value_no_copy(), ids, rows,
                                         num_segments=num_rows)
        return tf.sparse.segment_sum(gathered(table, ids, weights),
                                     tf.range(tf.size(ids, out_type=rows.dtype)), rows,
                                     num_segments=num_rows)

    def unsorted(table, ids, rows, num_rows, weights, _):
        return tf.math.unsorted_segment_sum(gathered(table, ids, weights), rows, num_rows)

    def reshape(table, ids, rows, num_rows, weights, _):
        del rows, num_rows, weights
        return tf.reduce_sum(tf.reshape(tf.gather(table, ids), [-1, per_sample, table.shape[1]]),
                             axis=1)

    compiled = tf.function(lambda table, ids: tf.reduce_sum(tf.gather(table, ids), axis=1),
                           jit_compile=True)

    def xla(table, ids, rows, num_rows, weights, _):
        del rows, num_rows, weights
        return compiled(table.read_value_no_copy(), tf.reshape(ids, [-1, per_sample]))

    def stock_sparse(table, ids, rows, num_rows, weights, sparse):
        del ids, rows, num_rows
        sparse_weights = None if weights is None else tf.SparseTensor(
            sparse.indices, weights, sparse.dense_shape)
        return tf.nn.safe_embedding_lookup_sparse(table, sparse, sparse_weights=sparse_weights,
                                                  combiner="sum")

    def stock_ragged(table, ids, rows, num_rows, weights, ragged):
        del ids, rows, num_rows
        ragged_weights = (tf.ones_like(ragged, dtype=tf.float32) if weights is None
                          else ragged.with_values(weights))
        return tf.reduce_sum(tf.nn.embedding_lookup(table, ragged)
                             * tf.expand_dims(ragged_weights, 2), axis=1)

    result = {}
    for kind, stock in (("sparse", stock_sparse), ("ragged", stock_ragged)):
        for weighted in (False, True):
            kind_candidates = {"stock": stock, "segment": segment, "gather+unsorted": unsorted}
            if not weighted:
                kind_candidates.update({"gather+reshape": reshape, "xla-gather-sum": xla})
            result[kind, weighted] = {
                name: tf.function(lambda features, fn=fn: [fn(table, *feature)
                                                           for table, feature in
                                                           zip(tables, features)])
                for name, fn in kind_candidates.items()}
    return result


def features(ctx: registry.Context, kind: str, weights: list[Any] | None, b: int) -> list[tuple]:
    """Batch `b`'s features as the candidates take them."""
    out = []
    for t, composite in enumerate(ctx.batch(b, kind)):
        if kind == "sparse":
            ids, rows, num_rows = (composite.values, composite.indices[:, 0],
                                   composite.dense_shape[0])
        else:
            ids, rows, num_rows = composite.values, composite.value_rowids(), composite.nrows()
        out.append((ids, rows, num_rows, None if weights is None else weights[t],
                    composite))
    return out


def time_kind(fns: dict[str, Callable[..., Any]], batches: list[list[tuple]], calls: int
              ) -> dict[str, tuple[float, bool]]:
    """{candidate: (median seconds, bit-identical to stock)} after checking every candidate."""
    expected = [[a.numpy() for a in fns["stock"](batch)] for batch in batches]
    bits = {}
    for name, fn in fns.items():
        for batch, wanted in zip(batches, expected):
            actual = [a.numpy() for a in fn(batch)]
            for a, e in zip(actual, wanted):
                np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6, err_msg=name)
            bits[name] = all(np.array_equal(a, e) for a, e in zip(actual, wanted))
    names = list(fns)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for i in range(calls):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            start = time.perf_counter()
            for a in fns[name](batches[i % len(batches)]):
                a.numpy()
            seconds[name].append(time.perf_counter() - start)
    return {name: (statistics.median(seconds[name]), bits[name]) for name in names}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="CPUs and TensorFlow threads")
    parser.add_argument("--distribution", default="zipf", choices=benchmark.DISTRIBUTIONS)
    parser.add_argument("--calls", type=int, default=12, help="timed calls per candidate")
    parser.add_argument("--quick", action="store_true",
                        help="tools/benchmark.py's --quick tables (small, for a smoke run)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.threads < 1:
        parser.error("--calls and --threads must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    defaults = benchmark.parse_args(["--quick"] if args.quick else [])
    workload = benchmark.workload_of(defaults)
    benchmark_worker.start_worker(args.threads)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    print(f"serving_formulations: {args.calls} timed calls per candidate, "
          f"{args.distribution} ids, medians")
    print(*machine.machine_info([args.threads], 0), sep="\n")
    ctx = registry.Context(workload, benchmark.make_ids(workload, args.distribution, BATCHES,
                                                  defaults.zipf_alpha))
    tables = ctx.make_tables()
    rng = np.random.default_rng(0)
    weights = [tf.constant(rng.uniform(0.5, 2.0, workload.lookups).astype(np.float32))
               for _ in range(workload.tables)]
    rows = []
    for (kind, weighted), fns in candidates(tables, workload.ids_per_sample).items():
        batches = [features(ctx, kind, weights if weighted else None, b)
                   for b in range(BATCHES)]
        timed = time_kind(fns, batches, args.calls)
        for name, (seconds, bits) in timed.items():
            rows.append([kind, "yes" if weighted else "no", name, f"{1e3 * seconds:.2f}",
                         f"{timed['stock'][0] / seconds:.2f}x", "yes" if bits else "no"])
    print("\n".join(benchmark_report.table(HEADER, rows, left=3)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
