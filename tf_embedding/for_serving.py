"""`TPUEmbeddingForServing` and `serving_embedding_lookup`: TF 2.21's CPU lookups.

Lookups are built from stock TensorFlow ops only (never the tf_embedding op library), so a graph
or SavedModel exported from them runs in plain TensorFlow or TF Serving. Pooled sparse and ragged
features take the faster formulations of `pooled_lookup` where they apply (`_pooled` chooses).
"""

import functools
import math
from typing import Any, Mapping

import tensorflow as tf
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2
from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util
from tensorflow.python.tpu import tpu_embedding_v3_utils
from tensorflow.python.trackable import base as trackable_base

from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.feature_inputs.feature_input import output_shape_factor_message
from tf_embedding import argument_checks as checks
from tf_embedding import config
from tf_embedding import dynamic_vocabulary
from tf_embedding import keyed_lookup
from tf_embedding import pooled_lookup
from tf_embedding import serving_keys
from tf_embedding.serving_keys import KeyIndex
from tf_embedding.embedding_base import EmbeddingBase


_LAYOUTS_KEY = tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY
_OWNER = "TPUEmbeddingForServing"  # the class argument messages name


class TPUEmbeddingForServing(EmbeddingBase):
    """Embedding tables looked up with stock TF ops, for serving (or CPU training with Keras).

    Restores checkpoints written by stock TF's `TPUEmbedding`, `TPUEmbeddingForServing` and by
    every tf_embedding class, and writes the same keys. A dynamic table's keys are restored
    into a stock hash table (`serving_keys.RestoredKeyIndex`), which its SavedModel holds.
    Like TF, it also restores the stacked
    tables of a SparseCore (`TPUEmbeddingV2`) checkpoint when that checkpoint is restored before
    `build()`: their parameters only, no slots.
    """

    _DYNAMIC_REFUSAL = None  # a dynamic table's keys are served by its ServingKeyIndex

    def __init__(self, feature_config: Any, optimizer: Any,
                 experimental_sparsecore_restore_info: dict[str, Any] | None = None, *,
                 jit_compile: bool = False):
        """Creates the object; variables are created by `build()` or on first use.

        Args:
          feature_config: a nested structure of `FeatureConfig`s.
          optimizer: an embedding optimizer, used by tables without one of their own, or None so
            that tables without an optimizer get no slot variables.
          experimental_sparsecore_restore_info: accepted for TF compatibility and unused, as in TF.
          jit_compile: pool sparse and ragged features with an XLA-compiled gather-and-sum
            (`serving_embedding_lookup`). Not in TF.

        Raises:
          RuntimeError: if created under a TPUStrategy.
          TypeError, ValueError: a `feature_config` that holds no FeatureConfigs, an optimizer
            class, a restore info that is no dict, a `jit_compile` that is no bool
            (argument_checks.py), or TF's errors.
        """
        config.check_embedding_arguments(_OWNER, feature_config, optimizer)
        checks.check_mapping(_OWNER, "experimental_sparsecore_restore_info",
                             experimental_sparsecore_restore_info, "None or a dict")
        checks.check_flag(_OWNER, "jit_compile", jit_compile)
        del experimental_sparsecore_restore_info
        super().__init__(feature_config, optimizer)
        self._jit_compile = jit_compile
        if isinstance(tf.distribute.get_strategy(),
                      (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)):
            raise RuntimeError("Serving on TPU is not yet supported.")

    @property
    def variables(self) -> dict[str, dict[str, tf.Variable]]:
        """{table name: {"parameters": table, <slot name>: slot}}; builds if needed."""
        self._maybe_build()
        return self._variables

    def build(self) -> None:
        """Creates the table and slot variables (once)."""
        if self._built:
            return
        self._key_indexes = self._no_dependency(
            serving_keys.restored_key_indexes(self, self._table_config))
        super().build()
        # The layouts variable exists only to be restored into; plain checkpoints must not gain
        # a key for it.
        if hasattr(self, _LAYOUTS_KEY) and not self._sparse_core_layouts():
            delattr(self, _LAYOUTS_KEY)

    def _create_variables_and_slots(self) -> dict[str, dict[str, tf.Variable]]:
        stacked = self._create_stacked_table_variables()
        return {table.name: ({"parameters": stacked[table.name]} if table.name in stacked
                             else self._create_variables(table, trainable=True))
                for table in self._table_config}

    def _create_stacked_table_variables(self) -> dict[str, tf.Variable]:
        """Table variables restored from a pending SparseCore checkpoint, by table name."""
        # Restore-on-create: holds the checkpoint's serialized SparseCoreTableLayouts if a
        # SparseCore checkpoint is being restored, else "".
        setattr(self, _LAYOUTS_KEY, self._add_variable_with_custom_getter(
            name=_LAYOUTS_KEY, initializer=lambda dtype: tf.constant("", dtype=dtype),
            dtype=tf.string, getter=_string_variable_getter, trainable=False))
        layouts = sparse_core_layout_pb2.SparseCoreTableLayouts()
        layouts.ParseFromString(self._sparse_core_layouts())
        layouts_by_stack = {}
        for layout in layouts.tables:
            layouts_by_stack.setdefault(layout.stacked_table_name, []).append(layout)
        tables_by_name = {table.name: table for table in self._table_config}
        variables = {}
        for stacked_name, stacked_layouts in layouts_by_stack.items():
            stacked_table = tpu_embedding_v3_utils.SparseCoreStackedTableTrackable(
                stacked_layouts, tables_by_name)
            # Tracking it under the stacked table's key restores the stacked value, which it
            # unshuffles into its tables' variables.
            self._track_trackable(stacked_table, stacked_name)
            variables.update(stacked_table.get_vars())
        return variables

    def _sparse_core_layouts(self) -> bytes:
        return getattr(self, _LAYOUTS_KEY).read_value().numpy()

    def _trackable_children(self, save_type=trackable_base.SaveType.CHECKPOINT, **kwargs):
        # A SavedModel needs the unstacked tables only, as in TF.
        children = super()._trackable_children(save_type, **kwargs)
        if save_type == trackable_base.SaveType.SAVEDMODEL:
            children = {name: child for name, child in children.items()
                        if name != _LAYOUTS_KEY and not isinstance(
                            child, tpu_embedding_v3_utils.SparseCoreStackedTableTrackable)}
        return children

    def embedding_lookup(self, features: Any, weights: Any = None) -> Any:
        """`serving_embedding_lookup` on this object's tables; see there."""
        return serving_embedding_lookup(features, weights, self.embedding_tables,
                                        self._feature_config, jit_compile=self._jit_compile,
                                        key_indexes=self._key_indexes)


def _string_variable_getter(name: str, shape: Any, dtype: tf.DType, initializer: Any,
                            trainable: bool) -> tf.Variable:
    del shape  # Scalar; a restored value brings its own.
    return tf.Variable(name=name, initial_value=functools.partial(initializer, dtype=dtype),
                       dtype=dtype, trainable=trainable)


def serving_embedding_lookup(inputs: Any, weights: Any | None, tables: dict[Any, tf.Variable],
                             feature_config: Any, *, jit_compile: bool = False,
                             key_indexes: Mapping[str, KeyIndex] | None = None) -> Any:
    """Looks up `inputs` in `tables` as TF 2.21's CPU `serving_embedding_lookup` does.

    The activations are TF's; pooled sparse and ragged features are summed by faster stock-op
    formulations of the same pooling (`pooled_lookup`, chosen by `_pooled`), whose additions
    may come in another order for ragged or weighted features (a few ulps). With `jit_compile`
    they are summed by an XLA-compiled gather-and-sum, faster still on CPUs
    (docs/performance_serving.md). A SavedModel holding such a lookup loads in plain TensorFlow; TF
    Serving runs the compiled one with `--xla_cpu_compilation_enabled=true`.

    Args:
      inputs: a nested structure of `tf.Tensor`, `tf.SparseTensor` or `tf.RaggedTensor` ids whose
        joined string paths are a subset of `feature_config`'s.
      weights: None, or the structure of `inputs` with a weight tensor of the input's type (or
        None) per sparse or ragged input.
      tables: {TableConfig: variable or tensor of shape (vocabulary_size, dim)}.
      feature_config: the nested structure of `FeatureConfig`s.
      jit_compile: see above. Not in TF.
      key_indexes: {table name: `serving_keys.KeyIndex`} of the dynamic tables among
        `tables`, whose features are looked up by key (`keyed_lookup`; `jit_compile` does not
        apply). Not in TF.

    Raises:
      ValueError: a feature of a dynamic table without its key index in `key_indexes`, or of
        an input kind `keyed_lookup` does not take, naming the table.

    Returns:
      The structure of `inputs`, each input replaced by its activations:
      dense `ids.shape + [dim]`; pooled sparse `dense_shape[:-1] + [dim]`; pooled ragged
      `[batch, dim]`; sequence `[batch, max_sequence_length, dim]`; `output_shape + [dim]` for
      ragged inputs whose feature sets `output_shape`.
    """
    _refuse_outer_xla()
    outputs = []
    for item in cpu_rules.validate_features(inputs, weights, feature_config):
        key_index = _key_index_of(key_indexes, item)
        plan = cpu_rules.cpu_lookup_plan(item)
        with tf.control_dependencies(_layout_checks(item)):
            outputs.append(
                _lookup(plan, item.feature, _table_of(tables, item), jit_compile)
                if key_index is None else
                keyed_lookup.keyed_lookup(plan, item.feature, _table_of(tables, item), key_index))
    return tf.nest.pack_sequence_as(inputs, outputs)


def _refuse_outer_xla() -> None:
    """Raises ValueError when traced inside a user's XLA-compiled function: XLA drops the
    input checks (`tf.debugging.Assert`), so an out-of-range id would be clamped silently, and
    sparse and ragged lookups fail there on TF's `DisableCopyOnRead`."""
    if control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
        raise ValueError(
            "The serving lookup (TPUEmbeddingForServing, serving_embedding_lookup) is being "
            "traced inside an XLA-compiled function (tf.function(jit_compile=True)), where TF "
            "drops its input checks. Call it outside the compiled function and pass "
            "`jit_compile=True` to TPUEmbeddingForServing or serving_embedding_lookup instead: "
            "that compiles the pooling with XLA and keeps the checks.")


def _table_of(tables: dict[Any, tf.Variable], item: cpu_rules.ValidatedFeature) -> Any:
    table = item.feature.table
    if table not in tables:
        raise ValueError(f"Feature '{item.path}': `tables` holds no table for its table "
                         f"'{table.name}' (it holds {sorted(t.name for t in tables)})")
    return tables[table]


def _key_index_of(key_indexes: Mapping[str, KeyIndex] | None,
                  item: cpu_rules.ValidatedFeature) -> KeyIndex | None:
    """The key index of the feature's table if it is dynamic (None if fixed)."""
    table = item.feature.table
    if dynamic_vocabulary.dynamic_of(table) is None:
        return None
    if key_indexes is None or table.name not in key_indexes:
        raise dynamic_vocabulary.dynamic_table_error(
            table.name,
            f"feature '{item.path}' holds keys, which a stock lookup must map to rows with the "
            "table's key index, and `key_indexes` holds none for it: look it up with a "
            "TPUEmbeddingForServing restored from the training checkpoint, or pass the "
            "embedding's serving_key_indexes() (docs/dynamic_vocabulary.md).")
    return key_indexes[table.name]


def _layout_checks(item: cpu_rules.ValidatedFeature) -> list[tf.Operation]:
    """Run-time checks, in stock ops, of what the lookups index with: a ragged batch's row
    splits (a batch made with `validate=False` is not checked elsewhere, and the compiled lookup
    would read past its ids), and weights laid out as their ids (as many values; a ragged
    batch's row splits the ids', which TF's ragged broadcasting requires, and which are then
    valid too). Fails with InvalidArgumentError naming the table and the feature."""
    where = f"Table '{item.feature.table.name}', feature '{item.path}'"
    inp, weight = item.inputs, item.weights
    checks = []
    if isinstance(inp, tf.RaggedTensor):
        splits = inp.row_splits
        valid = tf.logical_and(
            tf.logical_and(tf.equal(splits[0], 0),
                           tf.equal(splits[-1], tf.size(inp.values, splits.dtype))),
            tf.reduce_all(splits[1:] >= splits[:-1]))
        checks.append(tf.debugging.Assert(valid, [
            f"{where}: the ids' row_splits must start at 0, not decrease and end at the number "
            "of values; row_splits and number of values:", splits, tf.size(inp.values)],
            summarize=20))
    if weight is not None:
        counts = weight.values.shape[0], inp.values.shape[0]
        if None not in counts and counts[0] != counts[1]:
            raise ValueError(f"{where}: the weights must be laid out as the ids, but there are "
                             f"{counts[0]} weights for {counts[1]} ids")
        same = tf.equal(tf.size(weight.values), tf.size(inp.values))
        if isinstance(inp, tf.RaggedTensor):
            same = tf.logical_and(same, _equal_vectors(
                tf.cast(weight.row_splits, inp.row_splits.dtype), inp.row_splits))
        checks.append(tf.debugging.Assert(same, [
            f"{where}: the weights must be laid out as the ids (as many values"
            + (", in rows as long" if isinstance(inp, tf.RaggedTensor) else "")
            + "); weights and ids:", tf.size(weight.values), tf.size(inp.values)]))
    return checks


def _equal_vectors(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Whether two vectors of one dtype are equal (False when their lengths differ)."""
    return tf.cond(tf.equal(tf.size(a), tf.size(b)),
                   lambda: tf.reduce_all(tf.equal(a, b)), lambda: tf.constant(False))


def _lookup(plan: cpu_rules.CpuLookupPlan, feature: Any, table: Any,
            jit_compile: bool) -> tf.Tensor:
    """One feature's activations, by the stock ops TF's CPU lookup uses for its plan (or a
    faster formulation of the same pooling: `pooled_lookup`)."""
    inp, weight = plan.feature_input.tensor, plan.feature_input.weight
    if isinstance(inp, tf.Tensor):
        return tf.nn.embedding_lookup(table, inp)
    if plan.runtime_output_shape_feature:
        return _ragged_output_shape_lookup_dynamic_batch(inp, weight, table,
                                                         plan.runtime_output_shape_feature)
    if isinstance(inp, tf.SparseTensor):
        activations = _sparse_lookup(inp, weight, table, plan, feature, jit_compile)
    elif plan.sequence_length:
        activations = tf.nn.embedding_lookup(table, inp).to_tensor(
            shape=[inp.shape[0], plan.sequence_length, feature.table.dim])
    else:
        activations = _ragged_pooled(inp, weight, table, feature, jit_compile)
    if plan.output_shape is not None:
        activations = tf.reshape(activations, plan.output_shape)
    return activations


def _sparse_lookup(inp: tf.SparseTensor, weight: tf.SparseTensor | None, table: Any,
                   plan: cpu_rules.CpuLookupPlan, feature: Any,
                   jit_compile: bool) -> tf.Tensor:
    combiner = feature.table.combiner
    if plan.sequence_length:
        batch_size = inp.dense_shape[0]
        # Positions past max_sequence_length are dropped (the TPU truncates them), which also
        # keeps scatter_nd's indices in bounds.
        truncated = tf.sparse.slice(
            inp, start=[0, 0], size=tf.stack([batch_size, plan.sequence_length]))
        return tf.scatter_nd(
            truncated.indices, tf.gather(table, truncated.values),
            tf.stack([batch_size, plan.sequence_length, feature.table.dim]))
    if plan.trim_trailing_rows:
        return tf.nn.embedding_lookup_sparse(table, inp, sp_weights=weight, combiner=combiner)

    def stock() -> tf.Tensor:
        return tf.nn.safe_embedding_lookup_sparse(table, inp, sparse_weights=weight,
                                                  combiner=combiner)

    if inp.shape.rank != 2:
        return stock()
    return _pooled(inp, weight, table, feature, jit_compile, stock)


def _ragged_pooled(inp: tf.RaggedTensor, weight: tf.RaggedTensor | None, table: Any,
                   feature: Any, jit_compile: bool) -> tf.Tensor:
    return _pooled(inp, weight, table, feature, jit_compile,
                   lambda: _ragged_pooled_lookup(table, inp, weight, feature.table.combiner))


def _pooled(inp: tf.SparseTensor | tf.RaggedTensor,
            weight: tf.SparseTensor | tf.RaggedTensor | None, table: Any, feature: Any,
            jit_compile: bool, stock: pooled_lookup.Fallback) -> tf.Tensor:
    """The one rule for how a pooled feature (a rank-2 `SparseTensor` or a `[batch, None]`
    `RaggedTensor`, weighted or not, any combiner) is looked up: the stock-op formulation that
    ran fastest on the reference workload (docs/performance_serving.md), falling back to
    `stock` (TF's own) per batch where it does not apply.

    * `jit_compile`: the XLA-compiled gather-and-sum over a grid of the lookups
      (`pooled_lookup.compiled_sparse_lookup` / `compiled_ragged_lookup`).
    * Otherwise: one sparse segment reduction (`pooled_lookup.segment_lookup` /
      `ragged_segment_lookup`), 1.2x-2x TF's own formulations, which dedupe the ids of weighted
      lookups (`unique` + two gathers) and sum ragged ones through ragged broadcasting.
    """
    name, vocabulary_size, combiner = (feature.table.name, feature.table.vocabulary_size,
                                       feature.table.combiner)
    sparse = isinstance(inp, tf.SparseTensor)
    if jit_compile:
        compiled = (pooled_lookup.compiled_sparse_lookup if sparse
                    else pooled_lookup.compiled_ragged_lookup)
        return compiled(table, name, vocabulary_size, combiner, inp, weight, fallback=stock)
    segments = pooled_lookup.segment_lookup if sparse else pooled_lookup.ragged_segment_lookup
    return segments(table, vocabulary_size, inp, weight, combiner, fallback=stock)


def _ragged_output_shape_lookup_dynamic_batch(inp: tf.RaggedTensor,
                                              weight: tf.RaggedTensor | None, table: Any,
                                              feature: Any) -> tf.Tensor:
    """`_ragged_lookup` with `output_shape` when the batch size is only known at run time.

    TF decides between pooling and sequences with Python control flow on a tensor, which fails
    in a tf.function; here the decision is a `tf.cond` and the shape error a run-time assertion.
    """
    dim = feature.table.dim
    output_shape = feature.output_shape.as_list() + [dim]
    output_size = math.prod(feature.output_shape.as_list())
    batch_size = inp.nrows()

    def pooled() -> tf.Tensor:
        return tf.reshape(
            _ragged_pooled_lookup(table, inp, weight, feature.table.combiner), output_shape)

    def sequences() -> tf.Tensor:
        fits = tf.logical_and(
            tf.logical_and(batch_size > 0, batch_size < output_size),
            tf.equal(output_size % tf.maximum(batch_size, 1), 0))
        message = tf.strings.format(
            output_shape_factor_message(feature, "{}"), batch_size)
        with tf.control_dependencies([tf.debugging.Assert(fits, [message])]):
            sequence_length = output_size // tf.maximum(batch_size, 1)
        activations = tf.nn.embedding_lookup(table, inp).to_tensor(
            shape=tf.stack([batch_size, sequence_length, dim]))
        return tf.reshape(activations, output_shape)

    return tf.cond(tf.equal(batch_size, output_size), pooled, sequences)


def _ragged_pooled_lookup(table: Any, ragged: tf.RaggedTensor,
                          weights: tf.RaggedTensor | None, combiner: str) -> tf.Tensor:
    """Weighted lookup reduced over each row with `combiner`; empty rows give zeros."""
    if weights is None:
        weights = tf.ones_like(ragged, dtype=table.dtype)
    weights = tf.expand_dims(weights, axis=2)
    activations = tf.reduce_sum(tf.nn.embedding_lookup(table, ragged) * weights, axis=1)
    norms = cpu_rules.combiner_norm(combiner, weights,
                                       lambda values: tf.reduce_sum(values, axis=1))
    return activations if norms is None else tf.math.divide_no_nan(activations, norms)
