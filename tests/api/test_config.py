"""TableConfig, FeatureConfig, QuantizationConfig and RowIdInitializer against stock TF 2.21."""

import logging
import math
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2
from tensorflow.python.ops import init_ops_v2

from tf_embedding import config
from tf_embedding.dynamic_vocabulary import DynamicVocabulary

from helpers.errors import error_of

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding


def _assert_same_error(ours, theirs, *args, **kwargs):
    """Both constructors raise the same exception type with the same message."""
    expected = error_of(theirs, *args, **kwargs)
    assert expected is not None
    assert error_of(ours, *args, **kwargs) == expected


# ---------------------------------------------------------------------------------------------
# TableConfig

TABLE_ERRORS = [
    dict(vocabulary_size=0, dim=4),
    dict(vocabulary_size=-3, dim=4),
    dict(vocabulary_size=2.0, dim=4),
    dict(vocabulary_size=np.int64(5), dim=4),
    dict(vocabulary_size="5", dim=4),
    dict(vocabulary_size=5, dim=0),
    dict(vocabulary_size=5, dim=2.0),
    dict(vocabulary_size=5, dim=None),
    dict(vocabulary_size=5, dim=4, initializer="zeros"),
    dict(vocabulary_size=5, dim=4, initializer=1.0),
    dict(vocabulary_size=5, dim=4, combiner="max"),
    dict(vocabulary_size=5, dim=4, combiner="Mean"),
    dict(vocabulary_size=5, dim=4, combiner=None),
    dict(vocabulary_size=5, dim=4, combiner=3),
    dict(vocabulary_size=5, dim=4, name="t", dtype=tf.float64),
    dict(vocabulary_size=5, dim=4, name="t", dtype=tf.int64),
    # Validation order: the first failing check wins.
    dict(vocabulary_size=0, dim=0, initializer=1, combiner="max", dtype=tf.int8),
    dict(vocabulary_size=5, dim=0, initializer=1, combiner="max", dtype=tf.int8),
    dict(vocabulary_size=5, dim=4, initializer=1, combiner="max", dtype=tf.int8),
    dict(vocabulary_size=5, dim=4, combiner="max", dtype=tf.int8),
]


@pytest.mark.parametrize("kwargs", TABLE_ERRORS)
def test_table_config_errors_match_tf(kwargs):
    _assert_same_error(config.TableConfig, stock.TableConfig, **kwargs)


def test_table_config_error_messages():
    with pytest.raises(ValueError, match=re.escape(
            "Argument `vocabulary_size` must be an int and must be >= 1. Received: 0")):
        config.TableConfig(0, 4)
    with pytest.raises(ValueError, match=re.escape(
            "String argument `combiner` must be in ('mean', 'sum', 'sqrtn'). Received: max")):
        config.TableConfig(5, 4, combiner="max")
    with pytest.raises(ValueError, match=re.escape(
            "Argument `combiner` should either be a str or a CustomCombiner. "
            "Received: <class 'NoneType'>")):
        config.TableConfig(5, 4, combiner=None)


def test_table_config_rejects_stock_custom_combiner():
    combiner = stock.CustomCombiner(lambda valency, vectors: vectors[0], max_valency=2)
    with pytest.raises(ValueError, match="CustomCombiner runs only on SparseCore"):
        config.TableConfig(5, 4, combiner=combiner)


def test_table_config_accepts_what_tf_accepts():
    # What TF accepts and tf_embedding refuses (vocabulary_size=True, ...):
    # tests/api/test_argument_misuse.py.
    for kwargs in [dict(vocabulary_size=1, dim=1),
                   dict(vocabulary_size=5, dim=4, dtype=tf.int32),
                   dict(vocabulary_size=5, dim=4, dtype="float32"),
                   dict(vocabulary_size=5, dim=4, optimizer="not validated here")]:
        assert error_of(stock.TableConfig, **kwargs) is None
        assert error_of(config.TableConfig, **kwargs) is None


def test_table_config_attributes():
    initializer = config.RowIdInitializer(3)
    quantization = config.QuantizationConfig(4, -1.0, 1.0)
    layout = sparse_core_layout_pb2.SparseCoreTableLayout(table_name="t")
    table = config.TableConfig(
        10, 3, initializer=initializer, optimizer="opt", combiner="sqrtn", name="t",
        quantization_config=quantization, layout=layout, dtype=tf.int32)
    assert vars(table) == dict(
        vocabulary_size=10, dim=3, initializer=initializer, optimizer="opt", combiner="sqrtn",
        name="t", quantization_config=quantization, layout=layout, dtype=tf.int32)
    assert list(vars(table)) == list(vars(stock.TableConfig(10, 3, name="t")))
    assert table.dynamic is None
    dynamic = DynamicVocabulary(admit_after=3)
    assert vars(config.TableConfig(10, 3, name="t", dynamic=dynamic))["dynamic"] is dynamic


def test_table_config_is_identity_hashed():
    first, second = config.TableConfig(5, 4, name="t"), config.TableConfig(5, 4, name="t")
    assert first != second
    assert len({first: 1, second: 2}) == 2


@pytest.mark.parametrize("dim", [1, 4, 16, 17])
def test_default_initializer(dim):
    table = config.TableConfig(1000, dim, name="t")
    assert isinstance(table.initializer, init_ops_v2.TruncatedNormal)
    assert table.initializer.mean == 0.0
    assert table.initializer.stddev == pytest.approx(1 / math.sqrt(dim))
    values = table.initializer((1000, dim), dtype=tf.float32).numpy()
    assert values.dtype == np.float32
    assert np.all(np.abs(values) <= 2 / math.sqrt(dim) + 1e-6)
    assert values.std() == pytest.approx(0.88 / math.sqrt(dim), rel=0.1)


def test_missing_name_warns(caplog):
    with caplog.at_level(logging.WARNING):
        config.TableConfig(5, 4)
    assert "Name of the table config must be specified for running on SparseCore" in caplog.text


TABLE_REPRS = [
    dict(vocabulary_size=2, dim=4, combiner="sum", name="table"),
    dict(vocabulary_size=2, dim=4),
    dict(vocabulary_size=7, dim=16, initializer=init_ops_v2.TruncatedNormal(0.0, 0.25),
         name="same_as_default"),
    dict(vocabulary_size=7, dim=16, initializer=init_ops_v2.TruncatedNormal(0.0, 0.5),
         name="other_stddev"),
    dict(vocabulary_size=7, dim=16, initializer=init_ops_v2.TruncatedNormal(1.0, 0.25),
         name="other_mean"),
    dict(vocabulary_size=7, dim=4, initializer=init_ops_v2.Zeros(), optimizer="opt",
         name="t", layout=sparse_core_layout_pb2.SparseCoreTableLayout(), dtype=tf.int32),
]


@pytest.mark.parametrize("kwargs", TABLE_REPRS)
def test_table_config_repr_matches_tf(kwargs):
    assert repr(config.TableConfig(**kwargs)) == repr(stock.TableConfig(**kwargs))


def test_table_config_repr_with_quantization():
    ours = config.TableConfig(2, 4, name="t", quantization_config=config.QuantizationConfig(
        10, -1.0, 1.0))
    theirs = stock.TableConfig(2, 4, name="t", quantization_config=stock.QuantizationConfig(
        10, -1.0, 1.0))
    assert repr(ours) == repr(theirs)
    assert repr(ours) == (
        "TableConfig(vocabulary_size=2, dim=4, initializer=None, optimizer=None, "
        "combiner='mean', name='t', quantization_config=QuantizationConfig(num_buckets=10, "
        "lower=-1.0, upper=1.0))")


def test_repr_prints_default_initializer_as_none_only_for_its_dim():
    table = config.TableConfig(2, 4, name="t")
    table.dim = 9
    assert "initializer=<" in repr(table)


# ---------------------------------------------------------------------------------------------
# FeatureConfig

def _tables():
    return config.TableConfig(5, 4, name="t"), stock.TableConfig(5, 4, name="t")


FEATURE_ERRORS = [
    dict(max_sequence_length=-1),
    dict(max_sequence_length=1.0),
    dict(max_sequence_length=None),
    dict(validate_weights_and_indices=1),
    dict(validate_weights_and_indices=None),
    dict(output_shape="bad"),
    # Order: output_shape is converted before validate_weights_and_indices is checked.
    dict(output_shape="bad", validate_weights_and_indices=1),
    dict(max_sequence_length=-1, validate_weights_and_indices=1),
]


@pytest.mark.parametrize("kwargs", FEATURE_ERRORS)
def test_feature_config_errors_match_tf(kwargs):
    ours, theirs = _tables()
    expected = error_of(stock.FeatureConfig, theirs, **kwargs)
    assert expected is not None
    assert error_of(config.FeatureConfig, ours, **kwargs) == expected


def test_feature_config_table_type():
    with pytest.raises(ValueError, match=re.escape(
            "Argument `table` has invalid type <class 'str'>. "
            "Expected `tf.tpu.experimental.embedding.TableConfig`.")):
        config.FeatureConfig("table")
    with pytest.raises(ValueError, match="has invalid type"):
        config.FeatureConfig(stock.TableConfig(5, 4, name="t"))


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(max_sequence_length=3, validate_weights_and_indices=False, name="f"),
    dict(output_shape=[16, 4]),
    dict(output_shape=tf.TensorShape([None, 2])),
])
def test_feature_config_repr_and_attributes_match_tf(kwargs):
    ours, theirs = _tables()
    feature, stock_feature = config.FeatureConfig(ours, **kwargs), stock.FeatureConfig(
        theirs, **kwargs)
    assert repr(feature) == repr(stock_feature)
    assert feature.table is ours
    assert isinstance(feature.output_shape, tf.TensorShape)
    for name in ("max_sequence_length", "validate_weights_and_indices", "output_shape", "name"):
        assert getattr(feature, name) == getattr(stock_feature, name)
    assert list(vars(feature)) == list(vars(stock_feature))


def test_feature_config_default_output_shape_is_unknown_and_falsy():
    feature = config.FeatureConfig(_tables()[0])
    assert feature.output_shape == tf.TensorShape(None)
    assert feature.output_shape.rank is None
    assert not feature.output_shape


# ---------------------------------------------------------------------------------------------
# QuantizationConfig

@pytest.mark.parametrize("num_buckets", [1, 0, -5])
def test_quantization_config_errors_match_tf(num_buckets):
    _assert_same_error(config.QuantizationConfig, stock.QuantizationConfig, num_buckets, -1., 1.)
    with pytest.raises(ValueError, match=re.escape(
            f"num_buckets is {num_buckets}, must be at least 2 for simulated quantization.")):
        config.QuantizationConfig(num_buckets, -1.0, 1.0)


@pytest.mark.parametrize("args", [(10, -1.0, 1.0), (2, 0, 3), (256, -0.5, 0.25)])
def test_quantization_config_repr_and_attributes_match_tf(args):
    ours, theirs = config.QuantizationConfig(*args), stock.QuantizationConfig(*args)
    assert repr(ours) == repr(theirs)
    assert vars(ours) == vars(theirs)


def _numpy_quantize(x, num_buckets, lower, upper):
    """The documented formula, evaluated in float32 like the tensor version."""
    x = np.clip(x.astype(np.float32), np.float32(lower), np.float32(upper))
    quantum = (np.float32(upper) - np.float32(lower)) / np.float32(num_buckets - 1)
    return np.floor((x - np.float32(lower)) / quantum + np.float32(0.5)) * quantum + np.float32(
        lower)


def test_quantize_examples():
    quantization = config.QuantizationConfig(5, -1.0, 1.0)
    values = quantization.quantize(tf.constant([-2.0, -0.3, 0.1, 0.26, 0.75, 3.0]))
    np.testing.assert_array_equal(values.numpy(), [-1.0, -0.5, 0.0, 0.5, 1.0, 1.0])


@settings(max_examples=40, deadline=None)
@given(num_buckets=st.integers(2, 300),
       lower=st.floats(-10, 0, width=32, allow_subnormal=False),
       width=st.floats(0.125, 20, width=32),
       values=st.lists(st.floats(-50, 50, width=32, allow_subnormal=False), min_size=1,
                       max_size=20))
def test_quantize_matches_formula(num_buckets, lower, width, values):
    upper = lower + width
    quantization = config.QuantizationConfig(num_buckets, lower, upper)
    x = np.array(values, np.float32)
    result = quantization.quantize(tf.constant(x)).numpy()
    np.testing.assert_array_equal(result, _numpy_quantize(x, num_buckets, lower, upper))
    levels = np.float32(lower) + np.arange(num_buckets, dtype=np.float32) * (
        (np.float32(upper) - np.float32(lower)) / np.float32(num_buckets - 1))
    distance_to_level = np.min(np.abs(result[:, None] - levels[None, :]), axis=1)
    assert np.all(distance_to_level <= 1e-4 * max(1.0, abs(upper), abs(lower)))


def test_quantize_gradient_is_identity_and_dtype_kept():
    quantization = config.QuantizationConfig(3, 0.0, 1.0)
    for dtype in (tf.float32, tf.float64):
        x = tf.constant([[-1.0, 0.2], [0.7, 4.0]], dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantization.quantize(x)
            loss = tf.reduce_sum(y * tf.constant([[1.0, 2.0], [3.0, 4.0]], dtype))
        assert y.dtype == dtype
        np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), [[1, 2], [3, 4]])


def test_quantize_in_tf_function():
    quantization = config.QuantizationConfig(5, -1.0, 1.0)
    traced = tf.function(quantization.quantize)
    np.testing.assert_array_equal(traced(tf.constant([0.3, -0.8])).numpy(), [0.5, -1.0])


# ---------------------------------------------------------------------------------------------
# RowIdInitializer

@pytest.mark.parametrize("offset", [0, 1, 7])
@pytest.mark.parametrize("shape,dtype", [((4, 3), tf.float32), ((1, 1), tf.int32),
                                         (tf.TensorShape([5, 2]), tf.float64)])
def test_row_id_initializer_matches_tf(offset, shape, dtype):
    ours = config.RowIdInitializer(offset)(shape, dtype=dtype)
    theirs = stock.RowIdInitializer(offset)(shape, dtype=dtype)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    expected = np.arange(offset, offset + shape[0])[:, None] * np.ones(shape)
    np.testing.assert_array_equal(ours.numpy(), expected)


def test_row_id_initializer_default_offset_and_table_use():
    initializer = config.RowIdInitializer()
    assert initializer.offset == 0
    table = config.TableConfig(3, 2, initializer=initializer, name="t")
    np.testing.assert_array_equal(
        table.initializer((3, 2), dtype=tf.float32).numpy(), [[0, 0], [1, 1], [2, 2]])
