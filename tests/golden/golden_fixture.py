"""What the golden files were made of, shared by their generator (make_golden.py) and their test
(test_golden_files.py, test_golden_exports.py): the configs, the fixed inputs, and the builders of
each embedding class. Everything here uses the public API only, so a renamed public name breaks
this module, as it would break users' code.

Two tables: `video` 7x3 (sum, rows `i + 1` by `RowIdInitializer(1)`), shared by a weighted ragged
feature and a sparse one, and `user` 5x2 (mean, a constant initializer), looked up by a dense
feature of shape [B]. Every object is trained (or holds slots) with the same Adagrad.

The checkpoints, by kind: "sharded" (TPUEmbedding), "v0" (TPUEmbeddingV0 with its own slots),
"v0_keras_slots" (TPUEmbeddingV0 whose slots are a Keras 3 Adagrad's, the class docstring's
recipe: TF's checkpoint keys for them are `embedding/_variables/<table>/<slot>`, so they restore
only into an object made the same way) and "serving" (TPUEmbeddingForServing).
"""

import pathlib

import numpy as np
import tensorflow as tf

import tf_embedding

DATA = pathlib.Path(__file__).resolve().parent / "data"
BATCH = 4
ADAGRAD = {"learning_rate": 0.5, "initial_accumulator_value": 0.1}
USER_TABLE = np.linspace(-1.0, 1.0, 10).reshape(5, 2).astype(np.float32)

# The golden files, by name: checkpoint prefixes of each class, the Keras file, the export.
CHECKPOINTS = {
    "sharded": "checkpoints/tpu_embedding/ckpt-1",
    "v0": "checkpoints/tpu_embedding_v0/ckpt-1",
    "v0_keras_slots": "checkpoints/tpu_embedding_v0_keras_slots/ckpt-1",
    "serving": "checkpoints/tpu_embedding_for_serving/ckpt-1",
}
KERAS_FILE = "keras/model.keras"
SAVED_MODEL = "serving_saved_model"
JOB_ARCHIVE = "job/job_model.tar.gz"
JOB_CONFIG = "job/job.json"
JOB_PREDICT_INPUT = "job/predict_input.tsv"
JOB_PREDICTIONS = "job/predictions.txt"
EXPECTED = "expected.npz"
MANIFEST = "manifest.json"

# `tf-embedding train`'s flags of the golden job, run with `--config job.json` (JOB_CONFIG, copied
# there) and `--model-dir job_model` in the directory that then holds job_model/.
JOB_FLAGS = ["--steps", "2", "--batch-size", "64", "--eval-examples", "256",
             "--embedding-dim", "4", "--bottom-mlp", "4", "--top-mlp", "4",
             "--checkpoint-every", "2", "--keep-checkpoints", "1", "--progress", "none",
             "--seed", "0"]
JOB_LAYOUT = {
    "tables": [{"name": "user", "vocabulary_size": 50, "combiner": "sum"},
               {"name": "item", "vocabulary_size": 20, "combiner": "mean"}],
    "features": [{"name": "user_id", "table": "user"}, {"name": "item_id", "table": "item"},
                 {"name": "history", "table": "item", "max_ids": 3, "weighted": True}],
    "num_dense": 2,
}


def feature_config():
    """Fresh configs (an embedding object writes its optimizer into its TableConfigs, and a
    TableConfig is refused by a second object)."""
    video = tf_embedding.TableConfig(vocabulary_size=7, dim=3, combiner="sum", name="video",
                                     initializer=tf_embedding.RowIdInitializer(1))
    user = tf_embedding.TableConfig(vocabulary_size=5, dim=2, combiner="mean", name="user",
                                    initializer=tf.constant_initializer(USER_TABLE))
    return {"watched": tf_embedding.FeatureConfig(table=video, name="watched"),
            "favorited": tf_embedding.FeatureConfig(table=video, name="favorited"),
            "friends": tf_embedding.FeatureConfig(table=user, name="friends")}


def adagrad():
    return tf_embedding.Adagrad(**ADAGRAD)


def features(step: int):
    """Batch `step` (0, 1: training; 2: the lookups the tests compare) as
    (features, weights): watched ragged and weighted, favorited sparse, friends dense [B]."""
    watched, watched_weights, favorited, friends = [
        ([[0, 1], [6], [], [2, 2, 5]], [[0.5, 2.0], [1.0], [], [1.0, 0.25, 3.0]],
         [[3, 0], [1, 4], [6, 6], [0, 2]], [0, 4, 2, 2]),
        ([[4], [0, 3, 6], [1], [5, 5]], [[2.0], [1.0, 1.5, 0.5], [0.75], [1.0, 1.0]],
         [[2, 5], [0, 0], [4, 1], [3, 6]], [1, 1, 3, 0]),
        ([[6, 0], [], [3], [1, 2, 4]], [[1.0, 0.5], [], [2.0], [0.5, 1.0, 1.5]],
         [[5, 1], [2, 0], [0, 3], [6, 4]], [4, 3, 0, 2]),
    ][step]
    ragged = tf.ragged.constant(watched, dtype=tf.int64, row_splits_dtype=tf.int64)
    weights = tf.ragged.constant(watched_weights, dtype=tf.float32, row_splits_dtype=tf.int64)
    # from_dense drops the 0s: in `favorited` they are no ids.
    sparse = tf.sparse.from_dense(tf.constant(favorited, tf.int64))
    return ({"watched": ragged, "favorited": sparse, "friends": tf.constant(friends, tf.int64)},
            {"watched": weights, "favorited": None, "friends": None})


def cotangents(step: int) -> dict[str, np.ndarray]:
    """The activations' gradients of training step `step` (loss = sum(activations * these))."""
    rng = np.random.default_rng(100 + step)
    return {"watched": rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32),
            "favorited": rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32),
            "friends": rng.uniform(-1, 1, (BATCH, 2)).astype(np.float32)}


def mirrored(devices: int) -> tf.distribute.Strategy:
    """MirroredStrategy over this many logical CPUs (tests/conftest.py makes 4)."""
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])


def v0_with_keras_slots():
    """(TPUEmbeddingV0, Keras 3 Adagrad): the embedding's slots are the Keras optimizer's
    accumulators (TPUEmbeddingV0's docstring)."""
    slots = {}

    class Adagrad(tf.keras.optimizers.Adagrad):
        def add_variable_from_reference(self, reference_variable, name=None,
                                        initializer="zeros"):
            key = (id(reference_variable), name)
            if key not in slots:
                slots[key] = super().add_variable_from_reference(reference_variable, name,
                                                                 initializer)
            return slots[key]

    keras_optimizer = Adagrad(learning_rate=ADAGRAD["learning_rate"])

    def slot_variable_creation_fn(table, slot_names, slot_initializers):
        return {slot: keras_optimizer.add_variable_from_reference(table, "accumulator",
                                                                  initializer)
                for slot, initializer in zip(slot_names, slot_initializers)}

    embedding = tf_embedding.TPUEmbeddingV0(feature_config(), tf_embedding.Adagrad(
        **ADAGRAD, slot_variable_creation_fn=slot_variable_creation_fn))
    return embedding, keras_optimizer


def make(kind: str, strategy: tf.distribute.Strategy | None = None):
    """An unbuilt embedding object of a checkpoint kind (above; "sharded" under `strategy` if
    given), with fresh configs and Adagrad."""
    if kind == "v0_keras_slots":
        return v0_with_keras_slots()[0]
    classes = {"sharded": tf_embedding.TPUEmbedding, "v0": tf_embedding.TPUEmbeddingV0,
               "serving": tf_embedding.TPUEmbeddingForServing}
    if strategy is None:
        return classes[kind](feature_config(), adagrad())
    with strategy.scope():
        return classes[kind](feature_config(), adagrad())


def lookup(kind: str, embedding, step: int = 2, strategy=None) -> dict[str, np.ndarray]:
    """The activations of batch `step` (every replica of `strategy` given the whole batch; the
    first replica's are returned)."""
    ids, weights = features(step)
    if kind != "sharded":
        return {name: value.numpy() for name, value in embedding(ids, weights).items()}
    if strategy is None:
        embedding.enqueue(ids, weights, training=False)
        return {name: value.numpy() for name, value in embedding.dequeue().items()}

    @tf.function
    def replicated_lookup():
        embedding.enqueue(ids, weights, training=False)
        return strategy.run(embedding.dequeue)

    per_replica = replicated_lookup()
    return {name: strategy.experimental_local_results(value)[0].numpy()
            for name, value in per_replica.items()}


def checkpoint_tensors(prefix: str) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint by key but the object graph and the save counter."""
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in sorted(reader.get_variable_to_shape_map())
            if key not in ("_CHECKPOINTABLE_OBJECT_GRAPH",
                           "save_counter/.ATTRIBUTES/VARIABLE_VALUE")}


# The Keras model of the golden `.keras` file: dense ids of both tables.

KERAS_LENGTH = 2


def keras_features(step: int) -> dict[str, np.ndarray]:
    """Dense [B, KERAS_LENGTH] ids of `watched` (video) and `friends` (user) for batch `step`."""
    rng = np.random.default_rng(200 + step)
    return {"watched": rng.integers(0, 7, (BATCH, KERAS_LENGTH)),
            "friends": rng.integers(0, 5, (BATCH, KERAS_LENGTH))}


def keras_labels(step: int) -> np.ndarray:
    return np.random.default_rng(300 + step).uniform(-1, 1, (BATCH, 1)).astype(np.float32)


def keras_model():
    """A functional Keras 3 model around tf_embedding.keras.TPUEmbedding (named "embedding"),
    compiled with Keras' Adam for its dense layer."""
    from tf_embedding import keras as embedding_keras  # pylint: disable=import-outside-toplevel

    keras = tf.keras
    configs = feature_config()
    layer_features = {"watched": configs["watched"], "friends": configs["friends"]}
    ids = {name: keras.Input(shape=(KERAS_LENGTH,), dtype="int64", name=name)
           for name in layer_features}
    activations = embedding_keras.TPUEmbedding(layer_features, adagrad(), name="embedding")(ids)
    joined = keras.layers.Concatenate()([activations["watched"], activations["friends"]])
    outputs = keras.layers.Dense(1, kernel_initializer="ones", name="score")(joined)
    model = keras.Model(ids, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def keras_state(model) -> dict[str, np.ndarray]:
    """The embedding layer's saved state (tables, slots, counters) by Keras'
    `save_own_variables`, as the `.keras` file stores it."""
    store = {}
    model.get_layer("embedding").save_own_variables(store)
    return {key: np.asarray(value) for key, value in store.items()}
