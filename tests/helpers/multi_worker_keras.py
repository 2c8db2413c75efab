"""The multi-worker Keras tests' training run: each Keras front end (the Keras layer,
`EmbeddingFeatures`, keras-rs's layer) in a model whose embedding part has exact activation
gradients, trained STEPS steps of GLOBAL_BATCH samples by `model.fit` or by a custom loop
(`strategy.run`, `tape.gradient`, the model's optimizer). The tests run it in their own
process (the default strategy, the whole global batch) and on each worker of a loopback
MultiWorkerMirroredStrategy cluster (tests/multi_worker/mw_keras.py), which Keras' distributed
dataset gives samples [rank * B, (rank + 1) * B) of each global batch, B = GLOBAL_BATCH / size.

The model: r = a fixed linear readout of the activations, column by column (elementwise ops,
so each row's value is the same whatever the batch), d = Dense(1) of a dense input, and the
loss 0.5 r^2 + 0.5 d^2 averaged over the global batch. A row's activation gradient is then
r * c / GLOBAL_BATCH on one process and on the workers alike, bit for bit (Keras scales each
worker's mean over its B rows by 1 / size, powers of two), so the tables train to one
process's bits; the Dense layer's gradient is all-reduced and matches to a tolerance.
"""

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

import tf_embedding
from tf_embedding import keras as embedding_keras
from tf_embedding import feature_column as efc

from helpers import feature_column as fc_fixture
from helpers import keras_layer

GLOBAL_BATCH = 8
STEPS = 3
SEED = 5
DENSE_WIDTH = 3


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    """How one front end is made, fed and read out."""
    make_layer: Callable[[int], Any]  # per-replica batch size -> the embedding layer
    embedding_inputs: Callable[[], Any]  # every sample's inputs (STEPS * GLOBAL_BATCH rows)
    activations: Callable[[Any, Any], list]  # (layer, inputs) -> [rows, dim] per feature
    coefficients: list  # the readout's, per feature


def _keras_layer_front_end(dynamic: bool = False) -> FrontEnd:
    """The Keras layer over keras_layer's features (`dynamic`: of dynamic tables)."""
    rng = np.random.default_rng(SEED)
    steps = keras_layer.make_samples(rng, STEPS * GLOBAL_BATCH // keras_layer.BATCH)
    samples = {name: [s for step in steps for s in step[name]] for name in steps[0]}

    def inputs():
        features, weights = keras_layer.inputs(samples, "ragged")
        return features, {"watched": weights["watched"]}  # datasets cannot carry None

    def activations(layer, embedding_inputs):
        features, weights = embedding_inputs
        outputs = layer(features, {name: weights.get(name) for name in features})
        return [outputs[name] for name in sorted(outputs)]

    return FrontEnd(
        lambda batch: embedding_keras.TPUEmbedding(
            keras_layer.make_feature_config(dynamic=dynamic), tf_embedding.Adagrad(0.1)),
        inputs, activations,
        [[0.5, 0.5, -1.0, 1.0], [-1.0, 1.5], [1.0, -0.5, 0.25, 2.0]])


def _feature_column_front_end() -> FrontEnd:
    def make_layer(batch):
        del batch  # the columns fix no batch size
        spec = efc.EmbeddingConfigSpec(
            feature_columns=fc_fixture.columns(),
            optimization_parameters=efc.AdamParameters(0.05), partition_strategy="mod")
        return efc.EmbeddingFeatures(spec)

    return FrontEnd(
        make_layer,
        lambda: fc_fixture.raw_features(np.random.default_rng(SEED), STEPS * GLOBAL_BATCH),
        lambda layer, features: [layer(features)],
        [[0.5, -1.0, 0.25, 2.0, 1.0, -0.5, 0.75, 1.5, -2.0, 0.5, 1.0, -0.25, 0.5, 1.5, -1.0,
          0.25]])


def _keras_rs_front_end() -> FrontEnd:
    # keras-rs needs Python 3.11 and Keras 3: imported only when this front end is used.
    from helpers import keras_rs_models as rs  # pylint: disable=import-outside-toplevel
    from tf_embedding import keras_rs as embedding_rs  # pylint: disable=import-outside-toplevel

    def make_layer(batch):
        tables = {name: rs.table(name, rs.COMBINER[name], make(), seed=index)
                  for index, (name, make) in enumerate(rs.FIT_OPTIMIZERS.items())}
        return embedding_rs.DistributedEmbedding(
            {name: rs.feature(name, tables[rs.TABLE_OF[name]], (batch, 3))
             for name in rs.TABLE_OF})

    features, weights, _ = rs.fit_samples(SEED, STEPS * GLOBAL_BATCH // rs.BATCH, ragged=True)

    def activations(layer, embedding_inputs):
        outputs = layer(*embedding_inputs)
        return [outputs[name] for name in rs.COEFFICIENTS]

    return FrontEnd(make_layer,
                    lambda: rs.as_tensors(features, weights, 0, STEPS * GLOBAL_BATCH),
                    activations, list(rs.COEFFICIENTS.values()))


def front_end(name: str) -> FrontEnd:
    return {"keras": _keras_layer_front_end,
            "keras_dynamic": lambda: _keras_layer_front_end(dynamic=True),
            "feature_column": _feature_column_front_end,
            "keras_rs": _keras_rs_front_end}[name]()


class ReadoutModel(tf.keras.Model):
    """(r, d) per row: the fixed readout of the embedding's activations, and Dense(1) of the
    dense input (see the module docstring)."""

    def __init__(self, case: FrontEnd, per_replica_batch: int):
        super().__init__()
        self.case = case
        self.embedding = case.make_layer(per_replica_batch)
        self.dense = tf.keras.layers.Dense(
            1, kernel_initializer=tf.keras.initializers.Constant([[0.5], [-1.0], [0.25]]),
            bias_initializer=tf.keras.initializers.Constant(0.125))

    def call(self, inputs):
        embedding_inputs, dense_input = inputs
        readout = 0.0
        for values, coefficients in zip(self.case.activations(self.embedding,
                                                              embedding_inputs),
                                        self.case.coefficients):
            for column, coefficient in enumerate(coefficients):
                readout = readout + values[:, column] * coefficient
        return tf.stack([readout, self.dense(dense_input)[:, 0]], axis=1)


def per_sample_loss(labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
    del labels
    return 0.5 * tf.square(outputs[:, 0]) + 0.5 * tf.square(outputs[:, 1])


def dataset(case: FrontEnd) -> tf.data.Dataset:
    """Every step's global batch: ((embedding inputs, dense input), zero labels)."""
    rows = STEPS * GLOBAL_BATCH
    dense = np.random.default_rng(SEED + 1).uniform(-1, 1, (rows, DENSE_WIDTH))
    return tf.data.Dataset.from_tensor_slices(
        ((case.embedding_inputs(), dense.astype(np.float32)),
         np.zeros([rows, 1], np.float32))).batch(GLOBAL_BATCH)


def make_model(strategy: tf.distribute.Strategy, name: str) -> ReadoutModel:
    """`name`'s model and its optimizer (SGD for the Dense layer), compiled under `strategy`."""
    with strategy.scope():
        model = ReadoutModel(front_end(name), GLOBAL_BATCH // strategy.num_replicas_in_sync)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=per_sample_loss)
    return model


def train(strategy: tf.distribute.Strategy, name: str, loop: str) -> ReadoutModel:
    """`name`'s model after STEPS steps of `loop`: "fit" (model.fit) or "custom"."""
    model = make_model(strategy, name)
    data = dataset(model.case)
    if loop == "fit":
        model.fit(data, epochs=1, verbose=0, shuffle=False)
        return model
    iterator = iter(strategy.experimental_distribute_dataset(data))

    @tf.function
    def training_step(iterator):
        def step(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(
                    per_sample_loss(labels, model(features, training=True))) / GLOBAL_BATCH
            gradients = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))

        strategy.run(step, args=(next(iterator),))

    for _ in range(STEPS):
        training_step(iterator)
    return model


def forward_outputs(strategy: tf.distribute.Strategy, model: ReadoutModel) -> np.ndarray:
    """This worker's model outputs (training=False) of its slice of the first global batch:
    what a table's rows give, wherever they lie (a dynamic table's depend on the block
    count)."""
    iterator = iter(strategy.experimental_distribute_dataset(dataset(model.case)))

    @tf.function
    def forward(iterator):
        return strategy.run(lambda inputs: model(inputs[0], training=False),
                            args=(next(iterator),))

    return strategy.experimental_local_results(forward(iterator))[0].numpy()


def model_values(model: ReadoutModel) -> dict[str, np.ndarray]:
    """The Dense layer's weights and, for `EmbeddingFeatures`, its global step."""
    values = {"dense/kernel": np.asarray(model.dense.kernel),
              "dense/bias": np.asarray(model.dense.bias)}
    if hasattr(model.embedding, "global_step"):
        values["global_step"] = np.asarray(model.embedding.global_step)
    return values


def bad_id_inputs(rank: int) -> tuple[Any, Any]:
    """A batch of the Keras layer's features (keras_layer.BATCH samples) in which worker
    `rank`'s first sample of "watched" looks up an id past table "video"."""
    step = keras_layer.make_samples(np.random.default_rng(SEED), 1)[0]
    if rank == 1:
        step["watched"][0] = [(9, 1.0)]
    return keras_layer.inputs(step)
