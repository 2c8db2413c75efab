"""Benchmark variants of the Keras ways to train: tables trained by a Keras optimizer,
tf_embedding's Keras layer (called, trained by tape.gradient, fitted), keras-rs's layer (ours and
its own), and TFRS's layer on tf_keras."""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

import benchmark_registry
from benchmark_registry import (INITIAL_ACCUMULATOR, LEARNING_RATE, Context, Setup, adagrad,
                                filled_tables_and_accumulators, make_table_configs,
                                one_feature_per_table, variant)
from benchmark_step_variants import stock_lookup, v0_embedding

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

benchmark_registry.uses_tensorflow(__name__)


def _keras_adagrad() -> keras.optimizers.Adagrad:
    return keras.optimizers.Adagrad(learning_rate=LEARNING_RATE,
                                    initial_accumulator_value=INITIAL_ACCUMULATOR)


def _keras_train_setup(ctx: Context, tables: list[tf.Variable],
                       lookup: Callable[[list[tf.SparseTensor]], list[tf.Tensor]],
                       jit_compile: bool = False) -> Setup:
    optimizer = _keras_adagrad()
    # Built eagerly: creating the accumulators inside the traced step would capture them.
    optimizer.build(tables)

    @tf.function(jit_compile=jit_compile)
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(lookup(features))
        gradients = tape.gradient(loss, tables)
        optimizer.apply_gradients(zip(gradients, tables))

    return ctx.train_setup(train, tables, [*tables, *optimizer.variables])


@variant("keras-train", "train",
         "safe_embedding_lookup_sparse + tape IndexedSlices + keras.optimizers.Adagrad")
def _keras_train(ctx: Context) -> Setup:
    tables = ctx.make_tables()
    return _keras_train_setup(ctx, tables, functools.partial(stock_lookup, tables))


@variant("v0-keras-train", "train",
         "TPUEmbeddingV0 + tape IndexedSlices + keras.optimizers.Adagrad")
def _v0_keras_train(ctx: Context) -> Setup:
    embedding, tables = v0_embedding(ctx)
    return _keras_train_setup(ctx, tables, embedding.__call__)


@variant("v0-keras-train-xla", "train",
         "v0-keras-train compiled by XLA (tf.function(jit_compile=True))")
def _v0_keras_train_xla(ctx: Context) -> Setup:
    embedding, tables = v0_embedding(ctx)
    return _keras_train_setup(ctx, tables, embedding.__call__, jit_compile=True)


def _keras_layer(ctx: Context) -> tuple[Any, list[tf.Variable], list[tf.Variable]]:
    """tf_embedding.keras.TPUEmbedding with one feature per table: it, its tables, their Adagrad
    accumulators."""
    from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel
    table_configs = make_table_configs(ctx.workload)
    layer = embedding_keras.TPUEmbedding(one_feature_per_table(table_configs), adagrad())
    layer.build(None)
    return (layer, *filled_tables_and_accumulators(ctx, layer.table_variables()))


@variant("keras-layer-forward", "forward", "tf_embedding.keras.TPUEmbedding called for inference")
def _keras_layer_forward(ctx: Context) -> Setup:
    return _keras_layer_forward_setup(ctx, jit_compile=False)


@variant("keras-layer-forward-xla", "forward",
         "keras-layer-forward compiled by XLA (tf.function(jit_compile=True))")
def _keras_layer_forward_xla(ctx: Context) -> Setup:
    return _keras_layer_forward_setup(ctx, jit_compile=True)


def _keras_layer_forward_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)
    # The layer holds its optimizer's slots whether or not the step trains.
    return ctx.forward_setup(
        tf.function(lambda features: layer(list(features)), jit_compile=jit_compile),
        [*tables, *accumulators])


@variant("keras-layer-train", "train",
         "tf_embedding.keras.TPUEmbedding, tape.gradient of its trainable variables (Adagrad)")
def _keras_layer_train(ctx: Context) -> Setup:
    return _keras_layer_train_setup(ctx, jit_compile=False)


@variant("keras-layer-train-xla", "train",
         "keras-layer-train compiled by XLA (tf.function(jit_compile=True), as model.fit's "
         "jit_compile=True step)")
def _keras_layer_train_xla(ctx: Context) -> Setup:
    return _keras_layer_train_setup(ctx, jit_compile=True)


def _keras_layer_train_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)

    @tf.function(jit_compile=jit_compile)
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(layer(list(features)))
        # The gradient trap applies the embedding Adagrad; the helper's gradient is zero.
        tape.gradient(loss, layer.trainable_variables)

    return ctx.train_setup(train, tables, [*tables, *accumulators])


def _fit_setup(ctx: Context, embedding: Any, tables: Sequence[Any], variables: Sequence[Any],
               jit_compile: bool = False) -> Setup:
    """A Keras 3 model of `embedding` (one feature per table, fed `{"feature_t": SparseTensor}`)
    whose loss is `ctx.loss` of its activations, compiled with the Keras Adagrad (and
    `jit_compile`), and a step that is one `model.train_on_batch` call: one compiled
    `train_step` per call, as `model.fit` runs with its default `steps_per_execution=1`."""

    class Model(keras.Model):  # pylint: disable=abstract-method

        def __init__(self):
            super().__init__()
            self.embedding = embedding

        def call(self, features):
            return tf.nest.flatten(self.embedding(features))

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                         training=True):
            del x, y, sample_weight, training
            return ctx.loss(y_pred)

    model = Model()
    model.compile(optimizer=_keras_adagrad(), jit_compile=jit_compile)
    names = [f"feature_{t}" for t in range(ctx.workload.tables)]
    # Built eagerly by a forward call (which trains nothing), so model_bytes counts the Keras
    # optimizer's slots and the timed steps are the only ones applied (the checksums agree).
    model(dict(zip(names, ctx.batch(0))))
    model.optimizer.build(model.trainable_variables)
    # One train_on_batch per call, from Python: not looped by --steps-per-call.
    one_step = copy.copy(ctx)
    one_step.steps_per_call = 1
    # No labels: compute_loss needs none. train_on_batch returns the loss as numpy, so it
    # returns when the step is done.
    return one_step.train_setup(
        lambda features: model.train_on_batch(dict(zip(names, features))), tables,
        [*variables, *model.optimizer.variables])


def _keras_rs_feature_configs(ctx: Context, optimizer: Any) -> dict[str, Any]:
    import keras_rs  # pylint: disable=import-outside-toplevel
    w = ctx.workload
    return {f"feature_{t}": keras_rs.layers.FeatureConfig(
        name=f"feature_{t}",
        table=keras_rs.layers.TableConfig(
            name=f"table_{t}", vocabulary_size=w.vocab, embedding_dim=w.dim, combiner="sum",
            initializer="zeros", optimizer=optimizer()),
        input_shape=(w.batch, None), output_shape=(w.batch, w.dim))
        for t in range(w.tables)}


@variant("keras-rs-fit", "train",
         "model.train_on_batch (one fit step) of tf_embedding.keras_rs.DistributedEmbedding, "
         "tables by their TableConfig Adagrad (fused)", default=False,
         versus=(("keras-rs-cpu-fit", 5.0), ("keras-layer-fit", 0.9)))
def _keras_rs_fit(ctx: Context) -> Setup:
    from tf_embedding import keras_rs as embedding_rs  # pylint: disable=import-outside-toplevel
    layer = embedding_rs.DistributedEmbedding(_keras_rs_feature_configs(
        ctx, lambda: keras.optimizers.Adagrad(learning_rate=LEARNING_RATE,
                                              initial_accumulator_value=INITIAL_ACCUMULATOR)))
    layer.build({f"feature_{t}": (ctx.workload.batch, None) for t in range(ctx.workload.tables)})
    tables, accumulators = filled_tables_and_accumulators(ctx, layer.table_variables())
    return _fit_setup(ctx, layer, tables, [*tables, *accumulators])


@variant("keras-rs-cpu-fit", "train",
         "model.train_on_batch of keras-rs's own CPU keras_rs.layers.DistributedEmbedding, "
         "tables trained by the model's keras.optimizers.Adagrad", default=False)
def _keras_rs_cpu_fit(ctx: Context) -> Setup:
    import keras_rs  # pylint: disable=import-outside-toplevel
    # keras-rs ignores the TableConfig optimizer off a TPU.
    layer = keras_rs.layers.DistributedEmbedding(_keras_rs_feature_configs(ctx, lambda: None))
    layer.build({f"feature_{t}": (ctx.workload.batch, None) for t in range(ctx.workload.tables)})
    embedding_layers = layer._default_device_embedding_layers  # pylint: disable=protected-access
    # The Keras variables' tf.Variables, which fill_tables assigns through their handles.
    tables = [embedding_layers[f"feature_{t}"].embeddings.value
              for t in range(ctx.workload.tables)]
    ctx.workload.fill_tables(tables)
    return _fit_setup(ctx, layer, tables, tables)


@variant("keras-layer-fit", "train",
         "model.train_on_batch of tf_embedding.keras.TPUEmbedding (fused Adagrad)")
def _keras_layer_fit(ctx: Context) -> Setup:
    return _keras_layer_fit_setup(ctx, jit_compile=False)


@variant("keras-layer-fit-xla", "train",
         "keras-layer-fit with the model compiled with jit_compile=True (model.fit's XLA step)")
def _keras_layer_fit_xla(ctx: Context) -> Setup:
    return _keras_layer_fit_setup(ctx, jit_compile=True)


def _keras_layer_fit_setup(ctx: Context, jit_compile: bool) -> Setup:
    layer, tables, accumulators = _keras_layer(ctx)

    class ByName(keras.layers.Layer):  # pylint: disable=abstract-method
        """The Keras layer fed the model's {"feature_t": ...} dict in table order."""

        def __init__(self):
            super().__init__()
            self.layer = layer

        def call(self, features):
            return self.layer([features[f"feature_{t}"] for t in range(ctx.workload.tables)])

    return _fit_setup(ctx, ByName(), tables, [*tables, *accumulators], jit_compile=jit_compile)


@variant("tfrs-train", "train",
         "TFRS's layer on CPU (tf_keras): tables trained by tf_keras legacy Adagrad, epsilon 0",
         legacy_keras=True)
def _tfrs_train(ctx: Context) -> Setup:
    # pylint: disable=import-outside-toplevel
    import tensorflow_recommenders as tfrs
    import tf_keras
    stock = tf.tpu.experimental.embedding
    table_configs = make_table_configs(ctx.workload, stock)
    # Legacy Adagrad adds epsilon outside the square root; 0 makes it the TPU rule the other
    # training variants run, so the checksums agree.
    tf_keras.backend.set_epsilon(0.0)
    optimizer = tf_keras.optimizers.legacy.Adagrad(
        learning_rate=LEARNING_RATE, initial_accumulator_value=INITIAL_ACCUMULATOR, epsilon=0.0)
    # On CPU TFRS's layer optimizer only decides which slots the layer makes; the Keras
    # optimizer trains the tables (and holds the accumulators).
    layer = tfrs.layers.embedding.TPUEmbedding(one_feature_per_table(table_configs, configs=stock),
                                               optimizer=None)
    layer.build(None)
    tables = [layer.embedding_tables[config] for config in table_configs]
    ctx.workload.fill_tables(tables)
    variables = layer.trainable_variables
    optimizer._create_all_weights(variables)  # pylint: disable=protected-access

    @tf.function
    def train(features):
        with tf.GradientTape() as tape:
            loss = ctx.loss(layer(list(features)))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    return ctx.train_setup(train, tables, [*tables, *optimizer.variables()])
