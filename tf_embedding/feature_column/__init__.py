"""The TPUEstimator-era embedding API, trained the TPU way without TPUEstimator
(docs/feature_columns.md).

`embedding_column` and `shared_embedding_columns` are TF 2.21's own
(`tf.compat.v1.tpu.experimental.*`), so they behave exactly as stock's in `DenseFeatures`,
`SequenceFeatures` and `input_layer`. `EmbeddingConfigSpec` and the v1 optimization parameter
classes configure training; `EmbeddingFeatures` is the Keras layer that trains the columns'
tables with the fused kernels; `mid_level_configs` and `checkpoint_name_map` move a spec to
`tf_embedding.TPUEmbedding` / `tf_embedding.keras.TPUEmbedding` (with `mid_level_options` for the
former).

* `spec`: `EmbeddingConfigSpec` and v1's table and feature configs, with the estimator's checks.
* `parameters`: the v1 optimization parameter classes, with v1's defaults.
* `layer`: `EmbeddingFeatures`, the spec's columns as a Keras layer.
* `migration`: from a spec to the mid-level API (`mid_level_configs`, `mid_level_options`,
  `checkpoint_name_map`).
"""

from tensorflow.python.tpu.feature_column_v2 import embedding_column_v2 as embedding_column
from tensorflow.python.tpu.feature_column_v2 import (
    shared_embedding_columns_v2 as shared_embedding_columns)

from tf_embedding import _loader
from tf_embedding.feature_column.layer import EmbeddingFeatures
from tf_embedding.feature_column.migration import (
    checkpoint_name_map, mid_level_configs, mid_level_options)
from tf_embedding.feature_column.parameters import (
    AdagradParameters, AdamParameters, FtrlParameters, MomentumParameters,
    ProximalAdagradParameters, ProximalYogiParameters, RMSPropParameters,
    StochasticGradientDescentParameters)
from tf_embedding.feature_column.spec import EmbeddingConfigSpec, FeatureConfig, TableConfig

_loader.load_ops()

__all__ = [
    "AdagradParameters", "AdamParameters", "EmbeddingConfigSpec", "EmbeddingFeatures",
    "FeatureConfig", "FtrlParameters", "MomentumParameters", "ProximalAdagradParameters",
    "ProximalYogiParameters", "RMSPropParameters", "StochasticGradientDescentParameters",
    "TableConfig", "checkpoint_name_map", "embedding_column", "mid_level_configs",
    "mid_level_options", "shared_embedding_columns",
]
