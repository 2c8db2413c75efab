"""Random embedding configurations and inputs, built alike for tf_embedding and stock TF.

A `Case` describes tables, features, a batch size and the nesting of the feature structure;
`build_feature_config` builds it with either `tf_embedding.config` or
`tf.tpu.experimental.embedding`, and `random_input` draws ids and weights of every kind (dense,
sparse of rank 2 and 3, ragged), including the awkward ones (empty rows, negative ids and weights
where TF prunes them, int32 ids, int32 row splits). `make_pair` builds one of our embedding classes
and stock's serving object for a case, with identical tables. Shared by the differential tests of
every embedding class.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tf_embedding import config
from tf_embedding import optimizers


@dataclasses.dataclass
class TableSpec:
    vocabulary_size: int
    dim: int
    combiner: str
    name: str | None


@dataclasses.dataclass
class FeatureSpec:
    table: int
    kind: str  # dense | sparse | sparse3 | ragged
    max_sequence_length: int = 0
    validate: bool = True
    output_shape: list[int] | None = None
    weighted: bool = False
    ids_dtype: tf.DType = tf.int64
    dense_shape_suffix: tuple[int, ...] = ()


@dataclasses.dataclass
class Case:
    tables: list[TableSpec]
    features: list[FeatureSpec]
    batch_size: int
    structure: str  # dict | list | nested
    subset: list[int]  # indices of the features that get an input


def random_case(rng: np.random.Generator) -> Case:
    tables = [TableSpec(vocabulary_size=int(rng.integers(1, 20)), dim=int(rng.integers(1, 6)),
                        combiner=str(rng.choice(["sum", "mean", "sqrtn"])),
                        name=None if rng.random() < 0.4 else f"t{i}")
              for i in range(int(rng.integers(1, 4)))]
    batch_size = int(rng.choice([0, 1, 1, 2, 3, 4, 7]))
    features = [random_feature(rng, int(rng.integers(len(tables))), batch_size)
                for _ in range(int(rng.integers(1, 6)))]
    structure = str(rng.choice(["dict", "list", "nested"]))
    subset = list(range(len(features)))
    if structure == "dict" and len(features) > 1 and rng.random() < 0.3:
        subset = sorted(rng.choice(len(features), size=len(features) - 1, replace=False).tolist())
    return Case(tables, features, batch_size, structure, subset)


def random_feature(rng: np.random.Generator, table: int, batch_size: int) -> FeatureSpec:
    kind = str(rng.choice(["dense", "sparse", "sparse3", "ragged"]))
    spec = FeatureSpec(table=table, kind=kind,
                       ids_dtype=tf.int32 if rng.random() < 0.5 else tf.int64,
                       validate=bool(rng.random() < 0.6))
    if kind == "dense":
        spec.dense_shape_suffix = [(), (1,), (2,)][int(rng.integers(3))]
        return spec
    sequence = rng.random() < 0.4
    if kind == "ragged" and rng.random() < 0.4:
        # output_shape either holds the batch (pooled) or whole sequences.
        length = int(rng.integers(1, 4)) if sequence else 1
        spec.output_shape = ([batch_size * length] if rng.random() < 0.5
                             else [batch_size, length])
    elif sequence:
        spec.max_sequence_length = int(rng.integers(1, 5))
        if kind == "sparse" and rng.random() < 0.2:
            # A set output_shape turns a sparse sequence feature back into a pooled one.
            spec.output_shape = [batch_size]
    spec.weighted = spec.max_sequence_length == 0 and rng.random() < 0.5
    return spec


def build_feature_config(module, case: Case):
    tables = [module.TableConfig(vocabulary_size=t.vocabulary_size, dim=t.dim,
                                 combiner=t.combiner, name=t.name) for t in case.tables]
    features = [module.FeatureConfig(table=tables[f.table],
                                     max_sequence_length=f.max_sequence_length,
                                     validate_weights_and_indices=f.validate,
                                     output_shape=f.output_shape)
                for f in case.features]
    return arrange(case, features)


def arrange(case: Case, leaves: list, keep: list[int] | None = None):
    """Puts per-feature `leaves` in the case's structure; `keep` selects a subset (dict only)."""
    if case.structure == "dict":
        return {f"f{i}": leaves[i] for i in (range(len(leaves)) if keep is None else keep)}
    if case.structure == "list":
        return list(leaves)
    return {"head": leaves[0], "tail": {"rest": list(leaves[1:])}}


def make_pair(ours_class: type, case: Case, rng: np.random.Generator):
    """`ours_class` (one of our embedding classes) and stock's TPUEmbeddingForServing for `case`,
    both with SGD(0.1) and identical random table values."""
    stock = tf.tpu.experimental.embedding
    ours_config = build_feature_config(config, case)
    stock_config = build_feature_config(stock, case)
    ours = ours_class(ours_config, optimizers.SGD(0.1))
    theirs = stock.TPUEmbeddingForServing(stock_config, stock.SGD(0.1))
    # Both list the tables used by some feature, in first-occurrence order.
    for ours_table, stock_table in zip(ours.embedding_tables.values(),
                                       theirs.embedding_tables.values()):
        value = rng.normal(size=ours_table.shape).astype(np.float32)
        ours_table.assign(value)
        stock_table.assign(value)
    return ours, theirs


def random_ids(rng: np.random.Generator, count: int, vocabulary_size: int,
               allow_negative: bool) -> np.ndarray:
    ids = rng.integers(0, vocabulary_size, size=count)
    if allow_negative:
        ids = np.where(rng.random(count) < 0.15, -1, ids)
    return ids


def random_weights(rng: np.random.Generator, count: int, allow_non_positive: bool) -> np.ndarray:
    low = -0.5 if allow_non_positive else 0.1
    return rng.uniform(low, 2.0, size=count).astype(np.float32)


def random_input(rng: np.random.Generator, spec: FeatureSpec, table: TableSpec,
                 batch_size: int):
    """Returns (ids, weights or None) for one feature."""
    vocabulary_size = table.vocabulary_size
    if spec.kind == "dense":
        shape = (batch_size,) + tuple(spec.dense_shape_suffix)
        ids = rng.integers(0, vocabulary_size, size=shape)
        return tf.constant(ids, spec.ids_dtype), None
    # Rows are often empty, sometimes all of them.
    max_length = 0 if rng.random() < 0.1 else 5
    lengths = rng.integers(0, max_length + 1, size=batch_size)
    count = int(lengths.sum())
    # tf.nn.safe_embedding_lookup_sparse prunes negative ids and non-positive weights; ragged
    # pooling divides with div_no_nan, so non-positive weights are harmless there too.
    sparse_sequence = (spec.kind == "sparse" and spec.max_sequence_length > 0
                       and not spec.output_shape)
    safe = ((spec.kind == "sparse3" or spec.kind == "sparse" and spec.validate)
            and not sparse_sequence)
    ids = random_ids(rng, count, vocabulary_size, allow_negative=safe)
    weights = (random_weights(rng, count, allow_non_positive=safe or spec.kind == "ragged")
               if spec.weighted else None)
    if spec.kind == "ragged":
        row_splits_dtype = tf.int32 if rng.random() < 0.5 else tf.int64
        make = lambda values: tf.RaggedTensor.from_row_lengths(
            values, tf.constant(lengths, row_splits_dtype))
        return (make(tf.constant(ids, spec.ids_dtype)),
                None if weights is None else make(tf.constant(weights)))
    rows = np.repeat(np.arange(batch_size), lengths)
    positions = np.concatenate([np.arange(n) for n in lengths]) if count else np.zeros(0, int)
    if spec.kind == "sparse":
        indices = np.stack([rows, positions], axis=1)
        dense_shape = [batch_size, max(max_length, 1) + int(rng.integers(0, 3))]
    else:
        middle = rng.integers(0, 2, size=count)
        indices = np.stack([rows, middle, positions], axis=1)
        dense_shape = [batch_size, 2, max(max_length, 1)]
    make = lambda values: tf.SparseTensor(
        tf.constant(indices.reshape(-1, len(dense_shape)), tf.int64), values,
        tf.constant(dense_shape, tf.int64))
    return (make(tf.constant(ids, spec.ids_dtype)),
            None if weights is None else make(tf.constant(weights)))


def relaxed_spec(value) -> tf.TypeSpec:
    """The type spec of `value` with an unknown batch size."""
    if isinstance(value, tf.RaggedTensor):
        return tf.RaggedTensorSpec([None, None], value.dtype, 1, value.row_splits.dtype)
    spec_type = tf.SparseTensorSpec if isinstance(value, tf.SparseTensor) else tf.TensorSpec
    return spec_type([None] + value.shape[1:], value.dtype)


def random_inputs(rng: np.random.Generator, case: Case):
    """(ids, weights) in the case's structure, for the case's subset of features; weights is None
    when no feature has any."""
    inputs = [random_input(rng, f, case.tables[f.table], case.batch_size) for f in case.features]
    ids = arrange(case, [i for i, _ in inputs], case.subset)
    weights = (arrange(case, [w for _, w in inputs], case.subset)
               if any(w is not None for _, w in inputs) else None)
    return ids, weights


def trace(function, ids, weights, jit_compile: bool = False, unknown_batch: bool = True):
    """`function(ids, weights)` (e.g. an embedding object) in a tf.function, by default with an
    unknown batch size."""
    flat_weights = tf.nest.flatten(weights)
    present = [i for i, w in enumerate(flat_weights) if w is not None]

    def call(ids, present_weights):
        if weights is None:
            return function(ids, None)
        flat = [None] * len(flat_weights)
        for i, w in zip(present, present_weights):
            flat[i] = w
        return function(ids, tf.nest.pack_sequence_as(weights, flat))

    present_weights = [flat_weights[i] for i in present]
    signature = None
    if unknown_batch:
        signature = [tf.nest.map_structure(relaxed_spec, ids),
                     [relaxed_spec(w) for w in present_weights]]
    return tf.function(call, input_signature=signature, jit_compile=jit_compile)(
        ids, present_weights)
