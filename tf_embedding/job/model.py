"""The DLRM-style ranking model over pooled embeddings and dense inputs.

The dense inputs go through a bottom MLP to a vector of the embedding width; that vector and
the pooled embedding of every feature interact through all pairwise dot products (DLRM's "dot"
interaction); the top MLP reads the bottom vector, the embeddings and the dot products and
returns one logit. The embedding tables live outside the model, in the embedding object.
With `interaction="cross"` (`--model dcnv2`, MLPerf's DLRM-DCNv2) a low-rank cross network over
the concatenated vectors takes the dot products' place.

With `compute_dtype="bfloat16"` (`--mixed-precision bfloat16`) the MLPs run under Keras'
`mixed_bfloat16` policy (float32 weights, bfloat16 matmuls) and the interaction in bfloat16 too;
the last layer, the logit, stays float32 (Keras' advice for a model's output), so the loss and
the embeddings' activation gradients are float32.
"""

from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec


# The Keras dtype policy of the MLPs' hidden layers for each --mixed-precision compute dtype.
MIXED_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}

# The CPU flags (as Linux's /proc/cpuinfo names them) of the instructions that TensorFlow's
# oneDNN kernels run bfloat16 matmuls with; without them bfloat16 is emulated, slower than float32.
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def bfloat16_instructions(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The `BFLOAT16_FLAGS` this machine's CPU has (none where `cpuinfo` cannot be read)."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in BFLOAT16_FLAGS if flag in flags]


def slow_bfloat16_warning() -> str | None:
    """The one-line warning `--mixed-precision bfloat16` prints on a CPU without bfloat16
    instructions, or None where it has them."""
    if bfloat16_instructions():
        return None
    return (f"tf-embedding: warning: this CPU has no bfloat16 instructions "
            f"({', '.join(BFLOAT16_FLAGS)}): TensorFlow's bfloat16 kernels run slower than "
            "float32 here; --mixed-precision bfloat16 still trains")


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


class CrossNetwork(keras.layers.Layer):
    """DCN-v2's low-rank cross network (Wang et al., "DCN V2", 2021), as MLPerf's DLRM-DCNv2 has
    it (`CROSS_LAYERS` layers of rank `CROSS_RANK`): x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l,
    `*` elementwise, V_l [width -> rank] without a bias, W_l [rank -> width] with one."""

    def __init__(self, width: int, num_layers: int, rank: int, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.down = [Dense(rank, use_bias=False, dtype=policy, name=f"down_{layer}")
                     for layer in range(num_layers)]
        self.up = [Dense(width, dtype=policy, name=f"up_{layer}") for layer in range(num_layers)]

    def call(self, x0: tf.Tensor) -> tf.Tensor:
        x = x0
        for down, up in zip(self.down, self.up):
            x = x0 * up(down(x)) + x
        return x


@tf.custom_gradient
def _concat_with_static_gradients(*vectors: tf.Tensor) -> tf.Tensor:
    """tf.concat(vectors, axis=1), whose gradients keep each vector's static width. Through the
    cross network's elementwise products (of a batch of unknown size) TF's own concat gradient
    loses it, and `apply_gradients` needs the activation gradients' shapes."""
    widths = [int(vector.shape[-1]) for vector in vectors]

    def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return tuple(tf.split(upstream, widths, axis=1))

    return tf.concat(vectors, axis=1), gradient


# MLPerf DLRM-DCNv2's cross network: 3 layers of rank 512.
CROSS_LAYERS, CROSS_RANK = 3, 512


def dense_optimizer(model: str, learning_rate: float) -> keras.optimizers.Optimizer:
    """The MLPs' optimizer for `--model`: Adam for the job's DLRM, Adagrad for DCNv2 (as MLPerf
    trains it; Keras' defaults otherwise)."""
    if model == "dcnv2":
        return keras.optimizers.Adagrad(learning_rate)
    return keras.optimizers.Adam(learning_rate)


class RankingModel(keras.Model):
    """logit [B] = top_mlp([bottom, embeddings, pairwise dots]), or with
    `interaction="cross"` top_mlp(cross_network([bottom, embeddings]))."""

    def __init__(self, spec: DataSpec, embedding_dim: int, bottom_mlp: Sequence[int],
                 top_mlp: Sequence[int], compute_dtype: str = "float32",
                 interaction: str = "dot", **kwargs):
        super().__init__(**kwargs)
        self._feature_names = sorted(f.name for f in spec.features)
        self._num_dense = spec.num_dense
        self._log1p = spec.dense_transform == "log1p"
        self._compute_dtype = tf.as_dtype(compute_dtype)
        policy = MIXED_POLICIES[compute_dtype]
        if spec.num_dense:
            self.bottom = keras.Sequential(
                [Dense(units, activation="relu", dtype=policy) for units in bottom_mlp]
                + [Dense(embedding_dim, activation="relu", dtype=policy)], name="bottom_mlp")
        self.top = keras.Sequential(
            [Dense(units, activation="relu", dtype=policy) for units in top_mlp]
            + [Dense(1, dtype="float32")], name="top_mlp")
        self._vectors = len(self._feature_names) + (1 if spec.num_dense else 0)
        self._embedding_dim = embedding_dim
        self._interaction = interaction
        if interaction == "cross":
            self.cross = CrossNetwork(self._vectors * embedding_dim, CROSS_LAYERS, CROSS_RANK,
                                      dtype=policy, name="cross_network")
            return
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
        vectors = [tf.cast(activations[name], self._compute_dtype)
                   for name in self._feature_names]
        if self._num_dense:
            # Criteo counts span orders of magnitude (and a few are negative); DLRM's log1p of
            # the positive part keeps them in range.
            x = tf.math.log1p(tf.maximum(dense, 0.0)) if self._log1p else dense
            # The bottom MLP's last layer returns the compute dtype.
            vectors.insert(0, self.bottom(x))
        if self._interaction == "cross":
            return self.top(self.cross(_concat_with_static_gradients(*vectors)))[:, 0]
        # One copy of the vectors, [B, vectors * dim], read as [B, vectors, dim] for the dots.
        flat = tf.concat(vectors, axis=1)
        stacked = tf.reshape(flat, [-1, self._vectors, self._embedding_dim])
        dots = tf.matmul(stacked, stacked, transpose_b=True)
        dots = tf.matmul(tf.reshape(dots, [-1, self._vectors ** 2]),
                         tf.cast(self._pair_selection, self._compute_dtype))
        return self.top(tf.concat([flat, dots], axis=1))[:, 0]
