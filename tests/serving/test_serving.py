"""TPUEmbeddingForServing and serving_embedding_lookup against stock TF 2.21 as the oracle.

The differential test builds the same random configuration twice, with tf_embedding's configs and
with stock `tf.tpu.experimental.embedding` configs, gives both objects identical table values, and
requires identical activations. Error tests require stock's exception type and message.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import config
from tf_embedding import optimizers
from tf_embedding.for_serving import TPUEmbeddingForServing, serving_embedding_lookup

from helpers.differential import make_pair, random_case, random_inputs
from helpers.differential import trace as trace_with_unknown_batch

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding

NUM_CASES = 120
# Every GRAPH_EVERY-th case is also traced in a tf.function with an unknown batch size.
GRAPH_EVERY = 4


@pytest.mark.slow
def test_random_configurations_match_stock():
    rng = np.random.default_rng(20240521)
    for index in range(NUM_CASES):
        case = random_case(rng)
        ours, theirs = make_pair(TPUEmbeddingForServing, case, rng)
        ids, weights = random_inputs(rng, case)

        expected = theirs(ids, weights)
        actual = ours(ids, weights)
        context = f"case {index}: {case}"
        # Ragged and weighted pooled features are summed in another order than TF's
        # (`for_serving._pooled`): equal up to an ulp or so.
        tf.nest.map_structure(
            lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6,
                                                    err_msg=context), actual, expected)

        if index % GRAPH_EVERY == 0:
            # Graph optimizations may reorder float sums, hence a tolerance of an ulp or so.
            traced = trace_with_unknown_batch(ours, ids, weights)
            tf.nest.map_structure(
                lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6,
                                                        err_msg=context),
                traced, expected)


@pytest.mark.slow
def test_random_configurations_with_jit_compile_match_stock():
    """The XLA-compiled pooling gives stock's activations up to the order of its additions."""
    rng = np.random.default_rng(20261125)
    compiled_class = functools.partial(TPUEmbeddingForServing, jit_compile=True)
    for index in range(NUM_CASES // 3):
        case = random_case(rng)
        ours, theirs = make_pair(compiled_class, case, rng)
        ids, weights = random_inputs(rng, case)
        expected = theirs(ids, weights)
        context = f"case {index}: {case}"
        for actual in [ours(ids, weights), trace_with_unknown_batch(ours, ids, weights)]:
            tf.nest.map_structure(
                lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6,
                                                        err_msg=context),
                actual, expected)


def ragged_case(combiner: str = "sum", **feature_kwargs):
    """One video table (row i = [i+1, i+1]) and one feature, built both ways."""

    def build(module):
        table = module.TableConfig(vocabulary_size=8, dim=2, combiner=combiner, name="video",
                                   initializer=module.RowIdInitializer(offset=1))
        return module.FeatureConfig(table=table, **feature_kwargs)

    return build(config), build(stock)


def assert_same_error(call_ours, call_stock):
    with pytest.raises(Exception) as expected:
        call_stock()
    with pytest.raises(type(expected.value)) as actual:
        call_ours()
    assert str(actual.value) == str(expected.value)


RAGGED = tf.ragged.constant([[0, 1], [], [3]], dtype=tf.int64)
SPARSE = tf.sparse.from_dense(tf.constant([[1, 2], [0, 3], [4, 0]], tf.int64))
DENSE = tf.constant([1, 2, 3], tf.int64)


@pytest.mark.parametrize("name, feature_kwargs, inputs, weights", [
    ("not a subset", {}, {"other": DENSE}, None),
    ("weights structure", {}, {"f": RAGGED}, {"g": RAGGED}),
    ("weight on dense", {}, {"f": DENSE}, {"f": DENSE}),
    ("weight type", {}, {"f": SPARSE}, {"f": tf.cast(RAGGED, tf.float32)}),
    ("weight on sequence", {"max_sequence_length": 2}, {"f": SPARSE},
     {"f": tf.sparse.map_values(tf.cast, SPARSE, tf.float32)}),
    ("dense sequence", {"max_sequence_length": 2}, {"f": DENSE}, None),
    ("ragged rank 3", {}, {"f": tf.ragged.constant([[[1]], [[2, 3]]], dtype=tf.int64)}, None),
    ("output_shape factor", {"output_shape": [2]}, {"f": RAGGED}, None),
    ("not a tensor", {}, {"f": np.array([1, 2])}, None),
    ("list input", {}, {"f": [1, 2]}, None),
])
def test_error_messages_match_stock(name, feature_kwargs, inputs, weights):
    del name
    ours_feature, stock_feature = ragged_case(**feature_kwargs)
    ours = TPUEmbeddingForServing({"f": ours_feature}, None)
    theirs = stock.TPUEmbeddingForServing({"f": stock_feature}, None)
    assert_same_error(lambda: ours(inputs, weights), lambda: theirs(inputs, weights))


@pytest.mark.parametrize("inputs, validate", [
    (tf.constant([[8]], tf.int64), True),
    (tf.ragged.constant([[1, 8]], dtype=tf.int64), True),
    (tf.sparse.from_dense(tf.constant([[8]], tf.int64)), True),
    (tf.SparseTensor([[0, 0]], tf.constant([-1], tf.int64), [1, 1]), False),
])
def test_bad_ids_raise_invalid_argument_like_stock(inputs, validate):
    ours_feature, stock_feature = ragged_case(validate_weights_and_indices=validate)
    ours = TPUEmbeddingForServing(ours_feature, None)
    theirs = stock.TPUEmbeddingForServing(stock_feature, None)
    assert_same_error(lambda: ours(inputs), lambda: theirs(inputs))


def test_documented_values():
    """The numbers of the reference's lookup table: row i of the table is [i+1, i+1]."""
    weights = tf.ragged.constant([[2.0, 1.0], [], [0.5]])
    expected = {"sum": [[4, 4], [0, 0], [2, 2]],
                "mean": [[4 / 3, 4 / 3], [0, 0], [4, 4]],
                "sqrtn": [[4 / np.sqrt(5), 4 / np.sqrt(5)], [0, 0], [4, 4]]}
    for combiner, values in expected.items():
        ours_feature, _ = ragged_case(combiner=combiner)
        embedding = TPUEmbeddingForServing(ours_feature, None)
        np.testing.assert_allclose(embedding(RAGGED, weights), values, rtol=1e-6)
        np.testing.assert_allclose(embedding(RAGGED.to_sparse(), weights.to_sparse()), values,
                                   rtol=1e-6)


def test_ragged_output_shape_in_tf_function():
    """Stock fails here (a tensor used as a Python bool); the lookup is traced and fixed."""
    ours_feature, stock_feature = ragged_case(output_shape=[3, 2])
    ours = TPUEmbeddingForServing(ours_feature, None)
    theirs = stock.TPUEmbeddingForServing(stock_feature, None)
    expected = theirs(RAGGED)
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(theirs)(RAGGED)
    np.testing.assert_array_equal(tf.function(ours)(RAGGED), expected)
    unknown_batch = tf.function(
        ours, input_signature=[tf.RaggedTensorSpec([None, None], tf.int64, 1, tf.int64)])
    np.testing.assert_array_equal(unknown_batch(RAGGED), expected)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"got output shape \(3, 2\), input data batch size 4"):
        unknown_batch(tf.ragged.constant([[0], [1], [2], [3]], dtype=tf.int64))


def test_first_call_inside_tf_function_builds():
    """Stock fails when an unbuilt object is first called in a tf.function; ours builds eagerly."""
    ours_feature, stock_feature = ragged_case()
    theirs = stock.TPUEmbeddingForServing(stock_feature, None)
    with pytest.raises(ValueError, match="_sparse_core_table_layouts"):
        tf.function(theirs)(RAGGED)
    ours = TPUEmbeddingForServing(ours_feature, None)
    result = tf.function(ours)(RAGGED)
    np.testing.assert_array_equal(result, [[3, 3], [0, 0], [4, 4]])
    assert all(isinstance(v, tf.Variable) for v in ours.variables["video"].values())


def shared_tables(configs, embedding_optimizers):
    video = configs.TableConfig(vocabulary_size=8, dim=4, combiner="sum", name="video")
    user = configs.TableConfig(vocabulary_size=16, dim=2)
    other = configs.TableConfig(vocabulary_size=4, dim=3, optimizer=embedding_optimizers.SGD(0.5))
    return {"b": configs.FeatureConfig(table=user), "a": configs.FeatureConfig(table=video),
            "c": [configs.FeatureConfig(table=other), configs.FeatureConfig(table=video)]}


def test_config_handling_matches_stock():
    ours_features = shared_tables(config, optimizers)
    stock_features = shared_tables(stock, stock)
    ours = TPUEmbeddingForServing(ours_features, optimizers.Adagrad(0.1))
    theirs = stock.TPUEmbeddingForServing(stock_features, stock.Adagrad(0.1))

    def summary(embedding, features):
        tables = [f.table for f in tf.nest.flatten(features)]
        return ([t.name for t in tables], [type(t.optimizer).__name__ for t in tables],
                {name: sorted(v) for name, v in embedding.variables.items()},
                [t.name for t in embedding.embedding_tables],
                [v.name for v in embedding.embedding_tables.values()])

    assert summary(ours, ours_features) == summary(theirs, stock_features)
    # TF writes the default names and the global optimizer into the user's configs.
    assert ours_features["b"].table.name == "table_1"
    assert ours_features["b"].table.optimizer is ours_features["a"].table.optimizer


def test_duplicate_table_names_match_stock():
    def build(module):
        return [module.FeatureConfig(table=module.TableConfig(4, 2, name="same")),
                module.FeatureConfig(table=module.TableConfig(4, 2, name="same"))]

    assert_same_error(lambda: TPUEmbeddingForServing(build(config), None),
                      lambda: stock.TPUEmbeddingForServing(build(stock), None))


def test_optimizer_none_creates_no_slots():
    ours_feature, _ = ragged_case()
    embedding = TPUEmbeddingForServing(ours_feature, None)
    assert list(embedding.variables["video"]) == ["parameters"]
    assert embedding.variables["video"]["parameters"].trainable


def test_optimizer_names_and_keras_optimizers_are_translated():
    import keras  # pylint: disable=g-import-not-at-top
    for optimizer, slots in [("adam", ["momenta", "velocities"]),
                             (keras.optimizers.Adagrad(0.1), ["accumulators"])]:
        ours_feature, _ = ragged_case()
        embedding = TPUEmbeddingForServing(ours_feature, optimizer)
        assert sorted(embedding.variables["video"]) == sorted(slots + ["parameters"])
        assert isinstance(ours_feature.table.optimizer, optimizers._Optimizer)


def test_unsupported_optimizer_is_a_value_error():
    ours_feature, _ = ragged_case()
    with pytest.raises(ValueError, match="unsupported optimizer class"):
        TPUEmbeddingForServing(ours_feature, object())


def test_stock_configs_and_optimizers_are_accepted():
    """Configs and optimizers are duck-typed, so stock TF's objects work unchanged."""
    ours_feature, stock_feature = ragged_case()
    embedding = TPUEmbeddingForServing({"f": stock_feature}, stock.Adagrad(0.1))
    reference = TPUEmbeddingForServing({"f": ours_feature}, optimizers.Adagrad(0.1))
    np.testing.assert_array_equal(embedding({"f": RAGGED})["f"], reference({"f": RAGGED})["f"])
    assert sorted(embedding.variables["video"]) == ["accumulators", "parameters"]


def test_serving_embedding_lookup_on_plain_tensors():
    """`tables` may map configs to tensors; the function needs no embedding object."""
    ours_feature, _ = ragged_case()
    table = tf.reshape(tf.range(16, dtype=tf.float32), [8, 2])
    result = serving_embedding_lookup({"x": RAGGED}, None, {ours_feature.table: table},
                                      {"x": ours_feature, "y": ours_feature})
    np.testing.assert_array_equal(result["x"], [[2, 4], [0, 0], [6, 7]])
