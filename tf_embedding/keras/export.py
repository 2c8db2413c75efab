"""What the Keras layers look up with while `tf.saved_model.save` traces them: stock TF ops.

A SavedModel must load and score where tf_embedding is not installed, so the traced functions
look up the current tables with `serving_embedding_lookup` instead of the fused ops.

Keras 3 also traces a default serving signature for subclassed models whenever anything
holding the model is saved, with every input a float32 tensor of the model's build shapes.
The layers must survive that trace, so ids that arrive as floats are cast, as Keras' own
`Embedding` casts them: to integers, or for columns keyed by strings to the integers' decimal
text. The user's own signatures, with the real dtypes, are unaffected.
"""

from typing import Any, Mapping

import tensorflow as tf

from tf_embedding import for_serving
from tf_embedding.sharded.multi_worker.block_variable import WorkerBlockVariable


def serving_tables(engine_tables: Mapping[Any, Any]) -> dict[Any, Any]:
    """An engine's tables ({TableConfig: variable}) as stock lookups read them
    (`whole_value`)."""
    return {table: whole_value(variable) for table, variable in engine_tables.items()}


def whole_value(variable: Any) -> Any:
    """An engine's table or slot whole: the variable itself, or its row blocks concatenated
    (a copy) when it is split over devices, or under MultiWorkerMirroredStrategy gathered from
    every worker (a collective: every worker must ask, in the same order)."""
    if isinstance(variable, WorkerBlockVariable):
        return variable.full_value()
    blocks = list(variable) if hasattr(variable, "variables") else [variable]
    return blocks[0] if len(blocks) == 1 else tf.concat(
        [tf.convert_to_tensor(block) for block in blocks], axis=0)


def stock_lookup(features: Any, weights: Any, engine_tables: Mapping[Any, Any],
                 feature_config: Any, composite_features: frozenset[int] = frozenset(),
                 key_indexes: Mapping[str, Any] | None = None) -> Any:
    """`serving_embedding_lookup` of `features` in an engine's tables ({TableConfig: variable}).

    A feature given as float dense ids (only Keras' default signature gives those) is looked
    up as int64 ids without weights, which that trace also invents; if the layer was called
    with a sparse or ragged tensor for it (its flat index in `composite_features`), as a ragged
    tensor of the same ids, so that the model gets the shapes it was built with. A dynamic
    table's keys are mapped to rows by its entry in `key_indexes` (`serving_keys.KeyIndex`).
    """
    flat_features = tf.nest.flatten(features)
    flat_weights = [None] * len(flat_features) if weights is None else tf.nest.flatten(weights)
    for index, feature in enumerate(flat_features):
        if _is_float_dense(feature):
            ids = coerce_float(feature, tf.int64)
            flat_features[index] = (tf.RaggedTensor.from_tensor(ids)
                                    if index in composite_features else ids)
            flat_weights[index] = None
    return for_serving.serving_embedding_lookup(
        tf.nest.pack_sequence_as(features, flat_features),
        None if weights is None else tf.nest.pack_sequence_as(features, flat_weights),
        serving_tables(engine_tables), feature_config, key_indexes=key_indexes)


def _is_float_dense(value: Any) -> bool:
    return isinstance(value, tf.Tensor) and value.dtype.is_floating


def coerce_float(value: Any, dtype: tf.DType) -> Any:
    """A float dense `value` as `dtype` (an integer type, or string: the integer's text);
    anything else unchanged."""
    if not _is_float_dense(value) or dtype.is_floating:
        return value
    integers = tf.cast(value, tf.int64)
    return tf.strings.as_string(integers) if dtype == tf.string else tf.cast(integers, dtype)
