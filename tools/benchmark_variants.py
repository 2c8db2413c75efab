"""What tools/benchmark.py measures: a registry of variants, each one way to run a step.

A variant makes its variables from the shared `Context` and returns a `Setup`: a callable that runs
a step (or `--steps-per-call` steps) on precomputed batch `i`, the bytes of the variables it
holds, and a checksum with which the harness checks that the variants of one phase compute the
same thing. Adding a variant is one decorated function, e.g. for the sharded TPUEmbedding step:

    @variant("sharded-train", "train", "TPUEmbedding enqueue + dequeue + apply_gradients")
    def _sharded_train(ctx: Context) -> Setup:
        embedding = ...  # built, then ctx.workload.fill_tables(its tables)

        @tf.function
        def step(features):
            ...

        return ctx.train_setup(step, tables, variables)

Phases: "forward" (CSR conversion + lookup), "train" (forward + backward + Adagrad), "serve" (the
forward pass of a serving lookup, stock ops only), and "part" (one piece of another variant's step,
for the per-phase breakdown). Ratios are taken against the
phase's `baseline` variant; `target` is the speed-up the issue asks of it.

TensorFlow is imported by the worker processes only (`import_tensorflow`), so the orchestrator
reads this registry without TensorFlow's start-up time and memory.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import keras
    import tensorflow as tf
    import tf_embedding
    from tf_embedding import ops, optimizers
    from tf_embedding.feature_inputs import feature_input

LEARNING_RATE = 0.01
INITIAL_ACCUMULATOR = 0.1
# Tables start uniform in [-INIT_RANGE, INIT_RANGE): small, like TF's default 1/sqrt(dim) normal.
INIT_RANGE = 0.05
# Bytes of table initialised per op: bounds the temporaries that initialisation adds to peak RSS
# (TensorFlow's oneDNN allocator keeps freed large buffers pooled, so they stay resident).
INIT_CHUNK_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Workload:
    """The tables and batches every variant runs on."""

    tables: int
    vocab: int
    dim: int
    batch: int
    ids_per_sample: int
    seed: int

    @property
    def table_bytes(self) -> int:
        return self.tables * self.vocab * self.dim * 4

    @property
    def lookups(self) -> int:
        """Lookups per table per batch."""
        return self.batch * self.ids_per_sample

    def fill_tables(self, tables: Sequence[Any]) -> None:
        """Gives every variant's tables the same pseudo-random values, a chunk at a time."""
        chunk_rows = max(1, INIT_CHUNK_BYTES // (self.dim * 4))
        for t, table in enumerate(tables):
            for start in range(0, self.vocab, chunk_rows):
                rows = min(chunk_rows, self.vocab - start)
                # Assigned through the handle: `table[a:b].assign` reads the variable first, and
                # that read aliasing the buffer makes TF copy the whole table (copy-on-write).
                tf.raw_ops.ResourceStridedSliceAssign(
                    ref=table.handle, begin=[start, 0], end=[start + rows, self.dim],
                    strides=[1, 1],
                    value=tf.random.stateless_uniform(
                        [rows, self.dim], seed=[self.seed, t * self.vocab + start],
                        minval=-INIT_RANGE, maxval=INIT_RANGE))


@dataclasses.dataclass
class Setup:
    """A variant ready to run: `step(i)` runs `steps_per_call` steps, one on batch `i` (cycled)
    or, looped, on the next ones (`Context._steps`), and returns when their work is done;
    `model_bytes` are the tables and slots it holds; `checksum()` (None: not comparable)
    summarises its result after the timed steps."""

    step: Callable[[int], Any]
    model_bytes: int
    checksum: Callable[[], float] | None = None
    # Context.steps_per_call for the forward and train phases' setups; 1 for the others.
    steps_per_call: int = 1


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    phase: str
    description: str
    setup: Callable[["Context"], Setup]
    baseline: bool = False
    target: float | None = None
    # Run when --variants is not given; the breakdown parts run with --breakdown.
    default: bool = True
    part_of: str | None = None
    # Runs in a process whose Keras is tf_keras (TF_USE_LEGACY_KERAS=1), e.g. for TFRS.
    legacy_keras: bool = False
    # ((other variant, target), ...): the report prints this row's paired speed-up over each
    # other row of the run (same distribution and threads) against its target (>=).
    versus: tuple[tuple[str, float], ...] = ()


VARIANTS: dict[str, Variant] = {}


def variant(name: str, phase: str, description: str, **options: Any
            ) -> Callable[[Callable[["Context"], Setup]], Callable[["Context"], Setup]]:
    """Registers a variant's setup function under `name` (see the module docstring)."""

    def register(setup: Callable[[Context], Setup]) -> Callable[[Context], Setup]:
        if name in VARIANTS:
            raise ValueError(f"variant {name} is registered twice")
        VARIANTS[name] = Variant(name, phase, description, setup, **options)
        return setup

    return register


def import_tensorflow() -> None:
    """Imports TensorFlow, Keras and tf_embedding into this module (worker processes only)."""
    global tf, keras, tf_embedding  # pylint: disable=global-statement
    global feature_input, ops, optimizers  # pylint: disable=global-statement
    import keras  # pylint: disable=import-outside-toplevel,redefined-outer-name
    import tensorflow as tf  # pylint: disable=import-outside-toplevel,redefined-outer-name
    import tf_embedding  # pylint: disable=import-outside-toplevel,redefined-outer-name
    from tf_embedding import ops, optimizers  # pylint: disable=import-outside-toplevel
    from tf_embedding.feature_inputs import feature_input  # pylint: disable=import-outside-toplevel


def _nbytes(variable: Any) -> int:
    """Bytes of a tf.Variable or Keras variable."""
    return int(np.prod(variable.shape)) * tf.as_dtype(variable.dtype).size


class Context:
    """The workload and its precomputed batches, shared by every variant of one worker job.

    `ids[b, t]` are the ids of batch `b` for table `t`: `[batch, ids_per_sample]`, one feature per
    table, every sample holding `ids_per_sample` ids. They come from the orchestrator, so every
    variant (and every process) sees the same batches.
    """

    def __init__(self, workload: Workload, ids: np.ndarray, steps_per_call: int = 1):
        self.workload = workload
        self.ids = ids
        # The forward and train phases' steps per tf.function call (`_steps`); a serving
        # lookup is timed per call, as a server calls it.
        self.steps_per_call = steps_per_call

    @property
    def num_batches(self) -> int:
        return self.ids.shape[0]

    @functools.cached_property
    def _sparse_batches(self) -> list[list[tf.SparseTensor]]:
        w = self.workload
        # Every feature has the same layout (row b holds positions 0..k-1), so one indices tensor
        # serves them all and the inputs add little to peak RSS.
        rows, positions = np.meshgrid(np.arange(w.batch), np.arange(w.ids_per_sample),
                                      indexing="ij")
        indices = tf.constant(np.stack([rows.ravel(), positions.ravel()], axis=1), tf.int64)
        shape = [w.batch, w.ids_per_sample]
        return [[tf.SparseTensor(indices, tf.constant(self.ids[b, t].ravel(), tf.int64), shape)
                 for t in range(w.tables)]
                for b in range(self.num_batches)]

    @functools.cached_property
    def _ragged_batches(self) -> list[list[tf.RaggedTensor]]:
        w = self.workload
        row_splits = tf.constant(np.arange(w.batch + 1) * w.ids_per_sample, tf.int64)
        return [[tf.RaggedTensor.from_row_splits(tf.constant(self.ids[b, t].ravel(), tf.int64),
                                                 row_splits, validate=False)
                 for t in range(self.workload.tables)]
                for b in range(self.num_batches)]

    @functools.cached_property
    def _dense_batches(self) -> list[list[tf.Tensor]]:
        # The TPU APIs pool a dense feature only as [batch, 1] (one id per sample).
        if self.workload.ids_per_sample != 1:
            raise ValueError("dense inputs need --ids-per-sample 1: the embedding APIs pool a "
                             "dense feature only when it holds one id per sample")
        return [[tf.constant(self.ids[b, t], tf.int64) for t in range(self.workload.tables)]
                for b in range(self.num_batches)]

    def batch(self, i: int, kind: str = "sparse") -> list[Any]:
        """Batch `i % num_batches` as `kind` inputs, one feature per table: "sparse"
        (SparseTensor [batch, ids_per_sample]), "ragged" (RaggedTensor [batch, None]) or "dense"
        (int64 [batch, ids_per_sample]); the same ids whatever the kind."""
        return getattr(self, f"_{kind}_batches")[i % self.num_batches]

    @functools.cache
    def unique_ids(self, batch: int, table: int) -> np.ndarray:
        return np.unique(self.ids[batch, table])

    def make_tables(self) -> list[tf.Variable]:
        w = self.workload
        tables = [tf.Variable(tf.zeros([w.vocab, w.dim]), name=f"table_{t}")
                  for t in range(w.tables)]
        w.fill_tables(tables)
        return tables

    def make_accumulators(self) -> list[tf.Variable]:
        w = self.workload
        return [tf.Variable(tf.fill([w.vocab, w.dim], INITIAL_ACCUMULATOR),
                            name=f"table_{t}/accumulators")
                for t in range(w.tables)]

    def csr(self, features: Sequence[tf.SparseTensor]) -> list[ops.CsrBatch]:
        """Our conversion, with the pruning of safe_embedding_lookup_sparse (the same work)."""
        return [ops.features_to_csr(f"table_{t}", self.workload.vocab, "sum",
                                    [feature_input.FeatureInput(f"feature_{t}", feature,
                                                                prune_invalid=True)])
                for t, feature in enumerate(features)]

    @staticmethod
    def loss(activations: Sequence[tf.Tensor]) -> tf.Tensor:
        """0.5 * sum of squares: its gradient is the activations, so the dense part is trivial."""
        return 0.5 * tf.add_n([tf.reduce_sum(tf.square(a)) for a in activations])

    def forward_setup(self, forward: Callable[[list[Any]], Any], variables: Sequence[Any],
                      kind: str = "sparse") -> Setup:
        """Checksum: sum of squares of batch 0's activations, which every forward variant shares.
        `forward` takes `kind` inputs (`batch`)."""

        def checksum() -> float:
            return float(sum(np.sum(np.square(a.numpy(), dtype=np.float64))
                             for a in tf.nest.flatten(forward(self.batch(0, kind)))))

        return Setup(self._steps(forward, kind), sum(_nbytes(v) for v in variables), checksum,
                     self.steps_per_call)

    def train_setup(self, train: Callable[[list[Any]], Any], tables: Sequence[Any],
                    variables: Sequence[Any], kind: str = "sparse") -> Setup:
        """Checksum: sum of squares of the table rows batch 0 touches, after the timed steps; the
        training variants apply the same batches in the same order, so they agree."""

        def checksum() -> float:
            return float(sum(
                np.sum(np.square(tf.gather(table, self.unique_ids(0, t)).numpy(),
                                 dtype=np.float64))
                for t, table in enumerate(tables)))

        return Setup(self._steps(train, kind), sum(_nbytes(v) for v in variables), checksum,
                     self.steps_per_call)

    def _steps(self, step: Callable[[list[Any]], Any], kind: str = "sparse"
               ) -> Callable[[int], Any]:
        """A callable running `steps_per_call` steps. One step: `step` on batch `i`, called from
        Python as a tf.function step usually is. More: one tf.function whose loop runs `step`
        on the next batch of a tf.data iterator, as TPU embedding code runs its steps
        (`for _ in tf.range(num_steps): ... next(iterator)`) and Keras' `steps_per_execution`
        does, so tf.function's Python dispatch, about 0.7 ms for 8 SparseTensors, is paid once
        per call. Either way step k runs on batch k (cycled), so the train phase's checksums
        agree."""
        if self.steps_per_call == 1:
            return lambda i: step(self.batch(i, kind))
        batches = [tf.data.Dataset.from_tensors(tuple(self.batch(b, kind)))
                   for b in range(self.num_batches)]
        iterator = iter(functools.reduce(tf.data.Dataset.concatenate, batches).repeat())
        steps_per_call = self.steps_per_call

        @tf.function
        def run_steps(iterator):
            kept = tf.constant(0.0)
            for _ in tf.range(steps_per_call):
                # One element of each output (a train step has none) feeds the result, so no
                # step's outputs are pruned away; the ops computing them compute all of them.
                outputs = tf.nest.flatten(step(list(next(iterator))))
                for output in (o for o in outputs if o is not None):
                    kept += tf.cast(tf.reshape(output, [-1])[0], tf.float32)
            return kept

        return lambda i: run_steps(iterator)


def _adagrad() -> optimizers.Adagrad:
    return optimizers.Adagrad(learning_rate=LEARNING_RATE,
                              initial_accumulator_value=INITIAL_ACCUMULATOR)


def _keras_adagrad() -> keras.optimizers.Adagrad:
    return keras.optimizers.Adagrad(learning_rate=LEARNING_RATE,
                                    initial_accumulator_value=INITIAL_ACCUMULATOR)


def _table_configs(w: Workload, configs: Any = None) -> list[Any]:
    """The workload's tables as TableConfigs of `configs` (tf_embedding's, or stock's module)."""
    configs = configs or tf_embedding
    return [configs.TableConfig(vocabulary_size=w.vocab, dim=w.dim,
                                initializer=tf.zeros_initializer(), combiner="sum",
                                name=f"table_{t}")
            for t in range(w.tables)]


def _one_feature_per_table(table_configs: Sequence[Any], configs: Any = None) -> list[Any]:
    """Feature t on table t, as FeatureConfigs of `configs` (tf_embedding's, or stock's module)."""
    configs = configs or tf_embedding
    return [configs.FeatureConfig(table=config, name=f"feature_{t}")
            for t, config in enumerate(table_configs)]


def _filled_tables_and_accumulators(ctx: Context, table_variables: dict[str, dict[str, Any]]
                                    ) -> tuple[list[tf.Variable], list[tf.Variable]]:
    """The tables of a sharded TPUEmbedding, in its table order, filled by the workload, and their
    Adagrad accumulators, from its (or its layer's) `table_variables()`. Under the default
    strategy every table is one block: that block is the table."""
    names = list(table_variables)
    tables = [list(table_variables[name]["parameters"])[0] for name in names]
    ctx.workload.fill_tables(tables)
    accumulators = [list(table_variables[name]["accumulators"])[0] for name in names]
    return tables, accumulators


def _stock_lookup(tables: Sequence[tf.Variable],
                  features: Sequence[tf.SparseTensor]) -> list[tf.Tensor]:
    return [tf.nn.safe_embedding_lookup_sparse(table, feature, combiner="sum")
            for table, feature in zip(tables, features)]


def _v0_embedding(ctx: Context) -> tuple[Any, list[tf.Variable]]:
    """A TPUEmbeddingV0 with one feature per table and no embedding optimizer."""
    table_configs = _table_configs(ctx.workload)
    embedding = tf_embedding.TPUEmbeddingV0(_one_feature_per_table(table_configs), optimizer=None)
    embedding.build()
    tables = [embedding.embedding_tables[config] for config in table_configs]
    ctx.workload.fill_tables(tables)
    return embedding, tables


def _keras_train_setup(ctx: Context, tables: list[tf.Variable],
                       lookup: Callable[[list[tf.SparseTensor]], list[tf.Tensor]],
                       jit_compile: bool = False) -> Setup:
    optimizer = _keras_adagrad()
    # Built eagerly: creating the accumulators inside the traced step would capture them.
    optimizer.build(tables)

    @tf.function(jit_compile=jit_compile)
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(lookup(features))
        gradients = tape.gradient(loss, tables)
        optimizer.apply_gradients(zip(gradients, tables))

    return ctx.train_setup(train, tables, [*tables, *optimizer.variables])


@variant("stock-forward", "forward",
         "tf.nn.safe_embedding_lookup_sparse on tf.Variables", baseline=True)
def _stock_forward(ctx: Context) -> Setup:
    tables = ctx.make_tables()
    return ctx.forward_setup(tf.function(functools.partial(_stock_lookup, tables)), tables)


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
    embedding, tables = _v0_embedding(ctx)
    return ctx.forward_setup(tf.function(embedding.__call__), tables)


@variant("v0-forward-xla", "forward", "v0-forward compiled by XLA (tf.function(jit_compile=True))")
def _v0_forward_xla(ctx: Context) -> Setup:
    embedding, tables = _v0_embedding(ctx)
    return ctx.forward_setup(tf.function(embedding.__call__, jit_compile=True), tables)


@variant("stock-train", "train",
         "safe_embedding_lookup_sparse + tape IndexedSlices + ResourceSparseApplyAdagradV2",
         baseline=True)
def _stock_train(ctx: Context) -> Setup:
    tables, accumulators = ctx.make_tables(), ctx.make_accumulators()

    @tf.function
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(_stock_lookup(tables, features))
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
    optimizer = _adagrad()

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
    table_configs = _table_configs(ctx.workload)
    embedding = tf_embedding.TPUEmbedding(_one_feature_per_table(table_configs), _adagrad())
    embedding.build(per_replica_batch_size=ctx.workload.batch)
    return (embedding, *_filled_tables_and_accumulators(ctx, embedding.table_variables()))


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


@variant("keras-train", "train",
         "safe_embedding_lookup_sparse + tape IndexedSlices + keras.optimizers.Adagrad")
def _keras_train(ctx: Context) -> Setup:
    tables = ctx.make_tables()
    return _keras_train_setup(ctx, tables, functools.partial(_stock_lookup, tables))


@variant("v0-keras-train", "train",
         "TPUEmbeddingV0 + tape IndexedSlices + keras.optimizers.Adagrad")
def _v0_keras_train(ctx: Context) -> Setup:
    embedding, tables = _v0_embedding(ctx)
    return _keras_train_setup(ctx, tables, embedding.__call__)


@variant("v0-keras-train-xla", "train",
         "v0-keras-train compiled by XLA (tf.function(jit_compile=True))")
def _v0_keras_train_xla(ctx: Context) -> Setup:
    embedding, tables = _v0_embedding(ctx)
    return _keras_train_setup(ctx, tables, embedding.__call__, jit_compile=True)


def _keras_layer(ctx: Context) -> tuple[Any, list[tf.Variable], list[tf.Variable]]:
    """tf_embedding.keras.TPUEmbedding with one feature per table: it, its tables, their Adagrad
    accumulators."""
    from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel
    table_configs = _table_configs(ctx.workload)
    layer = embedding_keras.TPUEmbedding(_one_feature_per_table(table_configs), _adagrad())
    layer.build(None)
    return (layer, *_filled_tables_and_accumulators(ctx, layer.table_variables()))


@variant("keras-layer-forward", "forward", "tf_embedding.keras.TPUEmbedding called for inference")
def _keras_layer_forward(ctx: Context) -> Setup:
    return _keras_layer_forward_setup(ctx, jit_compile=False)


@variant("keras-layer-forward-xla", "forward",
         "keras-layer-forward compiled by XLA (tf.function(jit_compile=True))")
def _keras_layer_forward_xla(ctx: Context) -> Setup:
    return _keras_layer_forward_setup(ctx, jit_compile=True)


def _keras_layer_forward_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)
    # The layer holds its optimizer's slots whether or not the step trains.
    return ctx.forward_setup(
        tf.function(lambda features: layer(list(features)), jit_compile=jit_compile),
        [*tables, *accumulators])


@variant("keras-layer-train", "train",
         "tf_embedding.keras.TPUEmbedding, tape.gradient of its trainable variables (Adagrad)")
def _keras_layer_train(ctx: Context) -> Setup:
    return _keras_layer_train_setup(ctx, jit_compile=False)


@variant("keras-layer-train-xla", "train",
         "keras-layer-train compiled by XLA (tf.function(jit_compile=True), as model.fit's "
         "jit_compile=True step)")
def _keras_layer_train_xla(ctx: Context) -> Setup:
    return _keras_layer_train_setup(ctx, jit_compile=True)


def _keras_layer_train_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)

    @tf.function(jit_compile=jit_compile)
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(layer(list(features)))
        # The gradient trap applies the embedding Adagrad; the helper's gradient is zero.
        tape.gradient(loss, layer.trainable_variables)

    return ctx.train_setup(train, tables, [*tables, *accumulators])


def _fit_setup(ctx: Context, embedding: Any, tables: Sequence[Any], variables: Sequence[Any],
               jit_compile: bool = False) -> Setup:
    """A Keras 3 model of `embedding` (one feature per table, fed `{"feature_t": SparseTensor}`)
    whose loss is `ctx.loss` of its activations, compiled with the Keras Adagrad (and
    `jit_compile`), and a step that is one `model.train_on_batch` call: one compiled
    `train_step` per call, as `model.fit` runs with its default `steps_per_execution=1`."""

    class Model(keras.Model):  # pylint: disable=abstract-method

        def __init__(self):
            super().__init__()
            self.embedding = embedding

        def call(self, features):
            return tf.nest.flatten(self.embedding(features))

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                         training=True):
            del x, y, sample_weight, training
            return ctx.loss(y_pred)

    model = Model()
    model.compile(optimizer=_keras_adagrad(), jit_compile=jit_compile)
    names = [f"feature_{t}" for t in range(ctx.workload.tables)]
    # Built eagerly by a forward call (which trains nothing), so model_bytes counts the Keras
    # optimizer's slots and the timed steps are the only ones applied (the checksums agree).
    model(dict(zip(names, ctx.batch(0))))
    model.optimizer.build(model.trainable_variables)
    # One train_on_batch per call, from Python: not looped by --steps-per-call.
    one_step = copy.copy(ctx)
    one_step.steps_per_call = 1
    # No labels: compute_loss needs none. train_on_batch returns the loss as numpy, so it
    # returns when the step is done.
    return one_step.train_setup(
        lambda features: model.train_on_batch(dict(zip(names, features))), tables,
        [*variables, *model.optimizer.variables])


def _keras_rs_feature_configs(ctx: Context, optimizer: Any) -> dict[str, Any]:
    import keras_rs  # pylint: disable=import-outside-toplevel
    w = ctx.workload
    return {f"feature_{t}": keras_rs.layers.FeatureConfig(
        name=f"feature_{t}",
        table=keras_rs.layers.TableConfig(
            name=f"table_{t}", vocabulary_size=w.vocab, embedding_dim=w.dim, combiner="sum",
            initializer="zeros", optimizer=optimizer()),
        input_shape=(w.batch, None), output_shape=(w.batch, w.dim))
        for t in range(w.tables)}


@variant("keras-rs-fit", "train",
         "model.train_on_batch (one fit step) of tf_embedding.keras_rs.DistributedEmbedding, "
         "tables by their TableConfig Adagrad (fused)", default=False,
         versus=(("keras-rs-cpu-fit", 5.0), ("keras-layer-fit", 0.9)))
def _keras_rs_fit(ctx: Context) -> Setup:
    from tf_embedding import keras_rs as embedding_rs  # pylint: disable=import-outside-toplevel
    layer = embedding_rs.DistributedEmbedding(_keras_rs_feature_configs(
        ctx, lambda: keras.optimizers.Adagrad(learning_rate=LEARNING_RATE,
                                              initial_accumulator_value=INITIAL_ACCUMULATOR)))
    layer.build({f"feature_{t}": (ctx.workload.batch, None) for t in range(ctx.workload.tables)})
    tables, accumulators = _filled_tables_and_accumulators(ctx, layer.table_variables())
    return _fit_setup(ctx, layer, tables, [*tables, *accumulators])


@variant("keras-rs-cpu-fit", "train",
         "model.train_on_batch of keras-rs's own CPU keras_rs.layers.DistributedEmbedding, "
         "tables trained by the model's keras.optimizers.Adagrad", default=False)
def _keras_rs_cpu_fit(ctx: Context) -> Setup:
    import keras_rs  # pylint: disable=import-outside-toplevel
    # keras-rs ignores the TableConfig optimizer off a TPU.
    layer = keras_rs.layers.DistributedEmbedding(_keras_rs_feature_configs(ctx, lambda: None))
    layer.build({f"feature_{t}": (ctx.workload.batch, None) for t in range(ctx.workload.tables)})
    embedding_layers = layer._default_device_embedding_layers  # pylint: disable=protected-access
    # The Keras variables' tf.Variables, which fill_tables assigns through their handles.
    tables = [embedding_layers[f"feature_{t}"].embeddings.value
              for t in range(ctx.workload.tables)]
    ctx.workload.fill_tables(tables)
    return _fit_setup(ctx, layer, tables, tables)


@variant("keras-layer-fit", "train",
         "model.train_on_batch of tf_embedding.keras.TPUEmbedding (fused Adagrad)")
def _keras_layer_fit(ctx: Context) -> Setup:
    return _keras_layer_fit_setup(ctx, jit_compile=False)


@variant("keras-layer-fit-xla", "train",
         "keras-layer-fit with the model compiled with jit_compile=True (model.fit's XLA step)")
def _keras_layer_fit_xla(ctx: Context) -> Setup:
    return _keras_layer_fit_setup(ctx, jit_compile=True)


def _keras_layer_fit_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)

    class ByName(keras.layers.Layer):  # pylint: disable=abstract-method
        """The Keras layer fed the model's {"feature_t": ...} dict in table order."""

        def __init__(self):
            super().__init__()
            self.layer = layer

        def call(self, features):
            return self.layer([features[f"feature_{t}"] for t in range(ctx.workload.tables)])

    return _fit_setup(ctx, ByName(), tables, [*tables, *accumulators], jit_compile=jit_compile)


@variant("tfrs-train", "train",
         "TFRS's layer on CPU (tf_keras): tables trained by tf_keras legacy Adagrad, epsilon 0",
         legacy_keras=True)
def _tfrs_train(ctx: Context) -> Setup:
    # pylint: disable=import-outside-toplevel
    import tensorflow_recommenders as tfrs
    import tf_keras
    stock = tf.tpu.experimental.embedding
    table_configs = _table_configs(ctx.workload, stock)
    # Legacy Adagrad adds epsilon outside the square root; 0 makes it the TPU rule the other
    # training variants run, so the checksums agree.
    tf_keras.backend.set_epsilon(0.0)
    optimizer = tf_keras.optimizers.legacy.Adagrad(
        learning_rate=LEARNING_RATE, initial_accumulator_value=INITIAL_ACCUMULATOR, epsilon=0.0)
    # On CPU TFRS's layer optimizer only decides which slots the layer makes; the Keras
    # optimizer trains the tables (and holds the accumulators).
    layer = tfrs.layers.embedding.TPUEmbedding(_one_feature_per_table(table_configs, configs=stock),
                                               optimizer=None)
    layer.build(None)
    tables = [layer.embedding_tables[config] for config in table_configs]
    ctx.workload.fill_tables(tables)
    variables = layer.trainable_variables
    optimizer._create_all_weights(variables)  # pylint: disable=protected-access

    @tf.function
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(layer(list(features)))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    return ctx.train_setup(train, tables, [*tables, *optimizer.variables()])


def _serving_embedding(workload: Workload, configs: Any, **options: Any
                       ) -> tuple[Any, list[tf.Variable]]:
    """A built TPUEmbeddingForServing of `configs` (tf_embedding, or stock's module) with one
    feature per table, and its tables, filled by the workload."""
    table_configs = _table_configs(workload, configs)
    embedding = configs.TPUEmbeddingForServing(_one_feature_per_table(table_configs, configs),
                                               None, **options)
    embedding.build()
    tables = [embedding.embedding_tables[config] for config in table_configs]
    workload.fill_tables(tables)
    return embedding, tables


def stock_serving_lookup(workload: Workload) -> Callable[[list[Any]], Any]:
    """Stock TF's TPUEmbeddingForServing of `workload` (one feature per table), its lookup as a
    tf.function; the returned function keeps the tables alive."""
    embedding, _ = _serving_embedding(workload, tf.tpu.experimental.embedding)
    return tf.function(embedding.embedding_lookup)


@variant("stock-serving", "serve", "stock TF TPUEmbeddingForServing.embedding_lookup",
         baseline=True)
def _stock_serving(ctx: Context) -> Setup:
    return _stock_serving_setup(ctx, "sparse")


@variant("stock-serving-ragged", "serve", "stock-serving taking RaggedTensors", default=False)
def _stock_serving_ragged(ctx: Context) -> Setup:
    return _stock_serving_setup(ctx, "ragged")


def _stock_serving_setup(ctx: Context, kind: str) -> Setup:
    return dataclasses.replace(
        ctx.forward_setup(stock_serving_lookup(ctx.workload), [], kind=kind),
        model_bytes=ctx.workload.table_bytes)


@variant("stock-serving-export", "serve",
         "stock TF's TPUEmbeddingForServing lookup exported to a SavedModel, loaded and called",
         default=False)
def _stock_serving_export(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=None)


@variant("serving-export", "serve",
         "our TPUEmbeddingForServing's lookup exported to a SavedModel, loaded and called",
         target=2.0)
def _serving_export(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=False)


@variant("serving-export-xla", "serve",
         "serving-export with TPUEmbeddingForServing(jit_compile=True)", target=2.0)
def _serving_export_xla(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=True)


@variant("serving-export-ragged", "serve", "serving-export taking RaggedTensors",
         default=False, versus=(("stock-serving-ragged", 2.0),))
def _serving_export_ragged(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=False, kind="ragged")


@variant("serving-export-xla-ragged", "serve", "serving-export-xla taking RaggedTensors",
         default=False, versus=(("stock-serving-ragged", 2.0),))
def _serving_export_xla_ragged(ctx: Context) -> Setup:
    return _serving_export_setup(ctx, jit_compile=True, kind="ragged")


# The exported lookup's input signature per input kind (`Context.batch`).
_SERVING_INPUT_SPECS = {
    "sparse": lambda per_sample: tf.SparseTensorSpec([None, per_sample], tf.int64),
    "ragged": lambda per_sample: tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1,
                                                     row_splits_dtype=tf.int64),
}


def _export_serving_lookup(workload: Workload, jit_compile: bool | None, kind: str,
                           export_dir: str) -> None:
    """In a process of its own: our TPUEmbeddingForServing of `workload` (stock TF's if
    `jit_compile` is None), its tables filled as every variant's, with its lookup of `kind`
    features exported to `export_dir`."""
    import_tensorflow()
    embedding, _ = (_serving_embedding(workload, tf.tpu.experimental.embedding)
                    if jit_compile is None else
                    _serving_embedding(workload, tf_embedding, jit_compile=jit_compile))
    module = tf.Module()
    module.embedding = embedding
    module.lookup = tf.function(
        embedding.embedding_lookup,
        input_signature=[[_SERVING_INPUT_SPECS[kind](workload.ids_per_sample)]
                         * workload.tables])
    tf.saved_model.save(module, export_dir)


def exported_serving_lookup(workload: Workload, jit_compile: bool | None,
                            kind: str = "sparse") -> Callable[[list[Any]], Any]:
    """Our serving lookup of `workload`'s `kind` features ("sparse" or "ragged"; stock TF's if
    `jit_compile` is None), exported by another process, loaded here: the loaded function, as a
    server that loads the export runs it (any batch size).

    This process holds only what loading gives it (an export made here would leave the
    exporter's graphs, and its freed tables in TensorFlow's allocator pool, in its memory)."""
    import multiprocessing  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory(prefix="serving_export_") as export_dir:
        exporter = multiprocessing.get_context("spawn").Process(
            target=_export_serving_lookup, args=(workload, jit_compile, kind, export_dir))
        exporter.start()
        exporter.join()
        if exporter.exitcode != 0:
            raise RuntimeError(f"the exporting process failed (exit code {exporter.exitcode})")
        # Loading restores the tables into memory, so the files are not needed afterwards.
        loaded = tf.saved_model.load(export_dir)
    # The lambda keeps `loaded`, which owns the variables, alive.
    return lambda features: loaded.lookup(features)


def _serving_export_setup(ctx: Context, jit_compile: bool | None,
                          kind: str = "sparse") -> Setup:
    return dataclasses.replace(
        ctx.forward_setup(exported_serving_lookup(ctx.workload, jit_compile, kind), [],
                          kind=kind),
        model_bytes=ctx.workload.table_bytes)


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

    return Setup(lambda i: lookup(batches[i % ctx.num_batches]), sum(map(_nbytes, tables)))


@variant("ours-train:apply", "part",
         "ops.sparse_apply(Adagrad) of every table on converted batches and their gradients",
         default=False, part_of="ours-train")
def _part_apply(ctx: Context) -> Setup:
    tables, accumulators = ctx.make_tables(), ctx.make_accumulators()
    optimizer = _adagrad()
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
                 sum(map(_nbytes, [*tables, *accumulators])))
