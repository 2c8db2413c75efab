"""pad_ids_to_power_of_two: the padded batch's layout, and that it trains exactly what the
unpadded batch trains, compiled once per bucket (with Adam, which moves every looked-up row, a
zero gradient's too: padding lookups that reached the update would show)."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.feature_inputs.buckets import pad_ids_to_power_of_two
from helpers.xla_compiles import run_counting_compiles

pytestmark = pytest.mark.integration


def ragged(row_lengths, seed, dtype=tf.int64, high=50):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, high, sum(row_lengths)).astype(dtype.as_numpy_dtype)
    return tf.RaggedTensor.from_row_lengths(values, tf.constant(row_lengths, tf.int64))


@pytest.mark.parametrize("row_lengths", [[1], [3, 0, 1], [2, 2], [0, 5, 0, 0], [7, 9, 1]])
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_padding_reaches_a_power_of_two_in_the_last_row(row_lengths, kind):
    ids = ragged(row_lengths, seed=1)
    weights = tf.RaggedTensor.from_row_lengths(
        tf.random.stateless_uniform([sum(row_lengths)], [0, 1]), ids.row_lengths())
    if kind == "sparse":
        ids, weights = ids.to_sparse(), weights.to_sparse()
    padded, padded_weights = pad_ids_to_power_of_two(ids, weights)
    count = sum(row_lengths)
    size = int(tf.size(padded.values))
    assert size >= count and size & (size - 1) == 0 and size < 2 * max(count, 1)
    original = ids if kind == "sparse" else ids.to_sparse()
    indices = padded.indices.numpy()
    np.testing.assert_array_equal(indices[:count], original.indices.numpy())
    np.testing.assert_array_equal(padded.values[:count], original.values)
    # Canonical (row-major) order, padding in the last row past every column.
    assert [tuple(i) for i in indices] == sorted(tuple(i) for i in indices)
    assert (indices[count:, 0] == len(row_lengths) - 1).all()
    assert (indices[count:, 1] >= original.dense_shape[1].numpy()).all()
    assert (padded.values[count:].numpy() == -1).all()
    np.testing.assert_array_equal(padded.dense_shape, [len(row_lengths), 2**31 - 1])
    np.testing.assert_array_equal(padded_weights.indices, padded.indices)
    np.testing.assert_array_equal(padded_weights.values[:count], original_weights(weights))
    assert (padded_weights.values[count:].numpy() == 0).all()


def original_weights(weights):
    return (weights if isinstance(weights, tf.SparseTensor) else weights.to_sparse()).values


def test_a_batch_without_rows_is_not_padded():
    ids = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), tf.zeros([0], tf.int64))
    padded, weights = pad_ids_to_power_of_two(ids)
    assert weights is None
    assert int(tf.size(padded.values)) == 0
    np.testing.assert_array_equal(padded.dense_shape, [0, 2**31 - 1])


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="takes ids as a SparseTensor or a RaggedTensor; got "
                                        "EagerTensor"):
        pad_ids_to_power_of_two(tf.constant([[1, 2]]))
    with pytest.raises(ValueError, match=r"takes ids of rank 2 \(\[batch, None\]\); got shape"):
        pad_ids_to_power_of_two(tf.sparse.from_dense(tf.ones([2, 2, 2], tf.int64)))


# Batches whose id counts vary, trained by the sharded engine with enqueue inside the compiled
# function (so the ids enter it) and Adam, padded; and unpadded, uncompiled. Prints the id
# counts, then whether the tables and slots of both runs are equal.
_PADDED_BATCHES = """
import numpy as np, tensorflow as tf, tf_embedding
from tf_embedding.feature_inputs.buckets import pad_ids_to_power_of_two
init = lambda shape, dtype=tf.float32: tf.random.stateless_uniform(shape, [1, 2])
table = tf.tpu.experimental.embedding.TableConfig(1000, 8, combiner="mean", initializer=init)
features = {name: tf.tpu.experimental.embedding.FeatureConfig(table=table, name=name)
            for name in ("f", "g")}
rng = np.random.default_rng(0)
# 64 rows of 1-5 ids (about 190 ids), then of 4-8 ids (about 380): two buckets, 256 and 512.
lengths = [rng.integers(low, low + 5, 64) for low in [1] * 10 + [4] * 10]
batches = [{name: tf.RaggedTensor.from_row_lengths(rng.integers(0, 1000, n.sum()), n)
            for name in features} for n in lengths]
weights = [{"g": tf.RaggedTensor.from_row_lengths(rng.uniform(0.5, 2, n.sum()).astype("f"), n)}
           for n in lengths]
values = []
for padded in (True, False):
    emb = tf_embedding.TPUEmbedding(features, tf_embedding.Adam(0.1))
    def step(ids, weights):
        emb.enqueue(ids, {"f": None, **weights}, training=True)
        with tf.GradientTape() as tape:
            activations = emb.dequeue()
            tape.watch(activations)
            loss = sum(tf.reduce_sum(tf.square(a)) for a in activations.values())
        emb.apply_gradients(tape.gradient(loss, activations))
    # As the main job's step takes the batches of its tf.data pipeline: shapes of unknown
    # size, so that XLA compiles once per shape of the tensors, not TF once per dense_shape.
    spec = tf.SparseTensorSpec if padded else tf.RaggedTensorSpec
    signature = [{name: spec([64, None], tf.int64) for name in features},
                 {"g": spec([64, None], tf.float32)}]
    step = tf.function(step, jit_compile=padded, input_signature=signature)
    for ids, w in zip(batches, weights):
        if padded:
            ids = {name: pad_ids_to_power_of_two(ids[name], w.get(name)) for name in ids}
            w = {"g": ids["g"][1]}
            ids = {name: pair[0] for name, pair in ids.items()}
        step(ids, w)
    values.append([tf.convert_to_tensor(v).numpy()
                   for slots in emb.table_variables().values() for v in slots.values()])
print(" ".join(str(int(tf.size(ids["f"].values))) for ids in batches))
same = all(np.array_equal(a, b) for a, b in zip(*values))
print("same variables" if same else "DIFFERENT VARIABLES")
"""


@pytest.mark.slow
def test_padded_batches_compile_once_per_power_of_two_and_train_as_unpadded(tmp_path):
    counts, buckets, verdict, compiles = run_counting_compiles(_PADDED_BATCHES, tmp_path)
    assert len(set(counts)) > len(buckets) == 2
    assert compiles == len(buckets)
    assert verdict == "same variables"
