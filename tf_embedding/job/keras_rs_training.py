"""`--embedding-api keras-rs`: keras-rs's `DistributedEmbedding` (`tf_embedding.keras_rs`) in
the Keras model that `model.fit` trains.

The same model and training as `--embedding-api keras`: the tables, their initial values and
the Adagrad that trains them are the other APIs', given the keras-rs way: one
`keras_rs.layers.TableConfig` per table whose `optimizer` is a Keras `Adagrad`, which keras-rs
translates for TPUs into the embedding Adagrad (the learning rate and initial accumulator, no
epsilon) and the layer applies with the fused kernels.
"""

from typing import Any

import keras
import keras_rs

from tf_embedding import keras_rs as embedding_rs
from tf_embedding.job import embedding_apis
from tf_embedding.job.options import TrainOptions


class KerasRsTraining(embedding_apis.KerasTraining):
    """`tf_embedding.keras_rs.DistributedEmbedding`, trained by `model.fit` inside
    `KerasRankingModel` exactly as the Keras layer is (`embedding_apis.KerasTraining`)."""

    holds_dynamic_tables = False  # keras-rs's configs have no dynamic option

    def __init__(self, feature_config: dict[str, Any], options: TrainOptions):
        # pylint: disable=super-init-not-called  (only the layer differs)
        self.layer = embedding_rs.DistributedEmbedding(
            _keras_rs_configs(feature_config, options, keras_rs.layers))
        # Creates the tables and the helper now, so the optimizer can be built before a restore.
        self.layer.build({name: (options.batch_size, None) for name in feature_config})


def _keras_rs_configs(feature_config: dict[str, Any], options: TrainOptions,
                      layers: Any) -> dict[str, Any]:
    """keras-rs FeatureConfigs over keras-rs TableConfigs equal to `feature_config`'s tables
    (same names, shapes, combiners and initializers), each trained by a Keras Adagrad."""
    tables: dict[int, Any] = {}
    for feature in feature_config.values():
        table = feature.table
        if id(table) not in tables:
            tables[id(table)] = layers.TableConfig(
                name=table.name, vocabulary_size=table.vocabulary_size, embedding_dim=table.dim,
                initializer=table.initializer, combiner=table.combiner,
                optimizer=keras.optimizers.Adagrad(
                    options.embedding_learning_rate,
                    initial_accumulator_value=embedding_apis.INITIAL_ACCUMULATOR))
    return {name: layers.FeatureConfig(
        name=name, table=tables[id(feature.table)], input_shape=(options.batch_size, None),
        output_shape=(options.batch_size, feature.table.dim))
        for name, feature in feature_config.items()}
