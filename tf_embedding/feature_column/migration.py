"""From an `EmbeddingConfigSpec` to the mid-level API: configs, optimizers and checkpoint names.

Tables are named as TPUEstimator named them: `tbl_` + the column's embedding variable name (the
categorical column's name; for shared columns the collection name, by default the sorted column
names joined with `_` + `_shared_embedding`), so shared columns map to one table. Features are
named by their input key (`get_feature_key_name()`).
"""

import dataclasses
from typing import Any, Callable, Optional

import tensorflow as tf

from tf_embedding import config as config_lib
from tf_embedding.feature_column import spec as spec_lib

_TABLE_NAME_PREFIX = "tbl_"

@dataclasses.dataclass(frozen=True)
class ColumnFeature:
    """One embedding column as a mid-level feature: where its ids and weights come from."""

    column: Any
    feature_key: str
    weight_key: Optional[str]
    config: config_lib.FeatureConfig


def column_features(spec: spec_lib.EmbeddingConfigSpec,
                    global_step: Optional[Callable[[], Any]] = None) -> list[ColumnFeature]:
    """The spec's embedding columns as mid-level features, in column-name order.

    `global_step` (a zero-argument callable) feeds each column's `learning_rate_fn`; columns
    without one use the spec's learning rate. Tables shared by columns are one TableConfig.

    Raises:
      ValueError: a column that is not a TPU embedding column, or one feature key used by two
        columns.
    """
    if spec.feature_columns is None:
        raise ValueError("The spec configures its tables with feature_to_config_dict; use "
                         "dict_configs for it.")
    tables: dict[str, config_lib.TableConfig] = {}
    optimizers: dict[Any, Any] = {}
    features = []
    seen_keys: dict[str, str] = {}
    for column in sorted(spec.feature_columns, key=lambda c: c.name):
        if not hasattr(column, "get_embedding_var_name"):
            raise ValueError(f"Column {column.name} is not a TPU embedding column: "
                             "EmbeddingFeatures takes columns made by embedding_column or "
                             "shared_embedding_columns only.")
        key = column.get_feature_key_name()
        if key in seen_keys:
            raise ValueError(f"Feature column {column.name} is used with multiple embeddings "
                             "and this is not supported.")
        seen_keys[key] = column.name
        learning_rate_fn = column.get_learning_rate_fn()
        if learning_rate_fn not in optimizers:
            learning_rate = None
            if learning_rate_fn is not None:
                step = global_step or tf.compat.v1.train.get_or_create_global_step
                learning_rate = (lambda fn=learning_rate_fn: fn(step()))
            optimizers[learning_rate_fn] = spec.optimization_parameters.embedding_optimizer(
                learning_rate=learning_rate, clip_limit=spec.clipping_limit)
        name = _TABLE_NAME_PREFIX + column.get_embedding_var_name()
        if name not in tables:
            vocabulary_size, dim = column.get_embedding_table_size()
            tables[name] = config_lib.TableConfig(
                vocabulary_size=vocabulary_size, dim=dim, initializer=column.get_initializer(),
                optimizer=optimizers[learning_rate_fn], combiner=column.get_combiner(),
                name=name)
        features.append(ColumnFeature(
            column, key, column.get_weight_key_name(),
            config_lib.FeatureConfig(tables[name], name=key,
                                     max_sequence_length=column.get_max_sequence_length())))
    return features


def mid_level_configs(spec: spec_lib.EmbeddingConfigSpec,
                      global_step: Optional[Callable[[], Any]] = None
                      ) -> dict[str, config_lib.FeatureConfig]:
    """`feature_config` for `tf_embedding.TPUEmbedding` / `tf_embedding.keras.TPUEmbedding`,
    keyed by input feature key; each table carries its optimizer (the spec's parameters, with
    the column's learning_rate_fn and the spec's clipping_limit). Feed weighted columns' weights
    (the features named by `get_weight_key_name()`) as `weights` under the same keys."""
    if spec.feature_columns is None:
        return dict_configs(spec, global_step)
    return {feature.feature_key: feature.config
            for feature in column_features(spec, global_step)}


def mid_level_options(spec: spec_lib.EmbeddingConfigSpec) -> dict[str, Any]:
    """The spec's engine settings as keyword arguments of `tf_embedding.TPUEmbedding`:
    `partition_strategy` ('div' or 'mod' row blocks) and `profile_data_directory` (where
    training writes lookup statistics)."""
    return {"partition_strategy": spec.partition_strategy,
            "profile_data_directory": spec.profile_data_directory}


def dict_configs(spec: spec_lib.EmbeddingConfigSpec,
                 global_step: Optional[Callable[[], Any]] = None
                 ) -> dict[str, config_lib.FeatureConfig]:
    """The mid-level `feature_config` of a spec given as v1 config dicts."""
    step = global_step or tf.compat.v1.train.get_or_create_global_step
    tables = {}
    for name, table in sorted(spec.table_to_config_dict.items()):
        parameters = table.optimization_parameters or spec.optimization_parameters
        learning_rate = table.learning_rate
        if table.learning_rate_fn is not None:
            learning_rate = (lambda fn=table.learning_rate_fn: fn(step()))
        tables[name] = config_lib.TableConfig(
            vocabulary_size=table.vocabulary_size, dim=table.dimension,
            initializer=table.initializer,
            optimizer=None if parameters is None else parameters.embedding_optimizer(
                learning_rate=learning_rate, clip_limit=spec.clipping_limit),
            # v1's None combiner is for dense inputs, which it enqueues as sums.
            combiner=table.combiner or "sum", name=name)
    return {feature: config_lib.FeatureConfig(tables[config.table_id], name=feature,
                                              max_sequence_length=config.max_sequence_length)
            for feature, config in sorted(spec.feature_to_config_dict.items())}


def checkpoint_name_map(spec: spec_lib.EmbeddingConfigSpec,
                        scope: str = "dense_features") -> dict[str, str]:
    """{variable name of a CPU run of the columns: the mid-level table or slot variable name}.

    `scope` is where the CPU run created the column variables (`dense_features` for tf_keras
    `DenseFeatures`, `input_layer` for `tf.compat.v1.feature_column.input_layer`); shared
    columns' variable is the top-level collection name there, as in TF. Slots use TF1's
    optimizer slot names (`<var>/Adagrad`, `<var>/Adam/m`, `<var>/Ftrl_1`, ...), which
    TPUEstimator CPU runs wrote.
    """
    mapping = {}
    # TPUEstimator infers the slot names from TF1's optimizers; a slot TF1 had no name for
    # (Proximal Yogi's) is not mapped.
    slots = [slot for slot in spec.optimization_parameters.description.slots
             if slot.v1_suffix is not None]
    for feature in column_features(spec):
        column, table = feature.column, feature.config.table.name
        variable = (column.get_embedding_var_name() if _is_shared(column)
                    else f"{scope}/{column.name}/embedding_weights")
        mapping[variable] = table
        for slot in slots:
            mapping[f"{variable}/{slot.v1_suffix}"] = f"{table}/{slot.name}"
    return mapping


def _is_shared(column: Any) -> bool:
    return hasattr(column, "shared_embedding_column_creator")
