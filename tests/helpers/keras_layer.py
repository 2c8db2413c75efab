"""The Keras layer's test fixture, shared by tests/keras/ and the parameter-server tests: two tables
(video, shared by two features; user), samples and their inputs of each kind, a numpy replay of
the layer's lookups and training (`NumpyModel`), and a model whose activation gradients are known
in closed form (`SumModel`) with what `model.fit` of it should train (`expected_after_fit`)."""

import numpy as np
import tensorflow as tf

import tf_embedding

from helpers.references import combined_gains, reference_step


F = np.float32
BATCH = 4


def make_feature_config(optimizer=None, configs=tf_embedding, friends_max_sequence_length=0,
                        dynamic=False):
    """video 9x4 (sum) shared by `watched` and `favorited`, user 5x2 (mean) for `friends`, with
    constant initial tables. `configs` is tf_embedding or stock tf.tpu.experimental.embedding;
    `friends_max_sequence_length` > 0 makes `friends` a sequence feature; `dynamic` makes both
    tables dynamic (ids as keys, each admitted at its first training lookup) of 4 times the
    capacity, their constant initial tables as the initializer pools."""
    def table(vocabulary_size, dim, combiner, name, initial):
        initial = initial.reshape(vocabulary_size, dim)
        if not dynamic:
            return configs.TableConfig(
                vocabulary_size=vocabulary_size, dim=dim, combiner=combiner, name=name,
                optimizer=optimizer, initializer=tf.constant_initializer(initial))
        return configs.TableConfig(
            vocabulary_size=4 * vocabulary_size, dim=dim, combiner=combiner, name=name,
            optimizer=optimizer,
            # The initial table's rows repeated: the pool (of its rows) is the initial table.
            initializer=lambda shape, dtype=tf.float32: tf.constant(
                np.resize(initial, shape), dtype),
            dynamic=tf_embedding.DynamicVocabulary(pool_rows=vocabulary_size))

    video = table(9, 4, "sum", "video", np.linspace(-1, 1, 36))
    user = table(5, 2, "mean", "user", np.linspace(1, -1, 10))
    return {"watched": configs.FeatureConfig(video, name="watched"),
            "favorited": configs.FeatureConfig(video, name="favorited"),
            "friends": configs.FeatureConfig(
                user, name="friends", max_sequence_length=friends_max_sequence_length)}


def make_samples(rng, steps):
    """Per step and feature, BATCH samples of (id, weight) pairs."""
    vocab = {"watched": 9, "favorited": 9, "friends": 5}
    return [{name: [[(int(i), float(w)) for i, w in zip(rng.integers(0, v, n),
                                                       rng.uniform(0.5, 2, n))]
                    for n in rng.integers(1, 4, BATCH)]
             for name, v in vocab.items()} for _ in range(steps)]


def ragged(samples, column):
    dtype = tf.float32 if column else tf.int64
    return tf.ragged.constant([[x[column] for x in s] for s in samples], dtype=dtype,
                              row_splits_dtype=tf.int64)


def inputs(step, kind="ragged"):
    """(features, weights): watched weighted, favorited and friends unweighted."""
    features = {name: ragged(samples, 0) for name, samples in step.items()}
    weights = {"watched": ragged(step["watched"], 1), "favorited": None, "friends": None}
    if kind == "sparse":
        features = {name: value.to_sparse() for name, value in features.items()}
        weights["watched"] = weights["watched"].to_sparse()
    return features, weights


def unweighted(step):
    """The samples as the lookup sees them: only `watched` keeps its weights."""
    return {name: [[(i, w if name == "watched" else 1.0) for i, w in s] for s in samples]
            for name, samples in step.items()}


class NumpyModel:
    """The layer's tables and slots in numpy, updated by the TPU rule of `optimizer`."""

    def __init__(self, layer, optimizer):
        self.optimizer = optimizer
        self.tables = {t.name: tf.convert_to_tensor(v).numpy()
                       for t, v in layer.embedding_tables.items()}
        engine_variables = layer.table_variables()
        self.slots = {name: [tf.convert_to_tensor(engine_variables[name][slot]).numpy()
                             for slot in optimizer.slot_names()] for name in self.tables}

    @staticmethod
    def table_of(name):
        return "user" if name == "friends" else "video"

    def rows(self, name, samples):
        combiner = "mean" if name == "friends" else "sum"
        return [list(zip([i for i, _ in s], combined_gains([w for _, w in s], combiner)))
                for s in samples]

    def lookup(self, step):
        step = unweighted(step)
        out = {}
        for name, samples in step.items():
            table = self.tables[self.table_of(name)]
            out[name] = np.array([sum(F(g) * table[i] for i, g in row)
                                  for row in self.rows(name, samples)], F)
        return out

    def apply(self, step, activation_gradients, lr):
        step = unweighted(step)
        for table in self.tables:
            names = [n for n in ("watched", "favorited", "friends") if self.table_of(n) == table]
            rows = [row for n in names for row in self.rows(n, step[n])]
            row_splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
            ids = np.array([i for r in rows for i, _ in r], np.int64)
            gains = np.array([g for r in rows for _, g in r], F)
            grads = np.concatenate([activation_gradients[n] for n in names]).astype(F)
            reference_step(self.optimizer, self.tables[table], self.slots[table],
                           [(row_splits, ids, gains, grads)], lr)

    def check(self, layer):
        engine_variables = layer.table_variables()
        for name, table in self.tables.items():
            np.testing.assert_allclose(
                tf.convert_to_tensor(engine_variables[name]["parameters"]).numpy(), table,
                rtol=1e-5, atol=1e-6, err_msg=name)
            for slot, expected in zip(self.optimizer.slot_names(), self.slots[name]):
                np.testing.assert_allclose(
                    tf.convert_to_tensor(engine_variables[name][slot]).numpy(), expected,
                    rtol=1e-5, atol=1e-6, err_msg=f"{name}/{slot}")


OPTIMIZERS = {
    "sgd": lambda: tf_embedding.SGD(0.1),
    "adagrad": lambda: tf_embedding.Adagrad(0.1, initial_accumulator_value=0.5),
    "adagrad_momentum": lambda: tf_embedding.AdagradMomentum(0.1, momentum=0.5),
    "adam": lambda: tf_embedding.Adam(0.05),
    "ftrl": lambda: tf_embedding.FTRL(0.1, l1_regularization_strength=0.01),
}


class SumModel(tf.keras.Model):
    """y = sum over features of act_f . coefficients_f: no trainable weight of its own, so the
    activation gradients of a squared loss are known in closed form."""

    def __init__(self, layer):
        super().__init__()
        self.embedding = layer
        self.coefficients = {"watched": tf.constant([1.0, -0.5, 0.25, 2.0]),
                             "favorited": tf.constant([0.5, 0.5, -1.0, 1.0]),
                             "friends": tf.constant([-1.0, 1.5])}

    def call(self, inputs):
        features, weights = inputs
        # Datasets cannot carry None: unweighted features are absent from `weights`.
        activations = self.embedding(features, {n: weights.get(n) for n in features})
        return tf.add_n([tf.reduce_sum(activations[n] * self.coefficients[n], axis=1)
                         for n in self.coefficients])[:, None]


def fit_dataset(steps, labels, kind):
    features, weights = inputs({n: [s for step in steps for s in step[n]] for n in steps[0]},
                               kind)
    weights = {n: w for n, w in weights.items() if w is not None}
    return tf.data.Dataset.from_tensor_slices(((features, weights), labels)).batch(BATCH)


def expected_after_fit(layer, optimizer, steps, labels, model):
    """Replays fit in numpy: MSE loss, gradient 2 (y - label) c_f / B per activation row."""
    reference = NumpyModel(layer, optimizer)
    coefficients = {n: c.numpy() for n, c in model.coefficients.items()}
    for index, step in enumerate(steps):
        activations = reference.lookup(step)
        y = sum(activations[n] @ coefficients[n] for n in coefficients)
        residual = 2 * (y - labels[index * BATCH:(index + 1) * BATCH, 0]) / BATCH
        reference.apply(step, {n: residual[:, None] * coefficients[n][None, :]
                               for n in coefficients}, 0.1)
    return reference
