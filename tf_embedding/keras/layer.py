"""`tf_embedding.keras.TPUEmbedding`: TensorFlow Recommenders' Keras layer, on any device.

The layer subclasses `tf.keras.layers.Layer`, which is Keras 3 in TF 2.21 and tf_keras when
`TF_USE_LEGACY_KERAS=1`, so the same class serves both. Its surface and messages are those of
`tfrs.layers.embedding.TPUEmbedding`; how it trains is chosen by `tables_trained_by`:

* `"embedding_optimizer"` (the default) trains as on a TPU. The tables are not trainable
  variables. A trainable helper variable (`tpu_embedding_helper_dummy`) feeds a custom gradient
  around the lookup, so `tape.gradient(loss, model.trainable_variables)` (and `model.fit`)
  applies the layer's embedding optimizer to the tables through the fused kernels, with the TPU's
  math and each row's gradient summed over the global batch (all replicas). The model's Keras
  optimizer only sees the helper's zero gradient.
* `"model_optimizer"` is TFRS's CPU behaviour (tf_keras only): the tables are trainable
  variables whose `IndexedSlices` gradients the model's Keras optimizer applies; the layer's
  optimizer only decides which slot variables exist.

Lookups follow TF's CPU lookup (`serving_embedding_lookup`) for every input kind, as TFRS's layer
does off TPU, so activations have the same shapes and values. Checkpoints hold the tables under
`<layer>/_tpu_embedding/<table>` (TFRS's keys; the helper is not saved), and functions traced by
`tf.saved_model.save` look up with stock ops only.
"""

from typing import Any

import tensorflow as tf
from tensorflow.python.saved_model import save_context
from tensorflow.python.util import nest

from tf_embedding import argument_checks as checks
from tf_embedding import config as config_lib
from tf_embedding import dynamic_vocabulary
from tf_embedding.feature_inputs import cpu_rules
from tf_embedding import for_serving
from tf_embedding.keras import export
from tf_embedding.keras import layer_config
from tf_embedding.keras import weights_store
from tf_embedding.optimizers import keras_translation
from tf_embedding.replicated import TPUEmbeddingV0
from tf_embedding.sharded.front_end import FrontEnd
from tf_embedding.sharded.tpu_embedding import TPUEmbedding as ShardedTPUEmbedding
from tf_embedding import sharding_plan as plans

_DUMMY_NAME = "tpu_embedding_helper_dummy"
_OWNER = "keras.TPUEmbedding"  # the class argument messages name
_TRAINING_MODES = ("embedding_optimizer", "model_optimizer")
_TPU_STRATEGIES = (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)


def _uses_legacy_keras() -> bool:
    return tf.keras.__name__.startswith("tf_keras") or tf.keras.version().startswith("2.")


def _clone_and_prepare_features(feature_config: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """TFRS's cloning: one tf_embedding TableConfig per distinct user table (identity), in
    flattening order, and FeatureConfigs over the clones; the user's configs are never mutated.

    Returns the cloned structure and the (user table, cloned table) pairs.
    """
    table_map: list[tuple[Any, Any]] = []

    def clone_table(table: Any) -> Any:
        for user_table, cloned in table_map:
            if user_table is table:
                return cloned
        cloned = config_lib.TableConfig(
            vocabulary_size=table.vocabulary_size, dim=table.dim, initializer=table.initializer,
            optimizer=keras_translation.embedding_optimizer(table.optimizer, rule="tpu"),
            quantization_config=table.quantization_config, combiner=table.combiner,
            name=table.name, dynamic=dynamic_vocabulary.dynamic_of(table))
        table_map.append((table, cloned))
        return cloned

    cloned_features = [
        config_lib.FeatureConfig(
            table=clone_table(feature.table), max_sequence_length=feature.max_sequence_length,
            output_shape=feature.output_shape,
            validate_weights_and_indices=feature.validate_weights_and_indices, name=feature.name)
        for feature in tf.nest.flatten(feature_config)]
    return tf.nest.pack_sequence_as(feature_config, cloned_features), table_map


def _check_arguments(feature_config: Any, optimizer: Any, pipelined: Any, batch_size: Any,
                     tables_trained_by: Any, sharding_plan: Any) -> None:
    """The layer's own arguments (argument_checks), after Keras' (`name`, `dtype`)."""
    if tables_trained_by not in _TRAINING_MODES:
        checks.refuse(_OWNER, "tables_trained_by", tables_trained_by,
                      " or ".join(repr(mode) for mode in _TRAINING_MODES))
    if tables_trained_by == "model_optimizer" and not _uses_legacy_keras():
        raise ValueError(
            "tables_trained_by='model_optimizer' (TFRS's CPU behaviour: tables trained as "
            "ordinary variables by the model's optimizer) needs tf_keras: Keras 3 layers "
            "cannot expose tf.Variables as weights. Set TF_USE_LEGACY_KERAS=1 before "
            "importing TensorFlow, or use the default 'embedding_optimizer'.")
    if sharding_plan is not None and tables_trained_by == "model_optimizer":
        checks.refuse(_OWNER, "sharding_plan", sharding_plan, "None",
                      why="tables_trained_by='model_optimizer' keeps every table whole")
    checks.check_flag(_OWNER, "pipeline_execution_with_tensor_core", pipelined)
    checks.check_integer(_OWNER, "batch_size", batch_size, low=1, optional=True)
    config_lib.check_embedding_arguments(_OWNER, feature_config, optimizer, allow_empty=False)


@tf.keras.utils.register_keras_serializable(package="tf_embedding")
class TPUEmbedding(weights_store.EngineWeights, tf.keras.layers.Layer):
    """Looks up features in embedding tables; trains them with an embedding optimizer.

    ```python
    embedding = tf_embedding.keras.TPUEmbedding(feature_config, "adagrad")
    logits = tf.keras.layers.Dense(1)(tf.concat(tf.nest.flatten(embedding(features)), 1))
    ```

    See the module docstring and docs/keras.md for training, checkpoints and export.
    """

    _HELPER_NAME = _DUMMY_NAME

    def __init__(self, feature_config: Any, optimizer: Any,
                 pipeline_execution_with_tensor_core: bool = False,
                 batch_size: int | None = None, *,
                 tables_trained_by: str = "embedding_optimizer",
                 sharding_plan: Any = None, **kwargs: Any):
        """Creates the layer; the tables are made by `build()`.

        Args:
          feature_config: a nested structure of `FeatureConfig`s (tf_embedding's or stock TF's);
            they are cloned, so the layer never changes them.
          optimizer: an embedding optimizer (tf_embedding's or stock TF's), a Keras SGD,
            Adagrad, Adam or Ftrl optimizer (`translate_keras_optimizer`), one of "sgd",
            "adagrad", "adam", "ftrl", or None (no slot variables, e.g. for export). Tables may
            set their own.
          pipeline_execution_with_tensor_core: accepted for TFRS compatibility; without a TPU
            there is no pipeline to overlap, as in TFRS off TPU.
          batch_size: accepted for TFRS compatibility (TFRS uses it only on a TPU).
          tables_trained_by: "embedding_optimizer" (TPU semantics) or "model_optimizer"
            (TFRS's CPU behaviour, tf_keras only).
          sharding_plan: (not in TFRS) a `tf_embedding.sharding_plan.ShardingPlan` or its
            config dict, how each table is split over the strategy's devices
            (docs/sharding_plans.md); saved in the layer's config. Not with "model_optimizer".
          **kwargs: the Keras layer's (`name`, `trainable`, `dtype`: 'float32' or
            'mixed_bfloat16', whose activations are bfloat16, ...).

        Raises:
          ValueError: an unknown optimizer or `tables_trained_by`, a Keras optimizer setting
            the embedding optimizer cannot express, or duplicate table names.
          TypeError, ValueError: a `feature_config` without FeatureConfigs, an optimizer class,
            a `pipeline_execution_with_tensor_core` that is no bool, a `batch_size` that is no
            int >= 1 (argument_checks.py).
          RuntimeError: created under a strategy the engine does not run under.
        """
        # Ids and weights are never autocast: the lookup is float32, only its outputs are cast.
        super().__init__(**kwargs, autocast=False)
        layer_config.check_dtype_policy(self, given="dtype" in kwargs)
        _check_arguments(feature_config, optimizer, pipeline_execution_with_tensor_core,
                         batch_size, tables_trained_by, sharding_plan)
        self._tables_trained_by = tables_trained_by
        self.batch_size = batch_size
        self._pipeline_execution_with_tensor_core = pipeline_execution_with_tensor_core
        self._sharding_plan = self._no_dependency(
            None if sharding_plan is None else plans.ShardingPlan.of(sharding_plan, _OWNER))
        self._given = self._no_dependency(
            layer_config.GivenArguments(feature_config, optimizer))
        feature_config, table_config_map = _clone_and_prepare_features(feature_config)
        self._feature_config = self._no_dependency(feature_config)
        self._table_config_map = self._no_dependency(table_config_map)
        self._optimizer = self._no_dependency(
            keras_translation.embedding_optimizer(optimizer, rule="tpu"))
        self._strategy = self._no_dependency(tf.distribute.get_strategy())
        # Which flat features the last call gave as sparse or ragged tensors, for Keras 3's
        # default serving signature (`export.stock_lookup`).
        self._composite_features = self._no_dependency(frozenset())
        # Tracked under TFRS's attribute name, so checkpoints hold `_tpu_embedding/<table>`.
        self._tpu_embedding = self._engine_for(feature_config)
        self._front_end = self._no_dependency(
            FrontEnd(self._tpu_embedding) if tables_trained_by == "embedding_optimizer"
            else None)

    def _engine_for(self, feature_config: Any) -> Any:
        """The engine of the cloned `feature_config`: sharded (with the layer's plan), or
        replicated for tables trained by the model's optimizer."""
        if self._tables_trained_by != "embedding_optimizer":
            return TPUEmbeddingV0(feature_config, self._optimizer)
        return ShardedTPUEmbedding(feature_config, self._optimizer,
                                   sharding_plan=self._sharding_plan)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the arguments as given (`keras.layer_config`).

        Raises:
          ValueError: a setting a config cannot hold, naming the table and the argument.
        """
        return {**super().get_config(), **layer_config.get_config(self._given, {
            "pipeline_execution_with_tensor_core": self._pipeline_execution_with_tensor_core,
            "batch_size": self.batch_size, "tables_trained_by": self._tables_trained_by,
            "sharding_plan": (None if self._sharding_plan is None
                              else self._sharding_plan.to_config())})}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "TPUEmbedding":
        feature_config, optimizer, kwargs = layer_config.from_config(config)
        return cls(feature_config, optimizer, **kwargs)

    def _saved_variables(self) -> dict[str, Any]:
        """The tables and slots (`weights_store`), and the Keras optimizers' step counters."""
        return {**super()._saved_variables(), **layer_config.optimizer_iterations(self._given)}

    @property
    def embedding_tables(self) -> dict[Any, Any]:
        """{the user's TableConfig: its table variable}."""
        tables = self._tpu_embedding.embedding_tables
        return {user_table: tables[cloned] for user_table, cloned in self._table_config_map}

    def build(self, input_shape: Any = None) -> None:
        # Eagerly, also when Keras builds the layer while tracing a step.
        self._build_tables()
        if self._tables_trained_by == "embedding_optimizer":
            # TFRS's attribute name, which `_trackable_children` leaves out of checkpoints.
            self._add_helper()
        else:
            # TFRS's CPU path: assigning the tables makes Keras count them as trainable weights.
            setattr(self, _DUMMY_NAME, list(self._tpu_embedding.embedding_tables.values()))
        super().build(input_shape)

    def call(self, features: Any, weights: Any = None, serving_config: Any = None,
             training: Any = None) -> Any:
        """Looks up `features` (the structure of `feature_config`) with optional `weights`.
        `training` (Keras' flag; set by `fit`): whether the lookup counts for dynamic tables'
        admission and eviction.

        With `serving_config` (FeatureConfigs over the user's TableConfigs), looks up with that
        config in the current tables instead, with stock ops.

        Raises:
          RuntimeError: called under a TPUStrategy, or under another strategy (or outside
            `strategy.run`) than the one the layer was created under.
          ValueError: features not matching the config (TF's messages), or a `serving_config`
            table this layer does not have.
        """
        return tf.nest.map_structure(
            lambda activations: layer_config.in_compute_dtype(self, activations),
            self._float32_lookup(features, weights, serving_config, training))

    def _float32_lookup(self, features: Any, weights: Any, serving_config: Any,
                        training: Any) -> Any:
        if serving_config is not None:
            return for_serving.serving_embedding_lookup(
                features, weights, export.serving_tables(self._tpu_embedding.embedding_tables),
                self._serving_config_over_clones(serving_config),
                key_indexes=self._tpu_embedding.serving_key_indexes())
        self._check_strategy()
        if save_context.in_save_context():
            # A SavedModel must load where tf_embedding is not installed.
            return export.stock_lookup(features, weights, self._tpu_embedding.embedding_tables,
                                       self._feature_config, self._composite_features,
                                       self._tpu_embedding.serving_key_indexes())
        self._composite_features = frozenset(
            index for index, feature in enumerate(tf.nest.flatten(features))
            if isinstance(feature, (tf.SparseTensor, tf.RaggedTensor)))
        if self._tables_trained_by == "model_optimizer":
            return self._tpu_embedding(features, weights)
        return self._trained_lookup(features, weights, training)

    def _build_tables(self) -> None:
        if self._front_end is not None:
            self._front_end.build()
        else:
            self._tpu_embedding.table_variables()

    def _trained_lookup(self, features: Any, weights: Any, training: Any) -> Any:
        """The fused lookup behind the gradient trap that applies the embedding optimizer
        (`FrontEnd.trained_lookup`)."""
        nest.assert_same_structure(self._feature_config, features)
        plans = [cpu_rules.cpu_lookup_plan(item) for item in
                 cpu_rules.validate_features(features, weights, self._feature_config)]
        outputs = self._front_end.trained_lookup(plans, getattr(self, _DUMMY_NAME),
                                                 training=training)
        return tf.nest.pack_sequence_as(features, outputs)

    def _serving_config_over_clones(self, serving_config: Any) -> Any:
        """`serving_config` with each user TableConfig replaced by this layer's clone."""
        cloned_features = []
        for feature in tf.nest.flatten(serving_config):
            clones = [cloned for user_table, cloned in self._table_config_map
                      if user_table is feature.table]
            if not clones:
                raise ValueError(f"TableConfig {feature.table} does not match any of the "
                                 "TableConfigs used to configure this layer.")
            cloned_features.append(config_lib.FeatureConfig(
                table=clones[0], max_sequence_length=feature.max_sequence_length,
                output_shape=feature.output_shape,
                validate_weights_and_indices=feature.validate_weights_and_indices,
                name=feature.name))
        return tf.nest.pack_sequence_as(serving_config, cloned_features)

    def _check_strategy(self) -> None:
        """TFRS's two strategy errors, plus a call outside `strategy.run` of a multi-replica
        strategy (whose replicas each look up their own batch)."""
        strategy = tf.distribute.get_strategy()
        if isinstance(strategy, _TPU_STRATEGIES):
            raise RuntimeError(
                f"Layer is created under strategy {self._strategy} but is being called under a "
                "TPUStrategy. Please create the layer under a TPUStrategy if you wish to run the "
                "layer on TPU.")
        if strategy is not self._strategy or (
                strategy.num_replicas_in_sync > 1 and tf.distribute.in_cross_replica_context()):
            raise RuntimeError(
                f"Layer is created under strategy {self._strategy} but is being called under "
                f"strategy {strategy}. Please use strategy.run when calling this layer.")
