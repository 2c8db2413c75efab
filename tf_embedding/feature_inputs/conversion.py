"""Host side: one table's features -> one stacked CSR batch (or, for a forward pass, straight
to its activations), and shard partition + dedup.

Thin typed wrappers over the `TfeFeaturesToCsr`, `TfeFeaturesLookup` and `TfeCsrDedup` ops
(docs/internals.md), plus the shapes that stock TF's CPU lookup gives each feature's activations,
so that the stacked `[R, dim]` activations of a batch can be split back into per-feature
outputs.
"""

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import tensorflow as tf
# Private TF APIs, as in ops.py: record a variable read through its handle, and tell automatic
# control dependencies that TfeFeaturesLookup only reads its table (so lookups of one table in a
# tf.function need not run one after another).
from tensorflow.python.framework import auto_control_deps_utils
from tensorflow.python.ops import resource_variable_ops

from tf_embedding import _loader
from tf_embedding import ops

auto_control_deps_utils.register_read_only_resource_op("TfeFeaturesLookup")

TensorLike = Union[tf.Tensor, tf.SparseTensor, tf.RaggedTensor]


class FeatureInput(NamedTuple):
    """One feature's ids as given by the user, with how to read them."""

    name: str
    tensor: TensorLike
    weight: Optional[TensorLike] = None
    max_sequence_length: int = 0
    # Stock safe_embedding_lookup_sparse: drop ids < 0, and weights <= 0 unless combiner is sum.
    prune_invalid: bool = False


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


def _kind(tensor: TensorLike) -> str:
    if isinstance(tensor, tf.SparseTensor):
        return "sparse"
    if isinstance(tensor, tf.RaggedTensor):
        return "ragged"
    return "dense"


def _weight_values(feature: FeatureInput, kind: str) -> tf.Tensor:
    """The feature's per-lookup weights as float32 values, [0]-shaped without weights."""
    weight = feature.weight
    if weight is None:
        return tf.zeros([0], tf.float32)
    if _kind(weight) != kind:
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
    tensor, kind = feature.tensor, _kind(feature.tensor)
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
    if ids.dtype not in (tf.int32, tf.int64):
        raise TypeError(
            f"Feature {feature.name}: ids must be int32 or int64, got {ids.dtype.name}.")
    return _OpInputs(kind, ids, row_info, dense_shape, _weight_values(feature, kind))


def features_to_csr(table_name: str, vocabulary_size: int, combiner: str,
                    features: Sequence[FeatureInput]) -> CsrBatch:
    """Validates the features of one table and stacks them, in order, into one CSR batch."""
    batch = CsrBatch(*_loader.load_ops().tfe_features_to_csr(
        **_conversion_arguments(table_name, vocabulary_size, combiner, features)))
    return batch._replace(feature_row_counts=_row_counts(batch.feature_row_counts, features))


def _row_counts(op_row_counts: tf.Tensor, features: Sequence[FeatureInput]) -> tf.Tensor:
    """A conversion op's feature_row_counts; inside XLA the same counts from the features'
    shapes alone. XLA needs the sizes of a split (each feature's activations) when compiling,
    and TensorFlow would make every input of the op that computes them a compile-time constant:
    the ids (and the tables) would be baked into the program, compiled again for every batch."""
    if not ops.compiling_with_xla():
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
    faster for pooled rank-2 sparse and ragged features without weights, which it reads without
    building the batch. Differentiable with respect to the tables: the gradient converts each
    table's features again (`_features_lookup_grad`), as a lookup that no update follows never
    does."""
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
        table_gradients.append(ops.lookup_table_gradient(
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


def activation_shape(feature: FeatureInput, dim: int) -> tf.Tensor:
    """The shape (int64) stock TF's CPU lookup gives this feature's activations.

    Dense: input shape + [dim]. Sparse: dense_shape[:-1] + [dim], or [B, msl, dim] for a
    sequence feature of rank 2 (or unknown rank). Ragged: [B, dim], or [B, msl, dim].
    """
    tensor, msl = feature.tensor, tf.constant([feature.max_sequence_length], tf.int64)
    kind = _kind(tensor)
    if kind == "sparse":
        if feature.max_sequence_length > 0 and tensor.shape.rank in (None, 2):
            outer = tf.concat([tensor.dense_shape[:1], msl], axis=0)
        else:
            outer = tensor.dense_shape[:-1]
    elif kind == "ragged":
        batch = tf.reshape(tensor.nrows(out_type=tf.int64), [1])
        outer = tf.concat([batch, msl], axis=0) if feature.max_sequence_length > 0 else batch
    else:
        outer = tf.shape(tensor, out_type=tf.int64)
    return tf.concat([outer, tf.constant([dim], tf.int64)], axis=0)


def feature_outputs(activations: tf.Tensor, feature_row_counts: tf.Tensor,
                    output_shapes: Sequence[Sequence[int]], partial: bool, message: str,
                    table_name: str) -> List[tf.Tensor]:
    """A table's stacked [R, dim] activations as each feature's activations in its output shape
    ([..., dim], fully defined), in one op (`TfeFeatureOutputs`): the rows per feature
    (`feature_row_counts`) must fill the shapes, or with `partial` be whole samples of a smaller
    batch; else the step fails with `message` and the rows. Compiled by XLA, the rows are
    checked when compiling."""
    return _loader.load_ops().tfe_feature_outputs(
        activations=activations, feature_row_counts=feature_row_counts, N=len(output_shapes),
        output_shapes=[list(shape) for shape in output_shapes], partial=partial,
        message=message, table_name=table_name)


def split_activations(activations: tf.Tensor, feature_row_counts: tf.Tensor,
                      features: Sequence[FeatureInput], dim: int) -> List[tf.Tensor]:
    """Splits a batch's stacked [R, dim] activations into each feature's output, given the
    output rows of each feature (`CsrBatch.feature_row_counts`). A lone feature's rows are all
    of them, with no split op (a step runs this per table)."""
    blocks = ([activations] if len(features) == 1 else
              tf.split(activations, feature_row_counts, num=len(features), axis=0))
    return [_shaped_activations(block, feature, dim) for block, feature in zip(blocks, features)]


def _shaped_activations(rows: tf.Tensor, feature: FeatureInput, dim: int) -> tf.Tensor:
    """A feature's [R, dim] activations in the shape `activation_shape` gives. A pooled feature
    of rank-2 ids (or dense ids of rank 1) has one row per sample, already its shape: it needs
    no reshape, nor the ops that would compute its shape, only its static batch size."""
    tensor = feature.tensor
    kind = _kind(tensor)
    if (kind == "dense" and tensor.shape.rank == 1) or (
            feature.max_sequence_length == 0 and (
                kind == "ragged" or (kind == "sparse" and tensor.shape.rank == 2))):
        rows.set_shape([tensor.shape[0], dim])
        return rows
    return tf.reshape(rows, activation_shape(feature, dim))
