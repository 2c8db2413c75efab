"""Typed wrappers around the tf_embedding lookup, gradient and sparse-apply ops.

The op contract is docs/internals.md. Importing this module registers the gradients of the
lookup ops: the table receives `tf.IndexedSlices(values, unique_ids, table_shape)`, so
`tf.GradientTape().gradient(loss, table_variable)` works and a Keras optimizer can apply it.
"""

from typing import Any, Mapping, Sequence

import tensorflow as tf
# Private TF APIs, used the way ResourceVariable.sparse_read uses them: record the variable on
# the active tapes (we read it through its handle, not read_value()), read the variable's shape
# without reading the variable, and tell automatic control dependencies that the lookup only
# reads its table (so lookups of one table in a tf.function need not run one after another).
from tensorflow.python.framework import auto_control_deps_utils
from tensorflow.python.ops import control_flow_util
from tensorflow.python.ops import resource_variable_ops

from tf_embedding import _loader

auto_control_deps_utils.register_read_only_resource_op("TfeEmbeddingLookup")

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
