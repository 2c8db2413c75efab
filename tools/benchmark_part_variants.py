"""Benchmark variants of the parts of ours-train's step (--breakdown), each timed alone on
precomputed inputs: the conversion, the lookup, the fused apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

import benchmark_registry
from benchmark_registry import (LEARNING_RATE, Context, Setup, adagrad, nbytes, variant)

if TYPE_CHECKING:
    import tensorflow as tf
    from tf_embedding import ops

benchmark_registry.uses_tensorflow(__name__)


@variant("ours-train:csr", "part", "features_to_csr of every table", default=False,
         part_of="ours-train")
def _part_csr(ctx: Context) -> Setup:
    convert = tf.function(ctx.csr)
    return Setup(lambda i: convert(ctx.batch(i)), 0)


def _precomputed_csr(ctx: Context) -> list[list[ops.CsrBatch]]:
    """Every batch converted once, outside the timing."""
    return [ctx.csr(ctx.batch(b)) for b in range(ctx.num_batches)]


@variant("ours-train:lookup", "part", "ops.embedding_lookup of every table on converted batches",
         default=False, part_of="ours-train")
def _part_lookup(ctx: Context) -> Setup:
    tables, batches = ctx.make_tables(), _precomputed_csr(ctx)

    @tf.function
    def lookup(csr):
        return [ops.embedding_lookup(table, b.row_splits, b.ids, b.gains)
                for table, b in zip(tables, csr)]

    return Setup(lambda i: lookup(batches[i % ctx.num_batches]), sum(map(nbytes, tables)))


@variant("ours-train:apply", "part",
         "ops.sparse_apply(Adagrad) of every table on converted batches and their gradients",
         default=False, part_of="ours-train")
def _part_apply(ctx: Context) -> Setup:
    tables, accumulators = ctx.make_tables(), ctx.make_accumulators()
    optimizer = adagrad()
    batches = _precomputed_csr(ctx)
    # The loss gradient is the activations themselves (Context.loss).
    gradients = [[ops.embedding_lookup(table, b.row_splits, b.ids, b.gains)
                  for table, b in zip(tables, csr)] for csr in batches]

    @tf.function
    def apply(csr, activation_gradients):
        for table, accumulator, b, gradient in zip(tables, accumulators, csr,
                                                   activation_gradients):
            ops.sparse_apply(optimizer, table, {"accumulators": accumulator},
                             [(b.row_splits, b.ids, b.gains, gradient)], LEARNING_RATE)

    return Setup(lambda i: apply(batches[i % ctx.num_batches], gradients[i % ctx.num_batches]),
                 sum(map(nbytes, [*tables, *accumulators])))
