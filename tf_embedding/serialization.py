"""Embedding configs as plain, JSON-ready dicts and back: what the Keras layers' `get_config`
stores, so that `model.save(".keras")`, `model.to_json()` and `keras.models.clone_model` work.

Each value is `{"class_name": ..., "config": ...}`:

* `TableConfig`s and `FeatureConfig`s (tf_embedding's or stock TF's, which load as
  tf_embedding's), nested in dicts, lists and tuples; features that share a table share it
  again after loading (`serialize_features` numbers the distinct tables);
* `QuantizationConfig`, `RowIdInitializer`, TF's initializers (`tf.constant_initializer`, the
  default truncated normal, ...) and Keras' (Keras 3 or tf_keras, by Keras' own serialization);
* optimizers: tf_embedding's and stock TF's embedding optimizers (every constructor argument,
  `optimizers.serialization`), the names "sgd", ..., None, and Keras optimizers (by Keras' own
  serialization, learning-rate schedules included).

What a config cannot hold (a Python callable as a learning rate or initializer, a layout, an
object of another kind) raises a ValueError naming the table and the argument, so nothing is
dropped silently.
"""

import dataclasses
import importlib
import json
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import init_ops_v2
from tensorflow.python.tpu import tpu_embedding_v2_utils as stock

from tf_embedding import config as config_lib
from tf_embedding import dynamic_vocabulary
from tf_embedding import optimizers
from tf_embedding.optimizers import keras_translation

_KERAS_PACKAGES = ("keras", "tf_keras")


def _tagged(class_name: str, config: Any) -> dict[str, Any]:
    return {"class_name": class_name, "config": config}


def _jsonable(value: Any, where: str) -> Any:
    """`value` with numpy arrays and scalars as lists and numbers, tuples as lists; raises a
    ValueError naming `where` for anything JSON cannot hold."""
    if isinstance(value, dict):
        return {key: _jsonable(item, where) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item, where) for item in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    try:
        json.dumps(value)
    except TypeError as error:
        raise ValueError(f"{where} holds {value!r} ({type(value).__name__}), which a config "
                         "cannot hold.") from error
    return value


def _keras_package(value: Any) -> str | None:
    package = type(value).__module__.split(".", 1)[0]
    return package if package in _KERAS_PACKAGES else None


def is_keras_optimizer(value: Any) -> bool:
    """Whether `value` is an optimizer of Keras 3 or tf_keras."""
    return _keras_package(value) is not None and keras_translation.is_keras_optimizer(value)


def _keras_module(package: str, name: str) -> Any:
    return importlib.import_module(f"{package}.{name}")


# ---------------------------------------------------------------------------------------------
# Initializers


def serialize_initializer(initializer: Any, where: str) -> dict[str, Any]:
    """A table's initializer as a config (module docstring).

    Raises:
      ValueError: a callable that is neither a Keras nor a TF initializer nor a
        `RowIdInitializer`, naming `where`.
    """
    package = _keras_package(initializer)
    if package is not None and hasattr(initializer, "get_config"):
        serialized = _keras_module(package, "initializers").serialize(initializer)
        return _tagged(package, _jsonable(serialized, where))
    if isinstance(initializer, config_lib.RowIdInitializer):
        return _tagged("RowIdInitializer", initializer.get_config())
    if isinstance(initializer, init_ops_v2.Initializer) and type(initializer) is getattr(
            init_ops_v2, type(initializer).__name__, None):
        return _tagged("tf." + type(initializer).__name__,
                       _jsonable(initializer.get_config(), where))
    raise ValueError(
        f"{where} is {initializer!r}, which a config cannot hold: give a Keras initializer, a "
        "TF initializer (tf.constant_initializer, tf.random_normal_initializer, ...) or "
        "tf_embedding.RowIdInitializer (or register your class with Keras and make it a Keras "
        "initializer).")


def deserialize_initializer(config: dict[str, Any]) -> Callable[..., Any]:
    """The initializer `serialize_initializer` described."""
    class_name, inner = config["class_name"], config["config"]
    if class_name in _KERAS_PACKAGES:
        return _keras_module(class_name, "initializers").deserialize(inner)
    if class_name == "RowIdInitializer":
        return config_lib.RowIdInitializer.from_config(inner)
    if class_name.startswith("tf."):
        return getattr(init_ops_v2, class_name[len("tf."):]).from_config(inner)
    raise ValueError(f"Unknown initializer {class_name!r} in a config.")


# ---------------------------------------------------------------------------------------------
# Optimizers


def serialize_optimizer(optimizer: Any, where: str) -> Any:
    """An optimizer argument (a table's or a layer's) as a config: None, a name, an embedding
    optimizer's arguments, or a Keras optimizer's Keras serialization.

    Raises:
      ValueError: a callable learning rate or slot creation function, or another object,
        naming `where` and the argument.
    """
    if optimizer is None or isinstance(optimizer, str):
        return optimizer
    if optimizers.is_embedding_optimizer(optimizer):
        ours = optimizers.from_stock(optimizer)
        try:
            return _tagged(type(ours).__name__, ours.get_config())
        except ValueError as error:
            raise ValueError(f"{where}: {error}.") from error
    if is_keras_optimizer(optimizer):
        package = _keras_package(optimizer)
        if keras_translation.has_callable_learning_rate(optimizer):
            raise ValueError(
                f"{where}: the Keras optimizer's `learning_rate` is a Python callable, which a "
                "config cannot hold; use a keras.optimizers.schedules schedule.")
        serialized = _keras_module(package, "optimizers").serialize(optimizer)
        return _tagged(package, _jsonable(serialized, f"{where}: the Keras optimizer"))
    raise ValueError(f"{where}: {optimizer!r} is not an optimizer a config can hold.")


def deserialize_optimizer(config: Any) -> Any:
    """The optimizer argument `serialize_optimizer` described."""
    if config is None or isinstance(config, str):
        return config
    class_name, inner = config["class_name"], config["config"]
    if class_name in _KERAS_PACKAGES:
        return _keras_module(class_name, "optimizers").deserialize(inner)
    cls = optimizers.CLASSES.get(class_name)
    if cls is None:
        raise ValueError(f"Unknown embedding optimizer {class_name!r} in a config; expected "
                         f"one of {sorted(optimizers.CLASSES)}.")
    return cls.from_config(inner)


def keras_optimizers(feature_config: Any, optimizer: Any) -> list[Any]:
    """The distinct Keras optimizers among a layer's `optimizer` and its tables' optimizers,
    in that order (tables in flattening order): objects whose `iterations` a translated
    learning rate may read, and which a Keras file therefore keeps."""
    found: list[Any] = []
    candidates = [optimizer] + [feature.table.optimizer
                                for feature in tf.nest.flatten(feature_config)]
    for candidate in candidates:
        if is_keras_optimizer(candidate) and not any(candidate is known for known in found):
            found.append(candidate)
    return found


# ---------------------------------------------------------------------------------------------
# Tables and features


def _table_where(table: Any) -> str:
    return f"Table '{table.name}'"


def serialize_table(table: Any) -> dict[str, Any]:
    """A `TableConfig` (ours or stock TF's) as a config.

    Raises:
      ValueError: an initializer or optimizer a config cannot hold, or a `layout`, naming the
        table and the argument.
    """
    where = _table_where(table)
    if getattr(table, "layout", None) is not None:
        raise ValueError(f"{where}: `layout` (a SparseCore layout) cannot be saved in a "
                         "config.")
    quantization = table.quantization_config
    dynamic = dynamic_vocabulary.dynamic_of(table)
    # A fixed table's config keeps its earlier form (no "dynamic" key).
    dynamic_entry = {} if dynamic is None else {"dynamic": dataclasses.asdict(dynamic)}
    return _tagged("TableConfig", {
        "vocabulary_size": table.vocabulary_size, "dim": table.dim,
        "initializer": serialize_initializer(table.initializer, f"{where}: `initializer`"),
        "optimizer": serialize_optimizer(table.optimizer, f"{where}: `optimizer`"),
        "combiner": table.combiner, "name": table.name,
        # Stock TF's QuantizationConfig has the same attributes, and no get_config.
        "quantization_config": None if quantization is None else (
            config_lib.QuantizationConfig.get_config(quantization)),
        "dtype": tf.as_dtype(getattr(table, "dtype", tf.float32)).name, **dynamic_entry})


def deserialize_table(config: dict[str, Any]) -> config_lib.TableConfig:
    """The `TableConfig` `serialize_table` described."""
    arguments = dict(config["config"])
    arguments["initializer"] = deserialize_initializer(arguments["initializer"])
    arguments["optimizer"] = deserialize_optimizer(arguments["optimizer"])
    if arguments["quantization_config"] is not None:
        arguments["quantization_config"] = config_lib.QuantizationConfig.from_config(
            arguments["quantization_config"])
    arguments["dtype"] = tf.as_dtype(arguments["dtype"])
    if "dynamic" in arguments:
        arguments["dynamic"] = dynamic_vocabulary.DynamicVocabulary(**arguments["dynamic"])
    return config_lib.TableConfig(**arguments)


def _is_feature(value: Any) -> bool:
    return isinstance(value, (config_lib.FeatureConfig, stock.FeatureConfig))


def _serialize_feature(feature: Any, table_index: int) -> dict[str, Any]:
    shape = tf.TensorShape(feature.output_shape)
    return _tagged("FeatureConfig", {
        "table": table_index, "max_sequence_length": feature.max_sequence_length,
        "validate_weights_and_indices": feature.validate_weights_and_indices,
        "output_shape": None if shape.rank is None else shape.as_list(),
        "name": feature.name})


def _serialize_structure(structure: Any, tables: list[Any]) -> dict[str, Any]:
    """A nested structure of FeatureConfigs, each naming its table by index in `tables`
    (which this fills in first-use order, by identity)."""
    if _is_feature(structure):
        indices = [index for index, table in enumerate(tables) if table is structure.table]
        if not indices:
            tables.append(structure.table)
        return _serialize_feature(structure, indices[0] if indices else len(tables) - 1)
    if isinstance(structure, dict):
        if not all(isinstance(key, str) for key in structure):
            raise ValueError(f"A feature config dict with keys {list(structure)} cannot be "
                             "saved in a config: keys must be strings.")
        return _tagged("dict", {key: _serialize_structure(value, tables)
                                for key, value in structure.items()})
    if type(structure) in (list, tuple):
        return _tagged(type(structure).__name__,
                       [_serialize_structure(value, tables) for value in structure])
    raise ValueError(f"A feature config holds {structure!r} ({type(structure).__name__}); a "
                     "config holds FeatureConfigs nested in dicts, lists and tuples only.")


def serialize_features(feature_config: Any) -> dict[str, Any]:
    """A nested structure of `FeatureConfig`s as `{"tables": [...], "features": ...}`.

    Raises:
      ValueError: a table that cannot be saved (`serialize_table`), a structure other than
        dicts (of string keys), lists and tuples.
    """
    tables: list[Any] = []
    features = _serialize_structure(feature_config, tables)
    return {"tables": [serialize_table(table) for table in tables], "features": features}


def _deserialize_structure(config: dict[str, Any], tables: list[Any]) -> Any:
    class_name, inner = config["class_name"], config["config"]
    if class_name == "FeatureConfig":
        arguments = dict(inner)
        arguments["table"] = tables[arguments["table"]]
        return config_lib.FeatureConfig(**arguments)
    if class_name == "dict":
        return {key: _deserialize_structure(value, tables) for key, value in inner.items()}
    values = [_deserialize_structure(value, tables) for value in inner]
    return tuple(values) if class_name == "tuple" else values


def deserialize_features(config: dict[str, Any]) -> Any:
    """The nested `FeatureConfig`s `serialize_features` described, sharing tables again."""
    tables = [deserialize_table(table) for table in config["tables"]]
    return _deserialize_structure(config["features"], tables)
