"""Stock TF's `tf.tpu.experimental.embedding` configs and optimizers, given to tf_embedding's
classes, mean what tf_embedding's own do: the same tables, slots and activations, bit for bit."""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras
from tf_embedding import optimizers

from helpers.tables import table_values

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding

# Hyperparameters off their defaults, so that a dropped one changes the numbers.
HYPERPARAMETERS = {
    "SGD": dict(learning_rate=0.3),
    "Adagrad": dict(learning_rate=0.5, initial_accumulator_value=0.2),
    "AdagradMomentum": dict(learning_rate=0.1, momentum=0.7, use_nesterov=True, exponent=3.0,
                            beta2=0.9, epsilon=0.1),
    "Adam": dict(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=1e-3, lazy_adam=False),
    "FTRL": dict(learning_rate=0.2, l1_regularization_strength=0.01, beta=0.1,
                 multiply_linear_by_learning_rate=True),
}
CLIPPING = dict(clip_weight_min=-0.9, clip_weight_max=0.95, clipvalue=(-0.5, 0.4),
                weight_decay_factor=0.01, multiply_weight_decay_factor_by_learning_rate=True)


def configs(module, optimizer):
    """Two tables, three features, in `module`'s classes (tf_embedding or stock TF)."""
    video = module.TableConfig(9, 4, combiner="sum", name="video",
                               initializer=tf.constant_initializer(
                                   np.linspace(-1, 1, 36).reshape(9, 4)))
    user = module.TableConfig(5, 2, combiner="mean", name="user", optimizer=optimizer,
                              initializer=tf.constant_initializer(
                                  np.linspace(1, -1, 10).reshape(5, 2)))
    return {"watched": module.FeatureConfig(video, name="watched"),
            "favorited": module.FeatureConfig(video, name="favorited"),
            "friends": module.FeatureConfig(user, name="friends")}


def batch(step):
    rng = np.random.default_rng(step)
    return {name: tf.ragged.constant([list(rng.integers(0, vocabulary, rng.integers(1, 4)))
                                      for _ in range(3)], dtype=tf.int64)
            for name, vocabulary in (("watched", 9), ("favorited", 9), ("friends", 5))}


@pytest.mark.parametrize("name", sorted(HYPERPARAMETERS))
def test_from_stock_keeps_every_hyperparameter(name):
    arguments = {**HYPERPARAMETERS[name], **CLIPPING}
    converted = optimizers.from_stock(getattr(stock, name)(**arguments))
    assert type(converted) is getattr(optimizers, name)
    assert converted == getattr(optimizers, name)(**arguments)
    assert converted.kernel_attrs() == getattr(optimizers, name)(**arguments).kernel_attrs()


def test_from_stock_passes_other_objects_and_names_what_it_cannot_convert():
    ours = optimizers.SGD(0.1)
    assert optimizers.from_stock(ours) is ours

    class Subclassed(stock.Adagrad):
        pass

    with pytest.raises(ValueError, match="Subclassed has no tf_embedding equivalent"):
        optimizers.from_stock(Subclassed(0.1))


def train_sharded(module, optimizer, steps=2):
    engine = tf_embedding.TPUEmbedding(configs(module, None), optimizer)

    @tf.function
    def step(features):
        engine.enqueue(features, training=True)
        with tf.GradientTape() as tape:
            activations = engine.dequeue()
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_sum(a * a) for a in tf.nest.flatten(activations)])
        engine.apply_gradients(tape.gradient(loss, activations))
        return activations

    outputs = [tf.nest.map_structure(lambda t: t.numpy(), step(batch(i))) for i in range(steps)]
    return outputs, table_values(engine)


@pytest.mark.parametrize("name", sorted(HYPERPARAMETERS))
def test_sharded_engine_trains_with_stock_configs_and_optimizers(name):
    arguments = {**HYPERPARAMETERS[name], **CLIPPING}
    ours = train_sharded(tf_embedding, getattr(tf_embedding, name)(**arguments))
    theirs = train_sharded(stock, getattr(stock, name)(**arguments))
    np.testing.assert_equal(theirs, ours)


def train_layer(module, optimizer, steps=2):
    layer = embedding_keras.TPUEmbedding(configs(module, None), optimizer)

    @tf.function
    def step(features):
        with tf.GradientTape() as tape:
            activations = layer(features)
            loss = tf.add_n([tf.reduce_sum(a * a) for a in tf.nest.flatten(activations)])
        tape.gradient(loss, layer.trainable_variables)
        return activations

    outputs = [tf.nest.map_structure(lambda t: t.numpy(), step(batch(i))) for i in range(steps)]
    return outputs, table_values(layer)


@pytest.mark.parametrize("name", ["Adagrad", "FTRL"])
def test_keras_layer_trains_with_stock_configs_and_optimizers(name):
    """TFRS's and the seed's examples write `TPUEmbedding(feature_config,
    tf.tpu.experimental.embedding.Adagrad(0.5))`."""
    ours = train_layer(tf_embedding, getattr(tf_embedding, name)(**HYPERPARAMETERS[name]))
    theirs = train_layer(stock, getattr(stock, name)(**HYPERPARAMETERS[name]))
    np.testing.assert_equal(theirs, ours)


def test_a_table_optimizer_of_stock_tf_trains_that_table():
    """A stock optimizer set on one TableConfig is that table's; the global one the rest's."""
    mixed = embedding_keras.TPUEmbedding(configs(stock, stock.SGD(0.5)), stock.Adagrad(0.1))
    # private: needs a public accessor (the optimizer each of a layer's tables trains with).
    assert isinstance(mixed._tpu_embedding._table_config[1].optimizer, optimizers.SGD)
    assert isinstance(mixed._tpu_embedding._table_config[0].optimizer, optimizers.Adagrad)


@pytest.mark.parametrize("engine_class", ["TPUEmbeddingV0", "TPUEmbeddingForServing"])
def test_cpu_lookup_classes_take_stock_configs_and_optimizers(engine_class):
    looked_up = []
    for module in (tf_embedding, stock):
        engine = getattr(tf_embedding, engine_class)(configs(module, None), module.Adagrad(0.5))
        looked_up.append(tf.nest.map_structure(lambda t: t.numpy(), engine(batch(0))))
        assert sorted(table_values(engine)) == ["user/accumulators", "user/parameters",
                                             "video/accumulators", "video/parameters"]
    np.testing.assert_equal(looked_up[1], looked_up[0])
