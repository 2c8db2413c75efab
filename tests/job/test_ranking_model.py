"""The main job's ranking model against numpy: the DLRM dot interaction and the MLPs forward,
and the gradients of its Dense layers (whose bias gradient is a matmul of ones) against
keras.layers.Dense's own."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import model as model_lib
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

pytestmark = pytest.mark.unit

SPEC = DataSpec(tables=(TableSpec("t", 10, "sum"),),
                features=(FeatureSpec("b", "t"), FeatureSpec("a", "t"), FeatureSpec("c", "t")),
                num_dense=3)


def _numpy_logits(model: model_lib.RankingModel, dense: np.ndarray,
                  activations: dict[str, np.ndarray]) -> np.ndarray:
    def mlp(layers, x):
        for layer in layers:
            x = x @ layer.kernel.numpy() + layer.bias.numpy()
            if layer.activation is keras.activations.relu:
                x = np.maximum(x, 0.0)
        return x

    vectors = [mlp(model.bottom.layers, dense)] + [activations[n] for n in ("a", "b", "c")]
    dots = [np.sum(vectors[i] * vectors[j], axis=1, keepdims=True)
            for i in range(len(vectors)) for j in range(i + 1, len(vectors))]
    return mlp(model.top.layers, np.concatenate(vectors + dots, axis=1))[:, 0]


def test_logits_are_the_dlrm_formula():
    model = model_lib.RankingModel(SPEC, embedding_dim=4, bottom_mlp=[5], top_mlp=[6])
    rng = np.random.default_rng(0)
    dense = rng.normal(size=[7, 3]).astype(np.float32)
    activations = {n: rng.normal(size=[7, 4]).astype(np.float32) for n in ("a", "b", "c")}
    got = model((tf.constant(dense), {n: tf.constant(v) for n, v in activations.items()}))
    np.testing.assert_allclose(got.numpy(), _numpy_logits(model, dense, activations),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", None])
def test_dense_gradients_are_keras_dense_gradients(activation):
    ours = model_lib.Dense(6, activation=activation)
    theirs = keras.layers.Dense(6, activation=activation)
    x = tf.constant(np.random.default_rng(1).normal(size=[33, 5]), tf.float32)
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    upstream = tf.constant(np.random.default_rng(2).normal(size=[33, 6]), tf.float32)

    def gradients(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * upstream)
        return [y] + tape.gradient(loss, [x, layer.kernel, layer.bias])

    for got, want in zip(gradients(ours), gradients(theirs)):
        # The bias's sum over the batch is a matmul here, so its order may differ.
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
