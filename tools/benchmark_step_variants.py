"""Benchmark variants of the embedding APIs' own steps: stock TF's ops (the baselines), the
fused ops called directly, `TPUEmbeddingV0`, the sharded `TPUEmbedding` (one variant per input
kind and compilation), and the per-call floor of a step (`call_floor_setup`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Sequence

import benchmark_registry
from benchmark_registry import (LEARNING_RATE, Context, Setup, adagrad,
                                filled_tables_and_accumulators, make_table_configs,
                                one_feature_per_table, variant)

if TYPE_CHECKING:
    import tensorflow as tf
    import tf_embedding
    from tf_embedding import ops

benchmark_registry.uses_tensorflow(__name__)


def stock_lookup(tables: Sequence[tf.Variable],
                 features: Sequence[tf.SparseTensor]) -> list[tf.Tensor]:
    return [tf.nn.safe_embedding_lookup_sparse(table, feature, combiner="sum")
            for table, feature in zip(tables, features)]


def v0_embedding(ctx: Context) -> tuple[Any, list[tf.Variable]]:
    """A TPUEmbeddingV0 with one feature per table and no embedding optimizer."""
    table_configs = make_table_configs(ctx.workload)
    embedding = tf_embedding.TPUEmbeddingV0(one_feature_per_table(table_configs), optimizer=None)
    embedding.build()
    tables = [embedding.embedding_tables[config] for config in table_configs]
    ctx.workload.fill_tables(tables)
    return embedding, tables


@variant("stock-forward", "forward",
         "tf.nn.safe_embedding_lookup_sparse on tf.Variables", baseline=True)
def _stock_forward(ctx: Context) -> Setup:
    tables = ctx.make_tables()
    return ctx.forward_setup(tf.function(functools.partial(stock_lookup, tables)), tables)


@variant("ours-forward", "forward", "features_to_csr + ops.embedding_lookup", target=5.0)
def _ours_forward(ctx: Context) -> Setup:
    tables = ctx.make_tables()

    @tf.function
    def forward(features):
        return [ops.embedding_lookup(table, batch.row_splits, batch.ids, batch.gains)
                for table, batch in zip(tables, ctx.csr(features))]

    return ctx.forward_setup(forward, tables)


@variant("v0-forward", "forward", "TPUEmbeddingV0.__call__")
def _v0_forward(ctx: Context) -> Setup:
    embedding, tables = v0_embedding(ctx)
    return ctx.forward_setup(tf.function(embedding.__call__), tables)


@variant("v0-forward-xla", "forward", "v0-forward compiled by XLA (tf.function(jit_compile=True))")
def _v0_forward_xla(ctx: Context) -> Setup:
    embedding, tables = v0_embedding(ctx)
    return ctx.forward_setup(tf.function(embedding.__call__, jit_compile=True), tables)


@variant("stock-train", "train",
         "safe_embedding_lookup_sparse + tape IndexedSlices + ResourceSparseApplyAdagradV2",
         baseline=True)
def _stock_train(ctx: Context) -> Setup:
    tables, accumulators = ctx.make_tables(), ctx.make_accumulators()

    @tf.function
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(stock_lookup(tables, features))
        for table, accumulator, gradient in zip(tables, accumulators,
                                                tape.gradient(loss, tables)):
            # epsilon 0: the TPU Adagrad rule (a += g^2; w -= lr * g / sqrt(a)) that ours runs.
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=table.handle, accum=accumulator.handle, lr=LEARNING_RATE, epsilon=0.0,
                grad=gradient.values, indices=gradient.indices)

    return ctx.train_setup(train, tables, [*tables, *accumulators])


@variant("ours-train", "train",
         "features_to_csr + ops.embedding_lookup + ops.sparse_apply(Adagrad)", target=4.0)
def _ours_train(ctx: Context) -> Setup:
    tables, accumulators = ctx.make_tables(), ctx.make_accumulators()
    optimizer = adagrad()

    @tf.function
    def train(features):
        batches = ctx.csr(features)
        activations = [ops.embedding_lookup(table, b.row_splits, b.ids, b.gains)
                       for table, b in zip(tables, batches)]
        # Only the dense part goes through the tape: the fused apply takes activation gradients.
        with tf.GradientTape() as tape:
            tape.watch(activations)
            loss = ctx.loss(activations)
        for table, accumulator, b, gradient in zip(tables, accumulators, batches,
                                                   tape.gradient(loss, activations)):
            ops.sparse_apply(optimizer, table, {"accumulators": accumulator},
                             [(b.row_splits, b.ids, b.gains, gradient)], LEARNING_RATE)

    return ctx.train_setup(train, tables, [*tables, *accumulators])


def _sharded_embedding(ctx: Context) -> tuple[Any, list[tf.Variable], list[tf.Variable]]:
    """A TPUEmbedding (default strategy) with one feature per table: it, its tables, their
    Adagrad accumulators."""
    table_configs = make_table_configs(ctx.workload)
    embedding = tf_embedding.TPUEmbedding(one_feature_per_table(table_configs), adagrad())
    embedding.build(per_replica_batch_size=ctx.workload.batch)
    return (embedding, *filled_tables_and_accumulators(ctx, embedding.table_variables()))


# The sharded TPUEmbedding's steps, one variant per input kind (`Context.batch`) and per
# compilation: "sharded-forward" (SparseTensors), "sharded-forward-ragged", ..., and "-xla" for
# each, the step compiled whole by XLA (tf.function(jit_compile=True)).
INPUT_KINDS = {"sparse": "SparseTensor", "ragged": "RaggedTensor", "dense": "dense"}


def _sharded_forward_setup(ctx: Context, kind: str, jit_compile: bool) -> Setup:
    embedding, tables, accumulators = _sharded_embedding(ctx)

    @tf.function(jit_compile=jit_compile)
    def forward(features):
        embedding.enqueue(list(features), training=False)
        return embedding.dequeue()

    # The engine holds its optimizer's slots whether or not the step trains.
    return ctx.forward_setup(forward, [*tables, *accumulators], kind)


def _sharded_train_setup(ctx: Context, kind: str, jit_compile: bool) -> Setup:
    embedding, tables, accumulators = _sharded_embedding(ctx)

    @tf.function(jit_compile=jit_compile)
    def train(features):
        embedding.enqueue(list(features), training=True)
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = ctx.loss(activations)
        embedding.apply_gradients(tape.gradient(loss, activations))

    return ctx.train_setup(train, tables, [*tables, *accumulators], kind)


def _register_sharded_variants() -> None:
    steps = {"forward": ("TPUEmbedding enqueue(training=False) + dequeue", _sharded_forward_setup),
             "train": ("TPUEmbedding enqueue + dequeue + apply_gradients (Adagrad)",
                       _sharded_train_setup)}
    for phase, (description, setup) in steps.items():
        for kind, kind_name in INPUT_KINDS.items():
            name = f"sharded-{phase}" + ("" if kind == "sparse" else f"-{kind}")
            variant(name, phase, f"{description}, {kind_name} inputs",
                    # Dense features hold one id per sample: not the default workload.
                    default=kind != "dense",
                    target=4.0 if (phase, kind) == ("train", "sparse") else None)(
                        functools.partial(setup, kind=kind, jit_compile=False))
            variant(f"{name}-xla", phase, f"the {name} step compiled whole by XLA "
                    "(tf.function(jit_compile=True))", default=kind == "sparse")(
                        functools.partial(setup, kind=kind, jit_compile=True))


_register_sharded_variants()


def call_floor_setup(ctx: Context, kind: str = "sparse") -> Setup:
    """TensorFlow's per-call floor of a step taking `kind` features (`Context.batch`): a
    tf.function taking them and returning a constant, so its time is Python's argument matching,
    the dispatch and the executor's run of an empty graph, which every user's step pays."""

    @tf.function
    def call(features):
        del features  # Taken, matched and passed in; never read.
        return tf.constant(0.0)

    return Setup(lambda i: call(ctx.batch(i, kind)), 0)


@variant("sharded-forward:call", "part",
         "a tf.function taking the forward's SparseTensors and returning a constant: the "
         "per-call floor of every step (Python dispatch, argument matching, the executor)",
         default=False, part_of="sharded-forward")
def _part_call(ctx: Context) -> Setup:
    return call_floor_setup(ctx)
