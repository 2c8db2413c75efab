"""Models around tf_embedding.keras.TPUEmbedding that tests save in one process and load in a
fresh one (tests/keras/test_keras_saving.py); both processes import this module, which holds no
state, only builders. The Keras is the process's (`tf.keras`: Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1)."""

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras

K = tf.keras
BATCH = 4
LENGTH = 2
VOCAB = {"watched": 10, "friends": 6}


def feature_config(optimizer=None):
    """Two tables: `video` (sum, TF's default initializer) and `user` (mean, a constant one,
    its own Adagrad)."""
    video = tf_embedding.TableConfig(VOCAB["watched"], 4, name="video", combiner="sum",
                                     optimizer=optimizer)
    user = tf_embedding.TableConfig(
        VOCAB["friends"], 2, name="user",
        initializer=tf.constant_initializer(np.linspace(-1, 1, 12).reshape(6, 2)),
        optimizer=tf_embedding.Adagrad(0.2, initial_accumulator_value=0.5))
    return {"watched": tf_embedding.FeatureConfig(video, name="watched"),
            "friends": tf_embedding.FeatureConfig(user, name="friends")}


def functional_model(layer_optimizer):
    ids = {name: K.Input(shape=(LENGTH,), dtype="int64", name=name) for name in VOCAB}
    activations = embedding_keras.TPUEmbedding(feature_config(), layer_optimizer,
                                               name="embedding")(ids)
    joined = K.layers.Concatenate()([activations[name] for name in VOCAB])
    return K.Model(ids, K.layers.Dense(1, kernel_initializer="ones")(joined))


def sequential_model():
    table = tf_embedding.TableConfig(VOCAB["watched"], 3, name="video", combiner="sum")
    return K.Sequential([
        K.Input(shape=(LENGTH,), dtype="int64"),
        embedding_keras.TPUEmbedding(tf_embedding.FeatureConfig(table), "adagrad",
                                     name="embedding"),
        K.layers.Dense(1, kernel_initializer="ones")])


@K.utils.register_keras_serializable(package="tf_embedding_tests")
class Scorer(K.Model):
    """A subclassed model given its embedding layer: its config holds the layer's."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        self.dense = K.layers.Dense(1, kernel_initializer="ones")

    def build(self, input_shape):
        # Keras builds a loaded subclassed model from its input shapes (its optimizer loads
        # its variables only into a built model), by default calling it on float inputs; ids
        # must be integers, so it is called on zero ids of those shapes.
        self.call({name: tf.zeros([1] + list(input_shape[name])[1:], tf.int64)
                   for name in VOCAB})
        self.built = True

    def call(self, inputs):
        activations = self.embedding(inputs)
        return self.dense(tf.concat([activations[name] for name in VOCAB], axis=-1))

    def get_config(self):
        return {**super().get_config(), "embedding": K.layers.serialize(self.embedding)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        embedding = K.layers.deserialize(config.pop("embedding"))
        return cls(embedding, **config)


def subclassed_model(layer_optimizer):
    return Scorer(embedding_keras.TPUEmbedding(feature_config(), layer_optimizer,
                                               name="embedding"))


def batches(kind, seed, steps):
    """`steps` batches of dense ids (a dict, or one array for the Sequential model) and
    labels, as numpy."""
    rng = np.random.default_rng(seed)
    names = ["watched"] if kind == "sequential" else list(VOCAB)
    ids = {name: rng.integers(0, VOCAB[name], (steps * BATCH, LENGTH)) for name in names}
    labels = rng.uniform(-1, 1, (steps * BATCH, 1)).astype(np.float32)
    return (ids["watched"] if kind == "sequential" else ids), labels


def engine_state(model):
    """What the embedding layer saves (tables, slots, step counters), by Keras' own
    `save_own_variables` into a dict."""
    store = {}
    model.get_layer("embedding").save_own_variables(store)
    return store


def one_more_step(model, ids, labels):
    """Predictions, one fit step on the batch, then the layer's state and predictions."""
    before = model.predict(ids, verbose=0)
    model.fit(ids, labels, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    after = model.predict(ids, verbose=0)
    return {"before": before, "after": after,
            **{f"state/{key}": value for key, value in engine_state(model).items()}}
