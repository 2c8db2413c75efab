"""A dynamic table served by stock TensorFlow: `TPUEmbeddingForServing` restores a training
checkpoint's key index into a stock hash table (`serving_keys.ServingKeyIndex`), and its
SavedModel maps keys to rows with stock ops, loading where tf_embedding is not installed.

The reference is stock TF's `serving_embedding_lookup` of a fixed table holding the trained rows
plus one zero row, with each key replaced by its row from the checkpoint's records (a key
without one: the zero row, which still counts in a mean's denominator, as in training).
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from serving.test_saved_model import ops_in

pytestmark = pytest.mark.integration

stock = tf.tpu.experimental.embedding

CAPACITY = 16
DIM = 3
BATCH = 4
KEYS = np.random.default_rng(7).integers(0, 2**62, size=40)
INDEX_KEY = "embedding/items..dynamic/index/.ATTRIBUTES/row_records"
TABLE_KEY = "embedding/items/.ATTRIBUTES/VARIABLE_VALUE"


def _table(configs=tf_embedding, capacity=CAPACITY, combiner="mean"):
    """The dynamic table `items` (or, for the reference, a fixed stock table of `capacity`)."""
    dynamic = ({"dynamic": tf_embedding.DynamicVocabulary(admit_after=2, evict_after_steps=2)}
               if configs is tf_embedding else {})
    return configs.TableConfig(
        vocabulary_size=capacity, dim=DIM, name="items", combiner=combiner,
        initializer=tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=3), **dynamic)


def _serving_features(table, configs=tf_embedding):
    """One feature of every input kind the serving lookup takes, all of table `items`."""
    return {"clicked": configs.FeatureConfig(table, name="clicked"),
            "viewed": configs.FeatureConfig(table, name="viewed"),
            "user": configs.FeatureConfig(table, name="user"),
            "history": configs.FeatureConfig(table, name="history", max_sequence_length=3),
            "recent": configs.FeatureConfig(table, name="recent", max_sequence_length=2),
            "slate": configs.FeatureConfig(table, name="slate", output_shape=[BATCH])}


def _keys(rng, count):
    return [int(KEYS[min(int(rng.zipf(1.5)) - 1, len(KEYS) - 1)]) for _ in range(count)]


def _train(tmp_path, blocks=1, partition_strategy="div"):
    """A checkpoint of `items` trained for 10 steps (keys admitted, trained and evicted)."""
    return _trained(tmp_path, blocks, partition_strategy)[0]


def _trained(tmp_path, blocks=1, partition_strategy="div"):
    """(`_train`'s checkpoint, the TPUEmbedding that wrote it, its table config)."""
    table = _table()
    embedding = tf_embedding.TPUEmbedding(
        {"clicked": tf_embedding.FeatureConfig(table, name="clicked")},
        tf_embedding.Adagrad(0.1), table_devices=["/cpu:0"] * blocks if blocks > 1 else None,
        partition_strategy=partition_strategy)

    @tf.function
    def step(clicked):
        embedding.enqueue({"clicked": clicked}, training=True)
        activations = embedding.dequeue()
        embedding.apply_gradients({"clicked": tf.ones_like(activations["clicked"])})

    rng = np.random.default_rng(0)
    for _ in range(10):
        step(tf.ragged.constant([_keys(rng, rng.integers(0, 4)) for _ in range(BATCH)],
                                dtype=tf.int64, ragged_rank=1, inner_shape=()))
    path = tf.train.Checkpoint(embedding=embedding).save(str(tmp_path / "trained"))
    assert 0 < embedding.dynamic_statistics()["items"]["evicted"]
    return path, embedding, table


def _inputs(seed):
    """Inputs of every kind, keys known, evicted and never seen ("weights": the pooled ones')."""
    rng = np.random.default_rng(seed)
    unseen = [2**62 + 5, 0, 2**63 - 1]

    def samples(lengths):
        return [_keys(rng, length) + unseen[:rng.integers(0, 2)] for length in lengths]

    clicked = tf.ragged.constant(samples([2, 0, 3, 1]), dtype=tf.int64)
    viewed = tf.sparse.from_dense(tf.ragged.constant(samples([1, 3, 0, 2]), tf.int64)
                                  .to_tensor(default_value=-1))
    viewed = tf.sparse.retain(viewed, viewed.values >= 0)
    features = {
        "clicked": clicked,
        "viewed": viewed,
        "user": tf.constant(_keys(rng, BATCH - 1) + unseen[:1], tf.int64),
        "history": tf.sparse.retain(viewed, tf.ones_like(viewed.values, tf.bool)),
        "recent": tf.ragged.constant(samples([3, 1, 0, 2]), dtype=tf.int64),
        "slate": tf.ragged.constant(samples([1, 2, 2, 0]), dtype=tf.int64),
    }
    weights = {name: None for name in features}
    weights["clicked"] = tf.ragged.map_flat_values(
        lambda v: tf.random.stateless_uniform(tf.shape(v), [seed, 1], 0.5, 2.0), clicked)
    weights["viewed"] = tf.SparseTensor(viewed.indices, tf.random.stateless_uniform(
        tf.shape(viewed.values), [seed, 2], 0.5, 2.0), viewed.dense_shape)
    return features, weights


def _reference(path, features, weights, combiner):
    """Stock TF's lookup of the trained rows plus a zero row, keys replaced by their rows."""
    records = tf.train.load_variable(path, INDEX_KEY)
    row_of = {int(key): row for row, key in enumerate(records[:, 0]) if key >= 0}
    rows = np.concatenate([tf.train.load_variable(path, TABLE_KEY), np.zeros([1, DIM])])
    table = _table(stock, CAPACITY + 1, combiner)

    def renumbered(keys):
        return tf.constant([row_of.get(int(key), CAPACITY) for key in keys.numpy().ravel()],
                           tf.int64)

    def mapped(value):
        if isinstance(value, tf.SparseTensor):
            return tf.SparseTensor(value.indices, renumbered(value.values), value.dense_shape)
        if isinstance(value, tf.RaggedTensor):
            return value.with_flat_values(renumbered(value.flat_values))
        return tf.reshape(renumbered(value), value.shape)

    return stock.serving_embedding_lookup(
        {name: mapped(value) for name, value in features.items()}, weights,
        {table: tf.Variable(rows, dtype=tf.float32)}, _serving_features(table, stock))


def _assert_close(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(np.asarray(actual[name]), value, rtol=1e-6, atol=1e-7,
                                   err_msg=name)


@pytest.mark.parametrize("blocks, partition_strategy", [(1, "div"), (2, "div"), (2, "mod")])
@pytest.mark.parametrize("combiner", ["mean", "sum", "sqrtn"])
def test_serving_restores_the_keys_and_looks_up_every_input_kind(tmp_path, blocks,
                                                                 partition_strategy, combiner):
    path = _train(tmp_path, blocks, partition_strategy)
    serving = tf_embedding.TPUEmbeddingForServing(
        _serving_features(_table(combiner=combiner)), None)
    tf.train.Checkpoint(embedding=serving).restore(path)
    for seed in range(3):
        features, weights = _inputs(seed)
        _assert_close(serving(features, weights), _reference(path, features, weights, combiner))


def test_a_training_embeddings_tables_look_up_by_its_live_index(tmp_path):
    """`serving_embedding_lookup` of a training `TPUEmbedding`'s tables with its
    `serving_key_indexes()`: its index read as an evaluation reads it."""
    path, embedding, table = _trained(tmp_path)
    features, weights = _inputs(seed=4)
    before = embedding.dynamic_statistics()
    activations = tf_embedding.serving_embedding_lookup(
        features, weights, {table: embedding.table_variables()["items"]["parameters"]},
        _serving_features(table), key_indexes=embedding.serving_key_indexes())
    _assert_close(activations, _reference(path, features, weights, "mean"))
    assert embedding.dynamic_statistics() == before


def test_unknown_keys_read_zeros_and_count_in_a_mean(tmp_path):
    """(Restored after build: the key map is replaced in place.)"""
    path = _train(tmp_path)
    records = tf.train.load_variable(path, INDEX_KEY)
    known = int(records[records[:, 0] >= 0][0, 0])
    row = tf.train.load_variable(path, TABLE_KEY)[records[:, 0].tolist().index(known)]
    table = _table()
    serving = tf_embedding.TPUEmbeddingForServing(
        {"clicked": tf_embedding.FeatureConfig(table, name="clicked")}, None)
    serving.build()
    tf.train.Checkpoint(embedding=serving).restore(path)
    activations = serving({"clicked": tf.ragged.constant([[known, 2**62 + 1], [5, 2**62 + 1]],
                                                         tf.int64)})["clicked"].numpy()
    np.testing.assert_allclose(activations, [row / 2, np.zeros(DIM)], rtol=1e-6)


def test_a_serving_checkpoint_writes_the_keys_it_read(tmp_path):
    """Restored and saved again, the index is the training checkpoint's, and a training
    TPUEmbedding continues from it."""
    path = _train(tmp_path)
    serving = tf_embedding.TPUEmbeddingForServing(_serving_features(_table()), None)
    tf.train.Checkpoint(embedding=serving).restore(path)
    serving.build()
    saved = tf.train.Checkpoint(embedding=serving).save(str(tmp_path / "serving"))
    for key in (INDEX_KEY, TABLE_KEY, "embedding/items..dynamic/index/.ATTRIBUTES/stats"):
        np.testing.assert_array_equal(tf.train.load_variable(saved, key),
                                      tf.train.load_variable(path, key), err_msg=key)
    training = tf_embedding.TPUEmbedding(
        {"clicked": tf_embedding.FeatureConfig(_table(), name="clicked")},
        tf_embedding.Adagrad(0.1))
    tf.train.Checkpoint(embedding=training).restore(saved).expect_partial()
    training.build()
    stats = tf.train.load_variable(path, "embedding/items..dynamic/index/.ATTRIBUTES/stats")
    assert list(training.dynamic_statistics()["items"].values()) == stats.tolist()


def test_a_checkpoint_of_another_capacity_fails_naming_the_table(tmp_path):
    path = _train(tmp_path)
    serving = tf_embedding.TPUEmbeddingForServing(
        _serving_features(_table(capacity=2 * CAPACITY)), None)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table items: a stored dynamic index of shape"):
        tf.train.Checkpoint(embedding=serving).restore(path)
        serving.build()


def test_a_negative_key_fails_naming_the_table_and_feature(tmp_path):
    serving = tf_embedding.TPUEmbeddingForServing(_serving_features(_table()), None)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'items', feature 'user': a dynamic table's keys must be"):
        serving({"user": tf.constant([3, -4], tf.int64)})


def test_a_stock_lookup_without_the_key_index_is_refused():
    table = _table()
    with pytest.raises(ValueError, match="Table items is dynamic.*key_indexes"):
        tf_embedding.serving_embedding_lookup(
            {"user": tf.constant([1], tf.int64)}, None, {table: tf.zeros([CAPACITY, DIM])},
            _serving_features(table))


# Runs in an isolated interpreter that cannot import tf_embedding: loads the SavedModel with
# TF2's loader and with TF1's (as TF Serving does: restore, then the init op), and writes both
# functions' outputs.
LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf

    export_dir, outputs_path = sys.argv[1:3]
    clicked = tf.ragged.constant([[int(k) for k in sys.argv[3].split(",")]], tf.int64)
    loaded = tf.saved_model.load(export_dir)
    outputs = {"v2": loaded.signatures["serving_default"](
        clicked_values=clicked.values, clicked_splits=clicked.row_splits)["output_0"].numpy()}
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta_graph.signature_def["serving_default"]
        outputs["v1"] = session.run(signature.outputs["output_0"].name, {
            signature.inputs["clicked_values"].name: clicked.values.numpy(),
            signature.inputs["clicked_splits"].name: clicked.row_splits.numpy()})
    assert "tf_embedding" not in sys.modules, "loading imported tf_embedding"
    np.savez(outputs_path, **outputs)
""")


class _Served(tf.Module):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="clicked_values"),
                                  tf.TensorSpec([None], tf.int64, name="clicked_splits")])
    def serve(self, clicked_values, clicked_splits):
        return self.embedding({"clicked": tf.RaggedTensor.from_row_splits(
            clicked_values, clicked_splits)})["clicked"]


@pytest.mark.slow
def test_the_saved_model_loads_and_serves_without_tf_embedding(tmp_path):
    path = _train(tmp_path)
    serving = tf_embedding.TPUEmbeddingForServing(
        {"clicked": tf_embedding.FeatureConfig(_table(), name="clicked")}, None)
    tf.train.Checkpoint(embedding=serving).restore(path)
    module = _Served(serving)
    export_dir = tmp_path / "export"
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})
    assert not [op for op in ops_in(export_dir) if op.startswith("Tfe")]
    keys = [int(key) for key in tf.train.load_variable(path, INDEX_KEY)[:, 0] if key >= 0]
    keys += [2**62 + 3]
    expected = module.serve(tf.constant(keys, tf.int64),
                            tf.constant([0, len(keys)], tf.int64)).numpy()
    subprocess.run([sys.executable, "-I", "-c", LOADER, str(export_dir),
                    str(tmp_path / "outputs.npz"), ",".join(map(str, keys))],
                   check=True, cwd=tmp_path, capture_output=True)
    outputs = np.load(tmp_path / "outputs.npz")
    for loader in ("v1", "v2"):
        np.testing.assert_array_equal(outputs[loader], expected, err_msg=loader)


@pytest.mark.parametrize("inputs, feature, message", [
    (tf.sparse.from_dense(tf.ones([2, 2, 2], tf.int64)), {}, "SparseTensor of rank 3"),
], ids=["rank-3 sparse"])
def test_an_input_kind_the_keyed_lookup_does_not_take_is_named(inputs, feature, message):
    table = _table()
    serving = tf_embedding.TPUEmbeddingForServing(
        {"f": tf_embedding.FeatureConfig(table, name="f", **feature)}, None)
    with pytest.raises(ValueError, match=rf"Table items is dynamic.*feature 'f' is a {message}"):
        serving({"f": inputs})


def test_a_ragged_feature_with_output_shape_and_an_unknown_batch_size_is_named():
    serving = tf_embedding.TPUEmbeddingForServing(
        {"f": tf_embedding.FeatureConfig(_table(), name="f", output_shape=[4])}, None)
    serve = tf.function(lambda ids: serving({"f": ids}), input_signature=[
        tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)])
    with pytest.raises(ValueError, match="Table items is dynamic.*feature 'f' is a ragged input "
                                         "with output_shape whose batch size is unknown"):
        serve.get_concrete_function()
