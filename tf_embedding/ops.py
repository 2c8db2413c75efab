"""Typed wrappers of the engine's raw ops: every call of them goes through here.

* Host side: one table's features -> one stacked CSR batch (`features_to_csr`), or for a
  forward pass straight to its activations (`features_lookup`); ids deduplicated by shard
  (`dedup`); a table's stacked activations split into per-feature outputs (`feature_outputs`).
* Tables: the fused lookup (`embedding_lookup`, `embedding_lookup_dense`), its gradient
  (`embedding_gradient`, `lookup_table_gradient`) and the fused optimizer updates
  (`sparse_apply`, `sparse_apply_rows`), through the optimizers' public contract.
* The engine queues' size check (`check_queue_sizes`).

The main job's own ops (its synthetic data and its TSV reader) are wrapped with the job, in
`tf_embedding.job.data.input_ops`.

The op contract is docs/kernels.md. Importing this module registers the gradients of the
lookup ops: the table receives `tf.IndexedSlices(values, unique_ids, table_shape)`, so
`tf.GradientTape().gradient(loss, table_variable)` works and a Keras optimizer can apply it.
"""

from typing import Any, List, Mapping, NamedTuple, Sequence, Tuple

import tensorflow as tf
# Private TF APIs, used the way ResourceVariable.sparse_read uses them: record the variable on
# the active tapes (we read it through its handle, not read_value()), read the variable's shape
# without reading the variable, and tell automatic control dependencies that the lookups
# (TfeEmbeddingLookup, TfeFeaturesLookup) only read their tables (so lookups of one table in a
# tf.function need not run one after another).
from tensorflow.python.framework import auto_control_deps_utils
from tensorflow.python.ops import control_flow_util
from tensorflow.python.ops import resource_variable_ops

from tf_embedding import _loader
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.feature_inputs.feature_input import activation_shape
from tf_embedding.feature_inputs.feature_input import check_ids_dtype
from tf_embedding.feature_inputs.feature_input import input_kind

auto_control_deps_utils.register_read_only_resource_op("TfeEmbeddingLookup")
auto_control_deps_utils.register_read_only_resource_op("TfeFeaturesLookup")

# One CSR batch with the gradient of its activations: (row_splits, ids, gains,
# activation_gradients).
GradientBatch = tuple[Any, Any, Any, Any]


def compiling_with_xla(graph: Any = None) -> bool:
    """Whether `graph` (by default the graph being built) is compiled by XLA:
    tf.function(jit_compile=True) traces its body (and every function it first traces) inside an
    XLA control flow context. The ops run there through their XLA kernels (cc/xla); what has
    none (the engine's queues) must not."""
    return control_flow_util.GraphOrParentsInXlaContext(
        tf.compat.v1.get_default_graph() if graph is None else graph)


def _table_name(table_variable, table_name: str | None) -> str:
    """The name for error messages: explicit, else the variable's name without ":0"."""
    if table_name is not None:
        return table_name
    return table_variable.name.split(":")[0]


def embedding_lookup(table_variable, row_splits, ids, gains, table_name: str | None = None):
    """activations[r] = sum(gains[k] * table[ids[k]]) over row r's lookups: float [R, dim].

    Reads the table straight from `table_variable` (no copy). Differentiable with respect to
    the table: the gradient is IndexedSlices over the looked-up ids.
    """
    resource_variable_ops.variable_accessed(table_variable)
    return _loader.load_ops().tfe_embedding_lookup(
        table=table_variable.handle, row_splits=row_splits, ids=ids, gains=gains,
        table_name=_table_name(table_variable, table_name))


def assign_rows(table_variable, first_row, rows, table_name: str | None = None):
    """table[first_row + i] = rows[i], written in place (no copy of the table, and the variable
    stays out of copy-on-read mode, unlike a sliced `assign`)."""
    return _loader.load_ops().tfe_assign_rows(
        table=table_variable.handle, first_row=first_row, rows=rows,
        table_name=_table_name(table_variable, table_name))


def reset_rows(table_variable, rows, source, source_rows, table_name: str | None = None):
    """table[rows[i]] = source[source_rows[i]], written in place as `assign_rows` writes."""
    return _loader.load_ops().tfe_reset_rows(
        table=table_variable.handle, rows=rows, source=source, source_rows=source_rows,
        table_name=_table_name(table_variable, table_name))


def restore_rows(prefix, tensor_name, first_row, num_rows, table_name: str = "table"):
    """Rows [first_row, first_row + num_rows) of the float32 matrix `tensor_name` in the
    checkpoint `prefix`, reading only those rows (TF's reader reads whole stored slices)."""
    return _loader.load_ops().tfe_restore_rows(
        prefix=prefix, tensor_name=tensor_name, first_row=first_row, num_rows=num_rows,
        table_name=table_name)


def embedding_lookup_dense(table, row_splits, ids, gains, table_name: str = "table"):
    """embedding_lookup on a float [V, dim] tensor; its gradient is IndexedSlices too."""
    return _loader.load_ops().tfe_embedding_lookup_dense(
        table=table, row_splits=row_splits, ids=ids, gains=gains, table_name=table_name)


def embedding_gradient(batches: Sequence[GradientBatch], vocabulary_size: int = -1,
                       table_name: str = "table"):
    """The table gradient of N lookups: (unique_ids int64 [U] ascending, values float [U, dim]).

    values[u] sums gain * activation gradient over every lookup of unique_ids[u], in batch
    order then lookup order. vocabulary_size < 0 only checks that ids are non-negative.
    """
    row_splits, ids, gains, activation_gradients = _unzip_batches(batches)
    return _loader.load_ops().tfe_embedding_gradient(
        row_splits=row_splits, ids=ids, gains=gains, activation_gradients=activation_gradients,
        vocabulary_size=vocabulary_size, table_name=table_name)


def sparse_apply(optimizer, table_variable, slot_variables: Mapping[str, Any],
                 batches: Sequence[GradientBatch], learning_rate,
                 table_name: str | None = None):
    """Sums the gradients of `batches` per unique id and applies `optimizer` in place.

    `optimizer` (tf_embedding.optimizers) provides `description.op` (the op's registered
    type, e.g. "TfeSparseApplyAdagrad"), `slot_names()` and `kernel_attrs()` (the op's
    optimizer attrs). `slot_variables` maps each slot name to its variable;
    `learning_rate` is a float or a float32 scalar tensor (e.g.
    `optimizer.learning_rate_tensor()`). Returns the op (None when executing eagerly).
    """
    row_splits, ids, gains, activation_gradients = _unzip_batches(batches)
    return _apply(optimizer, optimizer.description.op,
                  table_variable, slot_variables, learning_rate, table_name,
                  row_splits=row_splits, ids=ids, gains=gains,
                  activation_gradients=activation_gradients)


def sparse_apply_rows(optimizer, table_variable, slot_variables: Mapping[str, Any],
                      id_row_pairs: Sequence[tuple[Any, Any]], learning_rate,
                      table_name: str | None = None):
    """Applies `optimizer` in place with gradients already summed per id, e.g. per replica.

    `id_row_pairs` holds N >= 1 pairs `(unique_ids, rows)`: int64 [U_i] ids, strictly
    ascending, and their float32 [U_i, dim] gradient rows. An id may appear in several pairs;
    its rows are summed in pair order, then each id's row is updated once, as `sparse_apply`
    does (same optimizer attrs and slots). Runs the op `optimizer.description.rows_op`
    (e.g. TfeSparseApplyAdagradRows). Returns the op (None when executing eagerly).
    """
    if not id_row_pairs:
        raise ValueError("id_row_pairs must hold at least one (unique_ids, rows) pair.")
    unique_ids, rows = (list(column) for column in zip(*id_row_pairs))
    return _apply(optimizer, optimizer.description.rows_op,
                  table_variable, slot_variables, learning_rate, table_name,
                  unique_ids=unique_ids, rows=rows)


def _apply(optimizer, op_name: str, table_variable, slot_variables: Mapping[str, Any],
           learning_rate, table_name: str | None, **gradients):
    """Runs the sparse-apply op `op_name` of `optimizer` with the `gradients` inputs."""
    slot_names = optimizer.slot_names()
    missing = [name for name in slot_names if name not in slot_variables]
    if missing:
        raise ValueError(f"slot_variables lacks the slots {missing} of {type(optimizer).__name__}; "
                         f"got {sorted(slot_variables)}.")
    # The op library's raw-op wrapper carries the registered op's own name (keyword arguments).
    apply_op = getattr(_loader.load_ops(), op_name)
    return apply_op(
        table=table_variable.handle,
        **{name: slot_variables[name].handle for name in slot_names},
        **gradients,
        learning_rate=tf.cast(learning_rate, tf.float32),
        table_name=_table_name(table_variable, table_name),
        **optimizer.kernel_attrs())


def _unzip_batches(batches: Sequence[GradientBatch]):
    """[(row_splits, ids, gains, activation_gradients), ...] -> four lists of length N >= 1."""
    if not batches:
        raise ValueError("batches must hold at least one (row_splits, ids, gains, "
                         "activation_gradients) tuple.")
    return tuple(list(column) for column in zip(*batches))


def lookup_table_gradient(table: tf.Tensor, row_splits: tf.Tensor, ids: tf.Tensor,
                          gains: tf.Tensor, activation_gradients: Any, table_name: str
                          ) -> tf.IndexedSlices:
    """The table gradient of a lookup of CSR batch (row_splits, ids, gains) in `table` (a
    variable's handle, or a tensor): IndexedSlices over the looked-up ids, each summed."""
    unique_ids, values = _loader.load_ops().tfe_embedding_gradient(
        row_splits=[row_splits], ids=[ids], gains=[gains],
        activation_gradients=[tf.convert_to_tensor(activation_gradients)],
        vocabulary_size=_static_row_count(table), table_name=table_name)
    if table.dtype == tf.resource:
        dense_shape = resource_variable_ops.variable_shape(table, out_type=tf.int64)
    else:
        dense_shape = tf.shape(table, out_type=tf.int64)
    return tf.IndexedSlices(values, unique_ids, dense_shape)


def _static_row_count(table: tf.Tensor) -> int:
    """The row count of a lookup's table (a variable's handle or a tensor) if known when
    tracing, else -1. The forward op already checked the ids against the table, so the bound
    is not needed for that; the gradient's XLA kernel needs it to size its scratch."""
    if table.dtype == tf.resource:
        handle_data = resource_variable_ops.get_eager_safe_handle_data(table)
        if not handle_data.is_set or not handle_data.shape_and_type:
            return -1
        shape = tf.TensorShape(handle_data.shape_and_type[0].shape)
    else:
        shape = table.shape
    return -1 if shape.rank is None or shape[0] is None else int(shape[0])


@tf.RegisterGradient("TfeEmbeddingLookup")
@tf.RegisterGradient("TfeEmbeddingLookupDense")
def _embedding_lookup_grad(op, activation_gradients):
    return (lookup_table_gradient(*op.inputs, activation_gradients, op.get_attr("table_name")),
            None, None, None)


# ---------------------------------------------------------------------------------------------
# Host side: features -> CSR batches (TfeFeaturesToCsr, TfeFeaturesLookup, TfeCsrDedup,
# TfeFeatureOutputs).


class CsrBatch(NamedTuple):
    """One table's lookups: row r holds ids[row_splits[r]:row_splits[r+1]] with their gains."""

    row_splits: tf.Tensor  # int64 [R + 1]
    ids: tf.Tensor  # int64 [nnz]
    gains: tf.Tensor  # float32 [nnz]
    feature_row_counts: tf.Tensor  # int64 [num_features]


class DedupResult(NamedTuple):
    """Unique ids grouped by shard (id % num_shards), ascending within a shard."""

    unique_ids: tf.Tensor  # int64 [U]
    inverse: tf.Tensor  # int32 [nnz]: ids == gather(unique_ids, inverse)
    shard_splits: tf.Tensor  # int64 [num_shards + 1]


class _OpInputs(NamedTuple):
    """One feature's entry in each list input of TfeFeaturesToCsr."""

    kind: str
    ids: tf.Tensor
    row_info: tf.Tensor
    dense_shape: tf.Tensor
    weights: tf.Tensor


def _unused() -> tf.Tensor:
    """The [0]-shaped placeholder for an op input a feature's kind does not use."""
    return tf.zeros([0], tf.int64)


def _check_ragged(name: str, tensor: tf.RaggedTensor, what: str) -> None:
    if tensor.ragged_rank != 1 or tensor.flat_values.shape.rank != 1:
        raise ValueError(
            f"Feature {name}: only rank 2 ragged {what} (one ragged dimension) are supported, "
            f"but got ragged_rank {tensor.ragged_rank} and shape {tensor.shape}.")


def _weight_values(feature: FeatureInput, kind: str) -> tf.Tensor:
    """The feature's per-lookup weights as float32 values, [0]-shaped without weights."""
    weight = feature.weight
    if weight is None:
        return tf.zeros([0], tf.float32)
    if input_kind(weight) != kind:
        raise TypeError(f"Feature {feature.name}: weight is a {type(weight).__name__} but the "
                        f"input is {kind}; they must be of the same kind.")
    if kind == "sparse":
        values = weight.values
    elif kind == "ragged":
        _check_ragged(feature.name, weight, "weights")
        values = weight.flat_values
    else:
        values = tf.reshape(weight, [-1])
    return tf.cast(values, tf.float32)


def _op_inputs(feature: FeatureInput) -> _OpInputs:
    tensor, kind = feature.tensor, input_kind(feature.tensor)
    if kind == "sparse":
        ids, row_info, dense_shape = tensor.values, tensor.indices, tensor.dense_shape
    elif kind == "ragged":
        _check_ragged(feature.name, tensor, "tensors")
        ids, row_info, dense_shape = (tensor.flat_values, tf.cast(tensor.row_splits, tf.int64),
                                      _unused())
    else:
        if feature.max_sequence_length > 0:
            raise ValueError(f"Feature {feature.name} is a sequence feature but a dense tensor "
                             "was passed.")
        ids = tf.convert_to_tensor(tensor)
        row_info, dense_shape = _unused(), tf.shape(ids, out_type=tf.int64)
    check_ids_dtype(feature.name, ids.dtype)
    return _OpInputs(kind, ids, row_info, dense_shape, _weight_values(feature, kind))


def features_to_csr(table_name: str, vocabulary_size: int, combiner: str,
                    features: Sequence[FeatureInput]) -> CsrBatch:
    """Validates the features of one table and stacks them, in order, into one CSR batch."""
    batch = CsrBatch(*_loader.load_ops().tfe_features_to_csr(
        **_conversion_arguments(table_name, vocabulary_size, combiner, features)))
    return batch._replace(feature_row_counts=_row_counts(batch.feature_row_counts, features))


def features_check(table_name: str, vocabulary_size: int, combiner: str,
                   features: Sequence[FeatureInput]) -> Tuple[tf.Tensor, tf.Tensor]:
    """What `features_to_csr` would refuse of these features' structure (indices, row splits,
    weights; not the ids' range), without failing and without reading the ids: the index of the
    first refused feature (int32, -1 when all are valid) and its message (`TfeFeaturesCheck`)."""
    return tuple(_loader.load_ops().tfe_features_check(
        **_conversion_arguments(table_name, vocabulary_size, combiner, features)))


def _row_counts(op_row_counts: tf.Tensor, features: Sequence[FeatureInput]) -> tf.Tensor:
    """A conversion op's feature_row_counts; inside XLA the same counts from the features'
    shapes alone. XLA needs the sizes of a split (each feature's activations) when compiling,
    and TensorFlow would make every input of the op that computes them a compile-time constant:
    the ids (and the tables) would be baked into the program, compiled again for every batch."""
    if not compiling_with_xla():
        return op_row_counts
    return tf.stack([tf.reduce_prod(activation_shape(feature, 1)[:-1]) for feature in features])


class LookedUpTable(NamedTuple):
    """A table that `features_lookup` reads: its float [vocabulary_size, dim] variable, read in
    place, and the table's config."""

    variable: Any
    name: str
    vocabulary_size: int
    combiner: str


def features_lookup(tables: Sequence[LookedUpTable],
                    table_features: Sequence[Sequence[FeatureInput]]
                    ) -> List[Tuple[tf.Tensor, tf.Tensor]]:
    """For each table, the activations of `features_to_csr`'s batch of its features looked up
    in it: (float [R, dim], int64 feature_row_counts), in one op for every table, whose threads
    share the rows of all of them. The same bits as converting, then `ops.embedding_lookup`;
    faster for pooled rank-2 sparse and ragged features without weights and for dense ones, which
    it reads without building the batch. Differentiable with respect to the tables: the gradient
    converts each table's features again (`_features_lookup_grad`), as a lookup that no update
    follows never does."""
    if len(tables) != len(table_features):
        raise ValueError(f"features_lookup got {len(tables)} tables but features for "
                         f"{len(table_features)}.")
    if not tables:
        return []
    arguments = [_feature_arguments(table.name, features)
                 for table, features in zip(tables, table_features)]
    for table in tables:
        # As ops.embedding_lookup does: the op reads the variable through its handle, so record
        # the access (tf.function then tracks the variable as captured).
        resource_variable_ops.variable_accessed(table.variable)
    outputs = _loader.load_ops().tfe_features_lookup(
        tables=[table.variable.handle for table in tables],
        **{key: [value for table_arguments in arguments for value in table_arguments[key]]
           for key in arguments[0]},
        table_names=[table.name for table in tables],
        combiners=[table.combiner for table in tables],
        vocabulary_sizes=[table.vocabulary_size for table in tables],
        table_feature_counts=[len(features) for features in table_features])
    return [(activations, _row_counts(row_counts, features)) for activations, row_counts, features
            in zip(outputs.activations, outputs.feature_row_counts, table_features)]


@tf.RegisterGradient("TfeFeaturesLookup")
def _features_lookup_grad(op, *output_gradients):
    """The tables' gradients of a TfeFeaturesLookup: each table's features converted by
    TfeFeaturesToCsr, from the op's own inputs and attributes, and its lookups' gradient
    (`ops.lookup_table_gradient`, IndexedSlices), as the converted lookup's gradient is. The
    features get none (nor does a table whose activations get none)."""
    num_tables, num_features = op.get_attr("M"), op.get_attr("N")
    tables = op.inputs[:num_tables]
    ids, row_info, dense_shapes, weights = (
        op.inputs[num_tables + k * num_features:num_tables + (k + 1) * num_features]
        for k in range(4))
    feature_attrs = {name: op.get_attr(name) for name in (
        "input_kinds", "has_weights", "max_sequence_lengths", "prune_invalid", "feature_names")}
    table_gradients = []
    first = 0
    for t, count in enumerate(op.get_attr("table_feature_counts")):
        features = slice(first, first + count)
        first += count
        if output_gradients[t] is None:
            table_gradients.append(None)
            continue
        table_name = op.get_attr("table_names")[t].decode()
        row_splits, csr_ids, gains, _ = _loader.load_ops().tfe_features_to_csr(
            ids=ids[features], row_info=row_info[features], dense_shapes=dense_shapes[features],
            weights=weights[features],
            **{name: values[features] for name, values in feature_attrs.items()},
            combiner=op.get_attr("combiners")[t].decode(),
            vocabulary_size=op.get_attr("vocabulary_sizes")[t], table_name=table_name)
        table_gradients.append(lookup_table_gradient(
            tables[t], row_splits, csr_ids, gains, output_gradients[t], table_name))
    return table_gradients + [None] * (4 * num_features)


def _conversion_arguments(table_name: str, vocabulary_size: int, combiner: str,
                          features: Sequence[FeatureInput]) -> dict[str, Any]:
    """The inputs and attrs of TfeFeaturesToCsr for one table's features."""
    return dict(_feature_arguments(table_name, features), combiner=combiner,
                vocabulary_size=vocabulary_size, table_name=table_name)


def _feature_arguments(table_name: str, features: Sequence[FeatureInput]) -> dict[str, list]:
    """The per-feature inputs and attrs of the conversion of one table's features (lists, one
    entry per feature), which TfeFeaturesToCsr and TfeFeaturesLookup share."""
    if not features:
        raise ValueError(f"Table {table_name}: features_to_csr needs at least one feature.")
    inputs = [_op_inputs(feature) for feature in features]
    return dict(
        ids=[i.ids for i in inputs],
        row_info=[i.row_info for i in inputs],
        dense_shapes=[i.dense_shape for i in inputs],
        weights=[i.weights for i in inputs],
        input_kinds=[i.kind for i in inputs],
        has_weights=[f.weight is not None for f in features],
        max_sequence_lengths=[f.max_sequence_length for f in features],
        prune_invalid=[f.prune_invalid for f in features],
        feature_names=[f.name for f in features])


def dedup(ids: tf.Tensor, num_shards: int, table_name: str = "") -> DedupResult:
    """Partitions a batch's ids by shard (id % num_shards) and deduplicates them."""
    return DedupResult(*_loader.load_ops().tfe_csr_dedup(
        ids=ids, num_shards=num_shards, table_name=table_name))


def feature_outputs(activations: tf.Tensor, feature_row_counts: tf.Tensor,
                    output_shapes: Sequence[Sequence[int]], partial: bool, message: str,
                    table_name: str) -> List[tf.Tensor]:
    """A table's stacked [R, dim] activations as each feature's activations in its output shape
    ([..., dim], fully defined but for a partial batch's first dimension, which may be None),
    in one op (`TfeFeatureOutputs`): the rows per feature (`feature_row_counts`) must fill the
    shapes, or with `partial` be whole samples of a smaller batch (of any size where the first
    dimension is None); else the step fails with `message` and the rows. Compiled by XLA, the
    rows are checked when compiling."""
    return _loader.load_ops().tfe_feature_outputs(
        activations=activations, feature_row_counts=feature_row_counts, N=len(output_shapes),
        output_shapes=[list(shape) for shape in output_shapes], partial=partial,
        message=message, table_name=table_name)


def check_queue_sizes(queue_refs: Sequence[tf.Tensor], min_size: int, max_size: int,
                      message: str) -> tf.Operation:
    """An op that fails with `message` unless the elements the queues hold together number
    from `min_size` to `max_size` (`TfeCheckQueueSizes`; it never blocks)."""
    return _loader.load_ops().tfe_check_queue_sizes(
        queues=list(queue_refs), min_size=min_size, max_size=max_size, message=message)
