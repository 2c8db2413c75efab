"""What tests/keras_rs_layer/test_keras_rs.py and tests/keras_rs_layer/test_keras_rs_saving.py
share: small keras-rs configs
with constant tables, a model with closed-form activation gradients, its data, and the numpy
replay of its training by the TPU optimizer rules (tests/helpers/references.py), each table with
its own optimizer. Imported only by those modules, after their Python 3.11 check (keras-rs needs
it)."""

import keras
import keras_rs
import numpy as np
import tensorflow as tf

from tf_embedding import keras_rs as embedding_rs

from helpers.references import combined_gains, reference_step

F = np.float32
BATCH = 4
VOCAB = {"video": 9, "user": 6, "genre": 5}
DIMS = {"video": 4, "user": 2, "genre": 3}


def table(name, combiner="sum", optimizer="sgd", seed=0):
    values = np.random.default_rng(seed).uniform(-1, 1, (VOCAB[name], DIMS[name])).astype(F)
    return keras_rs.layers.TableConfig(
        name=name, vocabulary_size=VOCAB[name], embedding_dim=DIMS[name], combiner=combiner,
        optimizer=optimizer, initializer=keras.initializers.Constant(values))


def feature(name, table_config, input_shape):
    return keras_rs.layers.FeatureConfig(
        name=name, table=table_config, input_shape=input_shape,
        output_shape=(input_shape[0], table_config.embedding_dim))


FIT_OPTIMIZERS = {
    "video": lambda: keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5),
    "user": lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
    "genre": lambda: keras.optimizers.Adam(0.05),
}
COEFFICIENTS = {"watched": [1.0, -0.5, 0.25, 2.0], "favorited": [0.5, 0.5, -1.0, 1.0],
                "friends": [-1.0, 1.5], "genres": [0.3, -0.7, 1.1]}
TABLE_OF = {"watched": "video", "favorited": "video", "friends": "user", "genres": "genre"}
COMBINER = {"video": "sum", "user": "mean", "genre": "sqrtn"}


def fit_configs():
    tables = {name: table(name, COMBINER[name], make(), seed=index)
              for index, (name, make) in enumerate(FIT_OPTIMIZERS.items())}
    return {name: feature(name, tables[TABLE_OF[name]], (BATCH, 3)) for name in TABLE_OF}


@keras.saving.register_keras_serializable(package="tf_embedding_tests")
class SumModel(keras.Model):
    """y = sum over features of act_f . c_f + bias: the activation gradients of a squared loss
    are known in closed form, and the bias is what the model's own optimizer trains."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding_rs.DistributedEmbedding(fit_configs())
        self.bias = self.add_weight(shape=(), initializer="zeros", name="bias")

    def call(self, inputs):
        features, weights = inputs
        activations = self.embedding(features, weights)
        return tf.add_n([tf.reduce_sum(activations[n] * tf.constant(c), axis=1)
                         for n, c in COEFFICIENTS.items()])[:, None] + self.bias

    def get_build_config(self):
        return None  # the layer makes its tables when its weights are loaded


def fit_samples(seed, steps, ragged):
    """(features, weights, labels) of `steps` batches; `watched` ragged if `ragged`."""
    rng = np.random.default_rng(seed)
    rows = steps * BATCH
    features = {n: rng.integers(0, VOCAB[TABLE_OF[n]], (rows, 3)) for n in TABLE_OF}
    weights = {n: rng.uniform(0.5, 2, (rows, 3)).astype(F) for n in TABLE_OF}
    lengths = rng.integers(0, 4, rows)
    if ragged:
        features["watched"] = [list(rng.integers(0, 9, k)) for k in lengths]
        weights["watched"] = [list(rng.uniform(0.5, 2, k).astype(F)) for k in lengths]
    return features, weights, rng.uniform(-1, 1, (rows, 1)).astype(F)


def as_tensors(features, weights, start, stop):
    convert = lambda v, dtype: (tf.ragged.constant(v[start:stop], dtype) if isinstance(v, list)
                                else tf.constant(v[start:stop], dtype))
    return ({n: convert(v, tf.int64) for n, v in features.items()},
            {n: convert(v, tf.float32) for n, v in weights.items()})


def fit_dataset(samples, batch=BATCH):
    features, weights, labels = samples
    all_features, all_weights = as_tensors(features, weights, 0, len(labels))
    return tf.data.Dataset.from_tensor_slices(
        ((all_features, all_weights), labels)).batch(batch)


class NumpyTraining:
    """The layer's tables and slots in numpy, trained by numpy's TPU rules per table."""

    def __init__(self, layer):
        self.optimizers = {name: embedding_rs.table_optimizer(make())
                           for name, make in FIT_OPTIMIZERS.items()}
        self.tables, self.slots = {}, {}
        for name, variables in layer.table_variables().items():
            value = lambda v: tf.convert_to_tensor(v).numpy().copy()
            self.tables[name] = value(variables["parameters"])
            self.slots[name] = [value(variables[slot])
                                for slot in self.optimizers[name].slot_names()]
        self.bias = F(0)

    @staticmethod
    def rows(features, weights, name, start, stop):
        combiner = COMBINER[TABLE_OF[name]]
        return [list(zip(ids, combined_gains([F(w) for w in ws], combiner)))
                for ids, ws in zip(features[name][start:stop], weights[name][start:stop])]

    def step(self, samples, start, stop, model_lr):
        features, weights, labels = samples
        rows = {n: self.rows(features, weights, n, start, stop) for n in TABLE_OF}
        activations = {n: np.array([sum((F(g) * self.tables[TABLE_OF[n]][i] for i, g in r),
                                        np.zeros(DIMS[TABLE_OF[n]], F)) for r in rows[n]])
                       for n in TABLE_OF}
        y = sum(activations[n] @ np.array(c, F) for n, c in COEFFICIENTS.items()) + self.bias
        residual = 2 * (y - labels[start:stop, 0]) / (stop - start)
        for name in self.tables:
            batches = []
            for n in sorted(n for n in TABLE_OF if TABLE_OF[n] == name):
                splits = np.cumsum([0] + [len(r) for r in rows[n]])
                ids = np.array([i for r in rows[n] for i, _ in r], np.int64)
                gains = np.array([g for r in rows[n] for _, g in r], F)
                gradients = residual[:, None] * np.array(COEFFICIENTS[n], F)[None, :]
                batches.append((splits, ids, gains, gradients.astype(F)))
            optimizer = self.optimizers[name]
            reference_step(optimizer, self.tables[name], self.slots[name], batches,
                           optimizer.learning_rate)
        self.bias = F(self.bias - model_lr * residual.sum())

    def check(self, model):
        variables = model.embedding.table_variables()
        for name, expected in self.tables.items():
            np.testing.assert_allclose(tf.convert_to_tensor(variables[name]["parameters"]),
                                       expected, rtol=2e-5, atol=1e-6, err_msg=name)
            for slot, value in zip(self.optimizers[name].slot_names(), self.slots[name]):
                np.testing.assert_allclose(tf.convert_to_tensor(variables[name][slot]), value,
                                           rtol=2e-5, atol=1e-6, err_msg=f"{name}/{slot}")
        np.testing.assert_allclose(model.bias.numpy(), self.bias, rtol=1e-5, atol=1e-6)


def built_model(samples):
    model = SumModel()
    model(as_tensors(samples[0], samples[1], 0, BATCH))
    return model


def replay(reference, samples, steps):
    """`reference` after `steps` batches of BATCH rows, the model's SGD at 0.1."""
    for step in range(steps):
        reference.step(samples, step * BATCH, (step + 1) * BATCH, 0.1)
    return reference

