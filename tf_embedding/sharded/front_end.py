"""The sharded engine as Keras front ends use it: look up these features, train on these
activation gradients.

The Keras layer (`tf_embedding.keras.TPUEmbedding`), `EmbeddingFeatures` and keras-rs's layer
hold a `FrontEnd` beside the `TPUEmbedding` they track for checkpoints, and use nothing else of
the engine; the `FrontEnd` drives the engine's declared interface (`engine.Engine`). Which way a
batch is looked up (converted and looked up in one op, or converted first) is the engine's
choice, made here.

As on a TPU, the tables are not trainable variables. `trained_lookup` runs the lookups inside a
`tf.custom_gradient` of a trainable helper variable; when the helper's gradient is computed
(`tape.gradient(loss, model.trainable_variables)`, `model.fit`), the gradient function applies
each table's embedding optimizer to the activation gradients with the fused ops (summed over
all replicas) and returns zero for the helper. No gradient, no update.
"""

from typing import Any, Callable, Sequence

import tensorflow as tf

from tf_embedding.feature_inputs import cpu_rules
from tf_embedding.feature_inputs.feature_input import FeatureInput, split_activations
from tf_embedding.sharded.engine import Engine
from tf_embedding.sharded.tpu_embedding import TPUEmbedding


class FrontEnd:
    """What a Keras front end asks of a sharded `TPUEmbedding` (`embedding`)."""

    def __init__(self, embedding: TPUEmbedding) -> None:
        self._embedding = embedding

    def build(self) -> Engine:
        """Creates the engine's variables (once, eagerly, also while a function is traced) and
        returns its interface."""
        return self._embedding.engine

    def trained_lookup(self, plans: Sequence[cpu_rules.CpuLookupPlan], helper: Any,
                       gradient_scale: Callable[[], tf.Tensor] | None = None,
                       after_update: Callable[[], Any] | None = None,
                       training: Any = False) -> list[tf.Tensor]:
        """Looks up one replica's features and arms the embedding update.

        Args:
          plans: each feature's CPU lookup plan, in the engine's flattened feature order.
          helper: the trainable helper variable whose gradient triggers the update.
          gradient_scale: optional zero-argument callable; the activation gradients are
            multiplied by its value before the update (TPUEstimator's gradient multiplier).
          after_update: optional zero-argument callable run after the update (e.g. advancing
            the step counter that learning rates read).
          training: whether this is a training batch (Keras' `training`; None: no), for the
            engine's `profile_data_directory` and dynamic tables' admission and eviction.

        Returns:
          Each feature's activations, in `plans` order, with TF's CPU lookup shapes.

        Raises:
          ValueError: a feature with `output_shape` whose ragged input has no static batch size.
        """
        _check_static_batch_sizes(plans)
        if not isinstance(training, (bool, tf.Tensor)):
            training = bool(training)  # Keras' None (no training call above): False
        engine = self.build()
        table_inputs = engine.group_by_table([plan.feature_input for plan in plans])
        look_up, training_batches = _lookup_and_batches(engine, table_inputs, training)
        row_counts: list[tf.Tensor] = []

        @tf.custom_gradient
        def trap(helper_value):
            looked_up = look_up()
            activations = [value for value, _ in looked_up]
            row_counts.extend(counts for _, counts in looked_up)

            def apply_embedding_optimizers(*activation_gradients):
                gradients = [tf.zeros_like(value) if gradient is None else gradient
                             for gradient, value in zip(activation_gradients, activations)]
                if gradient_scale is not None:
                    scale = tf.cast(gradient_scale(), tf.float32)
                    gradients = [gradient * scale for gradient in gradients]
                engine.apply_table_gradients(training_batches(), gradients)
                if after_update is not None:
                    after_update()
                return tf.zeros_like(helper_value)

            return activations, apply_embedding_optimizers

        outputs: list[Any] = [None] * len(plans)
        trapped = trap(tf.convert_to_tensor(helper))
        for state, counts, activations, inputs in zip(engine.tables, row_counts, trapped,
                                                      table_inputs):
            blocks = split_activations(activations, counts, inputs, state.config.dim)
            for index, block in zip(state.feature_indices, blocks):
                outputs[index] = plans[index].finish(block)
        return outputs


def _lookup_and_batches(engine: Engine, table_inputs: list[list[FeatureInput]],
                        training: Any) -> tuple[Callable[[], list[tuple[tf.Tensor, tf.Tensor]]],
                                                Callable[[], list[Any]]]:
    """(look_up, training_batches): each table's (activations, feature row counts), and the
    converted batches an update needs.

    Where the engine can, each table's features are converted and looked up in one op and the
    update, if a gradient asks for one, converts the same inputs then: a forward pass (predict,
    evaluate) never builds the converted batches. Otherwise the batches are converted once, for
    both.
    """
    if engine.looks_up_features_directly():
        return (lambda: engine.lookup_features(table_inputs),
                lambda: engine.convert_tables(table_inputs, training))
    batches = engine.convert_tables(table_inputs, training)
    return (lambda: [(activations, batch.feature_row_counts) for activations, batch
                     in zip(engine.lookup_batches(batches), batches)],
            lambda: batches)


def _check_static_batch_sizes(plans: Sequence[cpu_rules.CpuLookupPlan]) -> None:
    """Raises ValueError for a feature with `output_shape` whose ragged input has no static
    batch size: the trained lookup must know its rows when it is traced."""
    for plan in plans:
        if plan.runtime_output_shape_feature:
            raise ValueError(
                f"Feature {plan.feature_input.name} sets output_shape, so its ragged input "
                "needs a static batch size (give the Input or the dataset a fixed batch size).")
