"""`EmbeddingFeatures`: an `EmbeddingConfigSpec`'s columns as a Keras layer, trained the TPU way.

The layer takes the raw features dict (as `DenseFeatures` does), applies each column's
categorical transformation (identity, hash bucket, vocabulary list or file, weighted, sequence:
TF's own code), looks the ids up in the spec's tables with the fused kernels and returns what
`DenseFeatures` returns for those columns: their activations concatenated in column-name order,
`[B, sum of dimensions]`. A spec of sequence columns returns what `SequenceFeatures` returns,
`(sequence_input [B, T, sum of dimensions], sequence_length [B])`, with T the columns'
`max_sequence_length` (the TPU's padding and truncation; stock pads to the longest sequence).

Training is the TPU's (`tf_embedding.sharded.front_end`): computing the gradient of the
model's trainable variables applies the spec's optimization parameters to the tables, with
`clipping_limit`, `experimental_gradient_multiplier_fn(global step)`, each column's
`learning_rate_fn(global step)`, and shared columns' gradients summed into their one table. The
global step is the layer's `global_step` variable (or the one passed in), advanced once per
update. The spec's `partition_strategy` lays out the tables' blocks, and its
`profile_data_directory` receives lookup statistics of training batches
(`tf_embedding.TPUEmbedding`).

Under a `mixed_bfloat16` policy (Keras' global one, or the layer's `dtype`) the tables and
slots stay float32, the lookup runs in float32 and the activations come out in bfloat16, as the
Keras layer's do (`tf_embedding.keras.layer_config.check_dtype_policy`); the raw features are
never cast. Stock `DenseFeatures` fails there, casting a weighted column's weights.
"""

from typing import Any

import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fc_lib
from tensorflow.python.saved_model import save_context

from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.feature_column import migration
from tf_embedding.feature_column import spec as spec_lib
from tf_embedding.keras import export
from tf_embedding.keras import layer_config
from tf_embedding.keras import weights_store
from tf_embedding.sharded.front_end import FrontEnd
from tf_embedding.sharded.tpu_embedding import TPUEmbedding

_HELPER_NAME = "tpu_embedding_helper_dummy"


class EmbeddingFeatures(weights_store.EngineWeights, tf.keras.layers.Layer):
    """`DenseFeatures` (or `SequenceFeatures`) for a spec's embedding columns."""

    _HELPER_NAME = _HELPER_NAME

    def __init__(self, spec: spec_lib.EmbeddingConfigSpec, global_step: Any = None,
                 name: str | None = None, dtype: Any = None):
        """Creates the layer; tables are made by `build()`.

        Args:
          spec: an `EmbeddingConfigSpec` whose `feature_columns` are embedding columns
            (`embedding_column`, `shared_embedding_columns`), all sequence or all not.
          global_step: an integer variable that learning-rate and gradient-multiplier functions
            read; by default the layer's own, advanced by each update.
          name: the layer's name.
          dtype: the layer's dtype policy (default: Keras' global one): float32 or
            `mixed_bfloat16`.

        Raises:
          ValueError: a spec without feature columns, a column that is not an embedding column,
            sequence and non-sequence columns together, or a dtype policy other than float32
            and `mixed_bfloat16` (naming it and where it came from).
        """
        # autocast=False: the raw features (ids, strings, weights) keep their dtypes.
        super().__init__(name=name, dtype=dtype, autocast=False)
        layer_config.check_dtype_policy(self, given=dtype is not None)
        # Keras 3's jit_compile="auto" must not compile the step: XLA cannot run the fused ops.
        self.supports_jit = False
        self._spec = self._no_dependency(spec)
        if global_step is None:
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.global_step = global_step
        self._columns = self._no_dependency(
            migration.column_features(spec, lambda: self.global_step))
        sequence = {feature.config.max_sequence_length > 0 for feature in self._columns}
        if len(sequence) > 1:
            raise ValueError(
                "EmbeddingFeatures takes either sequence columns (as SequenceFeatures does) or "
                "non-sequence columns (as DenseFeatures does), not both; use one layer for each.")
        self._sequence = sequence == {True}
        # As in DenseFeatures: the columns' lookup tables (vocabulary columns) are made once
        # and tracked by the layer (`_resources`), so functions that use them can be saved.
        self._state_manager = self._no_dependency(
            fc_lib._StateManagerImpl(self, trainable=False))  # pylint: disable=protected-access
        self._feature_config = self._no_dependency(
            {feature.column.name: feature.config for feature in self._columns})
        # Tables carry their own optimizers (migration.column_features).
        self._tpu_embedding = TPUEmbedding(self._feature_config, optimizer=None,
                                           **migration.mid_level_options(spec))
        self._front_end = self._no_dependency(FrontEnd(self._tpu_embedding))

    @property
    def embedding_tables(self) -> dict[str, Any]:
        """{table name (`tbl_...`): table variable}."""
        return {table.name: variable
                for table, variable in self._tpu_embedding.embedding_tables.items()}

    def build(self, input_shape: Any = None) -> None:
        self._front_end.build()
        self._add_helper()
        super().build(input_shape)

    def call(self, features: dict[str, Any], training: Any = None) -> Any:
        """The columns' activations for the raw `features` (see the module docstring).

        `training` (Keras passes it; `model.fit` sets it): whether the batch counts for the
        spec's `profile_data_directory`.
        """
        saving = save_context.in_save_context()
        if saving:
            features = self._coerce_float_inputs(features)
        cache = fc_lib.FeatureTransformationCache(features)
        ids, weights = {}, {}
        for feature in self._columns:
            pair = feature.column.categorical_column.get_sparse_tensors(cache,
                                                                         self._state_manager)
            ids[feature.column.name] = pair.id_tensor
            weights[feature.column.name] = pair.weight_tensor
        if saving:
            # A SavedModel must load where tf_embedding is not installed.
            outputs = tf.nest.flatten(export.stock_lookup(
                ids, weights, self._tpu_embedding.embedding_tables, self._feature_config))
        else:
            outputs = self._trained_lookup(ids, weights, training)
        outputs = [layer_config.in_compute_dtype(self, output) for output in outputs]
        if not self._sequence:
            return tf.concat(outputs, axis=1)
        first = ids[self._columns[0].column.name]
        lengths = tf.math.bincount(tf.cast(first.indices[:, 0], tf.int32),
                                   minlength=tf.cast(first.dense_shape[0], tf.int32),
                                   dtype=tf.int64)
        max_length = self._columns[0].config.max_sequence_length
        return tf.concat(outputs, axis=2), tf.minimum(lengths, max_length)

    def _trained_lookup(self, ids: dict[str, Any], weights: dict[str, Any],
                        training: Any) -> list[tf.Tensor]:
        """The fused lookup behind the gradient trap that applies the spec's optimizers."""
        plans = [cpu_rules.cpu_lookup_plan(item) for item in
                 cpu_rules.validate_features(ids, weights, self._feature_config)]
        multiplier = self._spec.experimental_gradient_multiplier_fn
        return self._front_end.trained_lookup(
            plans, getattr(self, _HELPER_NAME),
            gradient_scale=None if multiplier is None else (
                lambda: multiplier(self.global_step)),
            after_update=lambda: self.global_step.assign_add(1),
            training=False if training is None else training)

    def _coerce_float_inputs(self, features: dict[str, Any]) -> dict[str, Any]:
        """Keras 3's default serving signature gives every raw feature as float32
        (`tf_embedding.keras.export`): each is cast to the dtype its column parses."""
        parsed = {}
        for feature in self._columns:
            parsed.update(feature.column.parse_example_spec)
        return {key: export.coerce_float(value, parsed[key].dtype) if key in parsed else value
                for key, value in features.items()}

    def _saved_variables(self) -> dict[str, Any]:
        """The tables and slots (`weights_store`), and the global step."""
        return {**weights_store.engine_variables(self._tpu_embedding),
                "global_step": self.global_step}
