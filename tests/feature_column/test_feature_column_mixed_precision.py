"""EmbeddingFeatures under mixed precision (the process's Keras: Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1), as the Keras layer: `mixed_bfloat16`, global or the layer's `dtype`,
keeps float32 tables and slots and the raw features' dtypes (a weighted column's weights too),
looks up in float32 and returns bfloat16 activations (the float32 ones rounded); a step trains
the tables as the float32 layer does; `mixed_float16` is refused naming where it came from."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import feature_column as efc

from helpers.feature_column import adagrad_spec, raw_features
from helpers.mixed_precision import (POLICY_SOURCES, assert_mixed_float16_refused,
                                     step_on_unit_gradients)

pytestmark = pytest.mark.integration

K = tf.keras


@pytest.fixture(autouse=True)
def float32_policy_after():
    yield
    K.mixed_precision.set_global_policy("float32")


def _one_step(layer, features):
    return step_on_unit_gradients(layer, lambda: layer(features))


def _tables(layer):
    return {name: tf.convert_to_tensor(table).numpy()
            for name, table in layer.embedding_tables.items()}


@pytest.mark.parametrize("how", ["global", "argument"])
def test_mixed_bfloat16_looks_up_in_float32_and_trains_as_float32(how):
    features = raw_features(np.random.default_rng(0))
    reference = efc.EmbeddingFeatures(adagrad_spec())
    expected = _one_step(reference, features).numpy()
    if how == "global":
        K.mixed_precision.set_global_policy("mixed_bfloat16")
        layer = efc.EmbeddingFeatures(adagrad_spec())
    else:
        layer = efc.EmbeddingFeatures(adagrad_spec(), dtype="mixed_bfloat16")
    activations = _one_step(layer, features)
    assert activations.dtype == tf.bfloat16
    np.testing.assert_array_equal(activations.numpy(), tf.cast(expected, tf.bfloat16).numpy())
    tables, reference_tables = _tables(layer), _tables(reference)
    assert {table.dtype for table in tables.values()} == {np.dtype(np.float32)}
    for name, table in reference_tables.items():
        np.testing.assert_array_equal(tables[name], table, err_msg=name)


def test_a_sequence_spec_returns_bfloat16_activations_and_int64_lengths():
    K.mixed_precision.set_global_policy("mixed_bfloat16")
    column = efc.embedding_column(
        tf.feature_column.sequence_categorical_column_with_identity("clicks", 6), 2,
        max_sequence_length=3)
    layer = efc.EmbeddingFeatures(efc.EmbeddingConfigSpec(
        feature_columns=[column], optimization_parameters=efc.AdagradParameters(0.1)))
    ids = tf.sparse.from_dense(tf.constant([[1, 2, 3], [4, 0, 0]], tf.int64))
    activations, lengths = layer({"clicks": ids})
    assert activations.dtype == tf.bfloat16 and lengths.dtype == tf.int64
    np.testing.assert_array_equal(lengths.numpy(), [3, 1])


@pytest.mark.parametrize("how, source", POLICY_SOURCES)
def test_mixed_float16_is_refused_naming_where_it_came_from(how, source):
    assert_mixed_float16_refused(lambda **kwargs: efc.EmbeddingFeatures(adagrad_spec(), **kwargs),
                                 how, source, "EmbeddingFeatures")
