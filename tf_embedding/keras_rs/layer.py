"""`tf_embedding.keras_rs.DistributedEmbedding`: keras-rs's layer, its tables trained the TPU way.

The class subclasses `keras_rs.layers.DistributedEmbedding`, so the constructor, the configs,
nested feature structures, `preprocess`, `compute_output_shape`, `get_config` /
`from_config` and the placement and `update_stats` checks are keras-rs's own. It replaces only
keras-rs's "default device" path, the one keras-rs takes off a TPU (one Keras `EmbedReduce` per
table, trained by the model's optimizer, each table's optimizer ignored), with the engine:

* lookups have keras-rs's CPU semantics, shapes and structure (`keras_rs.inputs`), computed by
  the fused kernels;
* as on a TPU, the tables are not trainable variables. Computing the gradient of the
  trainable helper `_gradient_trap_dummy` (`tape.gradient(loss, model.trainable_variables)`,
  `model.fit`) applies each table's own optimizer, translated as keras-rs translates it for
  TPUs (`keras_rs.translation`), to the activation gradients summed over the global batch
  (`tf_embedding.sharded.front_end.FrontEnd`); the model's optimizer trains the rest;
* checkpoints hold the tables and slots under `_tpu_embedding/<table>` (keras-rs's TPU layer's
  attribute, stock TF's keys); Keras' weights files by name; traces for a SavedModel look up
  with stock ops only.
"""

from typing import Any, Mapping, Sequence

import keras
import keras_rs
from keras.src.backend.common import symbolic_scope
import tensorflow as tf
from tensorflow.python.saved_model import save_context

from tf_embedding import argument_checks as checks
from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.keras import export
from tf_embedding.keras import layer_config
from tf_embedding.keras import weights_store
from tf_embedding.keras_rs import inputs as rs_inputs
from tf_embedding.keras_rs import saving
from tf_embedding.keras_rs import translation
from tf_embedding.sharded.front_end import FrontEnd
from tf_embedding import sharding_plan as plans
from tf_embedding.sharded.tpu_embedding import TPUEmbedding

# keras-rs's TPU layer's name for the helper, which its `_trackable_children` leaves out.
_HELPER_NAME = "_gradient_trap_dummy"


def _plain(structure: Any) -> Any:
    """`structure` with every mapping as a dict and every list as a list (tuples and
    namedtuples keep their types); the leaves unchanged."""
    if isinstance(structure, Mapping):
        return {key: _plain(value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [_plain(value) for value in structure]
    if isinstance(structure, tuple):
        values = [_plain(value) for value in structure]
        return type(structure)(*values) if hasattr(structure, "_fields") else tuple(values)
    return structure


@keras.saving.register_keras_serializable(package="tf_embedding")
class DistributedEmbedding(weights_store.EngineWeights, keras_rs.layers.DistributedEmbedding):
    """keras-rs's `DistributedEmbedding`, each table trained by its own optimizer.

    ```python
    table = keras_rs.layers.TableConfig(name="video", vocabulary_size=1000, embedding_dim=16,
                                        optimizer=keras.optimizers.Adagrad(0.1))
    feature = keras_rs.layers.FeatureConfig(name="watched", table=table,
                                            input_shape=(256, 20), output_shape=(256, 16))
    embedding = tf_embedding.keras_rs.DistributedEmbedding({"watched": feature})
    ```

    See the module docstring and docs/keras_rs.md.
    """

    _HELPER_NAME = _HELPER_NAME

    def __init__(self, feature_configs: Any, *, table_stacking: Any = "auto",
                 sharding_plan: Any = None, **kwargs: Any) -> None:
        """Creates the layer; the tables are made by `build()`.

        Args:
          feature_configs: a nested structure of `keras_rs.layers.FeatureConfig`s.
          table_stacking: "auto" or None (equal off a TPU: stacking is a SparseCore layout).
          sharding_plan: (not in keras-rs) a `tf_embedding.sharding_plan.ShardingPlan` or its
            config dict, keyed by keras-rs's table names: how each table is split over the
            strategy's devices (docs/sharding_plans.md); saved in the layer's config.
          **kwargs: keras-rs's: `update_stats` (False only, as in keras-rs's TensorFlow
            backend), `optimizer` (for tables whose optimizer is None, as on a TPU),
            `pipeline_execution_with_tensor_core` (no pipeline off a TPU: ignored), and the
            Keras layer's (`name`, `dtype`, ...).

        Raises:
          ValueError: keras-rs's errors (placement "sparsecore" or stock TF FeatureConfigs off
            a TPU, `update_stats=True`, an unknown placement), another `table_stacking`, an
            optimizer keras-rs cannot translate for a TPU (naming the table), or two tables
            with one name.
          TypeError, ValueError: `feature_configs` without keras-rs FeatureConfigs, a
            `pipeline_execution_with_tensor_core` that is no bool (argument_checks.py).
        """
        translation.check_table_stacking(table_stacking)
        checks.check_feature_config(
            "DistributedEmbedding", feature_configs,
            (keras_rs.layers.FeatureConfig, tf.tpu.experimental.embedding.FeatureConfig),
            "keras_rs.layers.FeatureConfig", allow_empty=False, name="feature_configs")
        checks.check_flag("DistributedEmbedding", "pipeline_execution_with_tensor_core",
                          kwargs.get("pipeline_execution_with_tensor_core", False))
        # Read by `_default_device_init`, which keras-rs's constructor calls.
        self._sharding_plan = (None if sharding_plan is None
                               else plans.ShardingPlan.of(sharding_plan, "DistributedEmbedding"))
        super().__init__(feature_configs, table_stacking=table_stacking, **kwargs)
        layer_config.check_dtype_policy(self, given="dtype" in kwargs)
        self._table_stacking = table_stacking  # saved by keras-rs's get_config
        # Keras 3's jit_compile="auto" must not compile the step: this front end's lookups
        # are not tested under XLA.
        self.supports_jit = False

    def get_config(self) -> dict[str, Any]:
        """keras-rs's config, plus the layer's `optimizer` (for tables without their own),
        which keras-rs's leaves out, and its `sharding_plan`.

        Raises:
          ValueError: an initializer or optimizer Keras cannot serialize, naming the table and
            the argument (`keras_rs.saving`).
        """
        saving.check_tables(self._feature_configs, self._optimizer)
        return {**super().get_config(),
                "optimizer": keras.saving.serialize_keras_object(self._optimizer),
                "sharding_plan": (None if self._sharding_plan is None
                                  else self._sharding_plan.to_config())}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "DistributedEmbedding":
        optimizer = keras.saving.deserialize_keras_object(config.get("optimizer"))
        return super().from_config({**config, "optimizer": optimizer})

    def _saved_variables(self) -> dict[str, Any]:
        """The tables and slots (`weights_store`), and the step counters of the tables' Keras
        optimizers, which keras-rs's translated learning-rate schedules read."""
        return {**super()._saved_variables(), **layer_config.optimizer_iterations(
            layer_config.GivenArguments(self._feature_configs, self._optimizer))}

    def call(self, inputs: Any, weights: Any = None, training: Any = False) -> Any:
        """keras-rs's `call`, given plain Python containers: Keras 3's default serving
        signature (traced when a subclassed model is saved) passes tracked dict and list
        wrappers, which keras-rs's structure checks refuse."""
        return super().call(_plain(inputs), _plain(weights), training)

    def _default_device_init(self, feature_configs: dict[str, Any],
                             table_stacking: Any) -> None:
        """Makes the engine for the features keras-rs places on the default device."""
        del table_stacking
        engine_features = translation.engine_feature_configs(feature_configs)
        self._paths = self._no_dependency(sorted(engine_features))  # the engine's order
        self._engine_features = self._no_dependency(engine_features)
        self._strategy = self._no_dependency(tf.distribute.get_strategy())
        # keras-rs's TPU layer's attribute: checkpoints hold `_tpu_embedding/<table>`.
        self._tpu_embedding = TPUEmbedding(engine_features,
                                           translation.table_optimizer(self._optimizer),
                                           sharding_plan=self._sharding_plan)
        self._front_end = self._no_dependency(FrontEnd(self._tpu_embedding))

    def _default_device_build(self, input_shapes: dict[str, Any]) -> None:
        del input_shapes  # the tables' shapes come from their configs
        self._front_end.build()
        if not hasattr(self, _HELPER_NAME):
            self._add_helper()

    def _default_device_call(self, inputs: dict[str, Any],
                             weights: dict[str, Any] | None = None,
                             training: Any = False) -> dict[str, tf.Tensor]:
        """Each feature's activations, keyed by path, from the fused lookup behind the
        gradient trap (stock ops while a SavedModel is traced)."""
        engine_inputs = [
            rs_inputs.engine_input(path, inputs[path], None if weights is None else weights[path],
                                   self._engine_features[path].table.combiner)
            for path in self._paths]
        # Keras' symbolic build (model.fit's first step, also under a strategy's cross-replica
        # context) only needs shapes; a SavedModel must load where tf_embedding is not installed.
        if save_context.in_save_context() or symbolic_scope.in_symbolic_scope():
            outputs = tf.nest.flatten(export.stock_lookup(
                {path: item.ids for path, item in zip(self._paths, engine_inputs)},
                {path: item.weights for path, item in zip(self._paths, engine_inputs)},
                self._tpu_embedding.embedding_tables, self._engine_features))
        else:
            self._check_strategy()
            outputs = self._trained_lookup(engine_inputs, training)
        return {path: layer_config.in_compute_dtype(
                    self, item.finish(output, self._engine_features[path].table.dim))
                for path, item, output in zip(self._paths, engine_inputs, outputs)}

    def _trained_lookup(self, engine_inputs: Sequence[rs_inputs.EngineInput],
                        training: Any) -> list[tf.Tensor]:
        plans = [cpu_rules.CpuLookupPlan(FeatureInput(path, item.ids, item.weights))
                 for path, item in zip(self._paths, engine_inputs)]
        return self._front_end.trained_lookup(plans, getattr(self, _HELPER_NAME),
                                              training=training)

    def _default_device_get_embedding_tables(self) -> dict[str, tf.Tensor]:
        """{table name: its whole current value} (a copy, as keras-rs's)."""
        self._front_end.build()
        return {table.name: tf.convert_to_tensor(value) for table, value in
                export.serving_tables(self._tpu_embedding.embedding_tables).items()}

    def _check_strategy(self) -> None:
        """The engine runs under the strategy the layer was made under, one replica's batch
        per call (inside `strategy.run` when there are several)."""
        strategy = tf.distribute.get_strategy()
        if strategy is not self._strategy or (
                strategy.num_replicas_in_sync > 1 and tf.distribute.in_cross_replica_context()):
            raise RuntimeError(
                f"DistributedEmbedding was created under strategy {self._strategy} but is "
                f"called under strategy {strategy}. Create it under the strategy that runs it "
                "and call it inside strategy.run (model.fit does).")
