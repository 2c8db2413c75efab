"""keras-rs configurations as the engine's: tables, features, optimizers and table stacking.

A keras-rs `TableConfig` names its own optimizer. On a TPU, keras-rs's TensorFlow backend
translates it with `config_conversion.to_tf_tpu_optimizer` into a `tf.tpu.experimental.embedding`
optimizer that the TPU applies to the table; off a TPU keras-rs ignores it and the model's
optimizer trains a plain Keras embedding. This front end trains the TPU way, so it runs keras-rs's
own translation (the same accepted optimizers, the same hyperparameters, the same ValueErrors)
and hands the stock optimizer to tf_embedding's equal (`optimizers.from_stock`), which the fused
kernels apply.
"""

from typing import Any, Mapping

import keras
from keras_rs.src.layers.embedding import distributed_embedding_config
from keras_rs.src.layers.embedding.tensorflow import config_conversion

from tf_embedding import config as config_lib
from tf_embedding import optimizers

FeatureConfig = distributed_embedding_config.FeatureConfig
TableConfig = distributed_embedding_config.TableConfig


def table_optimizer(optimizer: Any) -> Any:
    """The embedding optimizer keras-rs would give a TPU for `optimizer`, as tf_embedding's.

    Args:
      optimizer: a Keras 3 `SGD`, `Adagrad`, `Adam` or `Ftrl` (or subclass) instance, one of
        "sgd", "adagrad", "adam", "ftrl", a `tf.tpu.experimental.embedding` SGD, Adagrad, Adam
        or FTRL, a tf_embedding embedding optimizer (not in keras-rs: passed through), or None.

    Returns:
      tf_embedding's optimizer with the hyperparameters keras-rs's translation gives (TF's
      defaults for names; a Keras learning-rate schedule is read at every update), or None.

    Raises:
      ValueError: keras-rs's message for what it rejects: other optimizer classes or names,
        `clipnorm`, `global_clipnorm`, `use_ema`, `loss_scale_factor`, SGD `momentum` or
        `nesterov`, Adagrad `epsilon` other than 1e-7, Adam `amsgrad`, Ftrl
        `l2_shrinkage_regularization_strength`, a learning rate that is not a float, callable
        or schedule.
    """
    if isinstance(optimizer, _OWN_OPTIMIZERS):
        return optimizer
    return optimizers.from_stock(config_conversion.to_tf_tpu_optimizer(optimizer))


# tf_embedding's equals of the stock classes keras-rs accepts.
_OWN_OPTIMIZERS = (optimizers.SGD, optimizers.Adagrad, optimizers.Adam, optimizers.FTRL)


def check_table_stacking(table_stacking: Any) -> None:
    """Raises keras-rs's TensorFlow ValueError for a stacking other than "auto" or None.

    Stacking packs tables into one SparseCore table; off a TPU it changes nothing, so "auto"
    and None are accepted and mean the same. keras-rs's TPU path (whose training this layer
    follows) accepts only those two.
    """
    if table_stacking is not None and table_stacking != "auto":
        raise ValueError(f"Unsupported table stacking for Tensorflow {table_stacking}, must be "
                         "'auto' or None.")


def _initializer(table: TableConfig) -> Any:
    initializer = table.initializer
    return keras.initializers.get(initializer) if isinstance(initializer, str) else initializer


def engine_feature_configs(feature_configs: Mapping[str, FeatureConfig]
                           ) -> dict[str, config_lib.FeatureConfig]:
    """{path: tf_embedding FeatureConfig} for keras-rs's {path: FeatureConfig}.

    Features share a table when they share a `TableConfig` object (keras-rs's rule: its
    dataclasses compare by value, so identity decides). Each table's optimizer is translated
    by `table_optimizer`.

    Raises:
      ValueError: an untranslatable optimizer (naming the table), or two distinct tables with
        one name.
      TypeError: a feature whose `table` is not a keras-rs `TableConfig`.
    """
    engine_tables: dict[int, config_lib.TableConfig] = {}
    names: dict[str, int] = {}
    result = {}
    for path, feature in feature_configs.items():
        table = feature.table
        if not isinstance(table, TableConfig):
            raise TypeError(f"Feature '{path}' ({feature.name}): `table` must be a "
                            f"keras_rs.layers.TableConfig, got {type(table)}.")
        if id(table) not in engine_tables:
            if names.setdefault(table.name, id(table)) != id(table):
                raise ValueError(f"Two different TableConfigs are named '{table.name}'; table "
                                 "names must be unique (features share a table by sharing "
                                 "its TableConfig object).")
            try:
                optimizer = table_optimizer(table.optimizer)
            except ValueError as error:
                raise ValueError(f"Table '{table.name}': {error}") from error
            engine_tables[id(table)] = config_lib.TableConfig(
                vocabulary_size=table.vocabulary_size, dim=table.embedding_dim,
                initializer=_initializer(table), optimizer=optimizer,
                combiner=table.combiner, name=table.name)
        result[path] = config_lib.FeatureConfig(engine_tables[id(table)], name=feature.name)
    return result
