"""What keras-rs's own config of `DistributedEmbedding` needs from tf_embedding.

keras-rs serializes each table's initializer and optimizer with Keras' serialization
(`keras.saving.serialize_keras_object`), so tf_embedding's embedding optimizers and
`RowIdInitializer`, which tables may hold, are registered with Keras here (package
"tf_embedding"). What Keras cannot serialize, or serializes as code it refuses to load in safe
mode (a lambda learning rate), is refused when saving, naming the table and the argument
(`check_tables`), as `tf_embedding.serialization` does for the Keras layer.
"""

from typing import Any

import keras
import tensorflow as tf

from tf_embedding import config as config_lib
from tf_embedding import optimizers
from tf_embedding import serialization

for _cls in (*optimizers.CLASSES.values(), config_lib.RowIdInitializer):
    keras.saving.register_keras_serializable(package="tf_embedding")(_cls)


def _check(value: Any, where: str) -> None:
    if value is None or isinstance(value, str):
        return
    if serialization.is_keras_optimizer(value) or optimizers.is_embedding_optimizer(value):
        serialization.serialize_optimizer(value, where)  # raises for callables, naming them
    try:
        keras.saving.serialize_keras_object(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where} is {value!r}, which Keras cannot serialize: {error}") from (
            error)


def check_tables(feature_configs: Any, optimizer: Any) -> None:
    """Raises a ValueError naming the table (or the layer's `optimizer`) and the argument for
    an initializer or optimizer a Keras config cannot hold."""
    _check(optimizer, "The layer's `optimizer`")
    for feature in tf.nest.flatten(feature_configs):
        table = feature.table
        _check(table.initializer, f"Table '{table.name}': `initializer`")
        _check(table.optimizer, f"Table '{table.name}': `optimizer`")
