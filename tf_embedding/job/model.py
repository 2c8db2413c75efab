"""The DLRM-style ranking model over pooled embeddings and dense inputs.

The dense inputs go through a bottom MLP to a vector of the embedding width; that vector and
the pooled embedding of every feature interact through all pairwise dot products (DLRM's "dot"
interaction); the top MLP reads the bottom vector, the embeddings and the dot products and
returns one logit. The embedding tables live outside the model, in the embedding object.
"""

from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec


class Dense(keras.layers.Dense):
    """keras.layers.Dense (same variables, same forward ops, which TF fuses into one matmul) with
    the bias's gradient taken as a [1, B] x [B, units] matmul. TF's `BiasAddGrad` sums over the
    batch on the intra-op pool, which the same layer's weight-gradient matmul holds: in the step
    it waited there up to 3 ms, and the layer's input gradient, the step's critical path, queued
    behind it."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        relu = self.activation is keras.activations.relu
        if not (relu or self.activation is keras.activations.linear) or self.bias is None:
            return super().call(inputs)

        @tf.custom_gradient
        def dense(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
            y = tf.nn.bias_add(tf.matmul(x, kernel), bias)
            if relu:
                y = tf.nn.relu(y)

            def gradient(dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
                if relu:
                    dy = tf.raw_ops.ReluGrad(gradients=dy, features=y)
                rows = tf.ones([1, tf.shape(dy)[0]], dy.dtype)
                return (tf.matmul(dy, kernel, transpose_b=True),
                        tf.matmul(x, dy, transpose_a=True), tf.matmul(rows, dy)[0])

            return y, gradient

        return dense(inputs, tf.convert_to_tensor(self.kernel), tf.convert_to_tensor(self.bias))


class RankingModel(keras.Model):
    """logit [B] = top_mlp([bottom, embeddings, pairwise dots])."""

    def __init__(self, spec: DataSpec, embedding_dim: int, bottom_mlp: Sequence[int],
                 top_mlp: Sequence[int], **kwargs):
        super().__init__(**kwargs)
        self._feature_names = sorted(f.name for f in spec.features)
        self._num_dense = spec.num_dense
        self._log1p = spec.dense_transform == "log1p"
        if spec.num_dense:
            self.bottom = keras.Sequential(
                [Dense(units, activation="relu") for units in bottom_mlp]
                + [Dense(embedding_dim, activation="relu")], name="bottom_mlp")
        self.top = keras.Sequential(
            [Dense(units, activation="relu") for units in top_mlp]
            + [Dense(1)], name="top_mlp")
        self._vectors = len(self._feature_names) + (1 if spec.num_dense else 0)
        self._embedding_dim = embedding_dim
        # Picks the pairs i < j out of the flattened [vectors, vectors] dot products: a 0/1
        # matrix, so the product copies them exactly, and its gradient is a small matmul where
        # a gather's is a segment sum on the intra-op pool (which waited there for the
        # matmuls, as BiasAddGrad did).
        pairs = [(i, j) for i in range(self._vectors) for j in range(i + 1, self._vectors)]
        selection = np.zeros([self._vectors ** 2, len(pairs)], np.float32)
        for k, (i, j) in enumerate(pairs):
            selection[i * self._vectors + j, k] = 1.0
        self._pair_selection = tf.constant(selection)

    def call(self, inputs: tuple[tf.Tensor, dict[str, tf.Tensor]]) -> tf.Tensor:
        """inputs: (dense [B, num_dense], {feature: pooled embedding [B, dim]})."""
        dense, activations = inputs
        vectors = [activations[name] for name in self._feature_names]
        if self._num_dense:
            # Criteo counts span orders of magnitude (and a few are negative); DLRM's log1p of
            # the positive part keeps them in range.
            x = tf.math.log1p(tf.maximum(dense, 0.0)) if self._log1p else dense
            vectors.insert(0, self.bottom(x))
        # One copy of the vectors, [B, vectors * dim], read as [B, vectors, dim] for the dots.
        flat = tf.concat(vectors, axis=1)
        stacked = tf.reshape(flat, [-1, self._vectors, self._embedding_dim])
        dots = tf.matmul(stacked, stacked, transpose_b=True)
        dots = tf.matmul(tf.reshape(dots, [-1, self._vectors ** 2]), self._pair_selection)
        return self.top(tf.concat([flat, dots], axis=1))[:, 0]
