"""The DLRM-style ranking model over pooled embeddings and dense inputs.

The dense inputs go through a bottom MLP to a vector of the embedding width; that vector and
the pooled embedding of every feature interact through all pairwise dot products (DLRM's "dot"
interaction); the top MLP reads the bottom vector, the embeddings and the dot products and
returns one logit. The embedding tables live outside the model, in the embedding object.
"""

from typing import Sequence

import keras
import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec


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
                [keras.layers.Dense(units, activation="relu") for units in bottom_mlp]
                + [keras.layers.Dense(embedding_dim, activation="relu")], name="bottom_mlp")
        self.top = keras.Sequential(
            [keras.layers.Dense(units, activation="relu") for units in top_mlp]
            + [keras.layers.Dense(1)], name="top_mlp")
        vectors = len(self._feature_names) + (1 if spec.num_dense else 0)
        rows, cols = zip(*[(i, j) for i in range(vectors) for j in range(i + 1, vectors)]) \
            if vectors > 1 else ((), ())
        self._pairs = tf.constant([i * vectors + j for i, j in zip(rows, cols)], tf.int32)

    def call(self, inputs: tuple[tf.Tensor, dict[str, tf.Tensor]]) -> tf.Tensor:
        """inputs: (dense [B, num_dense], {feature: pooled embedding [B, dim]})."""
        dense, activations = inputs
        vectors = [activations[name] for name in self._feature_names]
        if self._num_dense:
            # Criteo counts span orders of magnitude (and a few are negative); DLRM's log1p of
            # the positive part keeps them in range.
            x = tf.math.log1p(tf.maximum(dense, 0.0)) if self._log1p else dense
            vectors.insert(0, self.bottom(x))
        stacked = tf.stack(vectors, axis=1)
        dots = tf.matmul(stacked, stacked, transpose_b=True)
        dots = tf.gather(tf.reshape(dots, [-1, len(vectors) ** 2]), self._pairs, axis=1)
        features = tf.concat(vectors + [dots], axis=1)
        return self.top(features)[:, 0]
