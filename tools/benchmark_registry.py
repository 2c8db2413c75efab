"""The benchmark variants' registry and what every variant is built from: the `Workload`, its
precomputed batches as each input kind (`Context`), the `Setup` a variant returns, and the
builders several kinds of variant share (the workload's table configs, the embedding Adagrad).

TensorFlow is imported by the worker processes only (`import_tensorflow`, which gives this module
and each module of variants TensorFlow's names), so the orchestrator reads the registry without
TensorFlow's start-up time and memory. benchmark_variants.py says how to add a variant.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
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


_REGISTERED: dict[str, Variant] = {}


def variant(name: str, phase: str, description: str, **options: Any
            ) -> Callable[[Callable[["Context"], Setup]], Callable[["Context"], Setup]]:
    """Registers a variant's setup function under `name` (benchmark_variants.py says how)."""

    def register(setup: Callable[[Context], Setup]) -> Callable[[Context], Setup]:
        if name in _REGISTERED:
            raise ValueError(f"variant {name} is registered twice")
        _REGISTERED[name] = Variant(name, phase, description, setup, **options)
        return setup

    return register


def registered() -> dict[str, Variant]:
    """The variants registered so far, by name, in registration order: all of them once
    benchmark_variants is imported (`benchmark_variants.VARIANTS`)."""
    return _REGISTERED


# The modules whose functions use TensorFlow's names (`tf`, `keras`, `tf_embedding`, `ops`,
# `optimizers`, `feature_input`) as globals: this one and each module of variants
# (`uses_tensorflow`). `import_tensorflow` sets them, and keeps them for a module named later.
_TENSORFLOW_USERS = [__name__]
_TENSORFLOW_NAMES: dict[str, Any] = {}


def uses_tensorflow(module_name: str) -> None:
    """Gives the module `module_name` TensorFlow's names when `import_tensorflow` imports them
    (at once if it has)."""
    _TENSORFLOW_USERS.append(module_name)
    vars(sys.modules[module_name]).update(_TENSORFLOW_NAMES)


def import_tensorflow() -> None:
    """Imports TensorFlow, Keras and tf_embedding into this module and every module of variants
    (worker processes only)."""
    # pylint: disable=import-outside-toplevel,redefined-outer-name
    import keras
    import tensorflow as tf
    import tf_embedding
    from tf_embedding import ops, optimizers
    from tf_embedding.feature_inputs import feature_input
    _TENSORFLOW_NAMES.update(keras=keras, tf=tf, tf_embedding=tf_embedding, ops=ops,
                             optimizers=optimizers, feature_input=feature_input)
    for module_name in _TENSORFLOW_USERS:
        vars(sys.modules[module_name]).update(_TENSORFLOW_NAMES)


def nbytes(variable: Any) -> int:
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

        return Setup(self._steps(forward, kind), sum(nbytes(v) for v in variables), checksum,
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

        return Setup(self._steps(train, kind), sum(nbytes(v) for v in variables), checksum,
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


def adagrad() -> optimizers.Adagrad:
    return optimizers.Adagrad(learning_rate=LEARNING_RATE,
                              initial_accumulator_value=INITIAL_ACCUMULATOR)


def make_table_configs(w: Workload, configs: Any = None) -> list[Any]:
    """The workload's tables as TableConfigs of `configs` (tf_embedding's, or stock's module)."""
    configs = configs or tf_embedding
    return [configs.TableConfig(vocabulary_size=w.vocab, dim=w.dim,
                                initializer=tf.zeros_initializer(), combiner="sum",
                                name=f"table_{t}")
            for t in range(w.tables)]


def one_feature_per_table(table_configs: Sequence[Any], configs: Any = None) -> list[Any]:
    """Feature t on table t, as FeatureConfigs of `configs` (tf_embedding's, or stock's module)."""
    configs = configs or tf_embedding
    return [configs.FeatureConfig(table=config, name=f"feature_{t}")
            for t, config in enumerate(table_configs)]


def filled_tables_and_accumulators(ctx: Context, table_variables: dict[str, dict[str, Any]]
                                   ) -> tuple[list[tf.Variable], list[tf.Variable]]:
    """The tables of a sharded TPUEmbedding, in its table order, filled by the workload, and their
    Adagrad accumulators, from its (or its layer's) `table_variables()`. Under the default
    strategy every table is one block: that block is the table."""
    names = list(table_variables)
    tables = [list(table_variables[name]["parameters"])[0] for name in names]
    ctx.workload.fill_tables(tables)
    accumulators = [list(table_variables[name]["accumulators"])[0] for name in names]
    return tables, accumulators
