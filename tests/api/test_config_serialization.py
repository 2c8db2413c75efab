"""tf_embedding.serialization and the optimizers' get_config / from_config: every config kind
as a plain, JSON-ready dict and back to an equal object (Keras 3, or tf_keras when the suite
runs with TF_USE_LEGACY_KERAS=1); what a config cannot hold raises, naming table and argument."""

import collections
import inspect
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2

import tf_embedding
from tf_embedding import optimizers
from tf_embedding import serialization

pytestmark = pytest.mark.unit

K = tf.keras
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
# tf_keras's optimizers evaluate a callable learning rate once, into a variable: the callable is
# gone before any saving, and its config holds that value.
TF_KERAS_CALLABLE = "tf_keras's optimizers keep no callable learning rate"
STOCK = tf.tpu.experimental.embedding


def round_trip(config):
    """Through JSON, as a Keras file holds it."""
    return json.loads(json.dumps(config))


# Non-default common arguments (clipping, weight clipping, decoupled weight decay) for every
# optimizer, and non-default own arguments where TF's checks allow.
COMMON = dict(clip_weight_min=-3.0, clip_weight_max=4.0, weight_decay_factor=0.01,
              multiply_weight_decay_factor_by_learning_rate=True, clipvalue=(-0.5, 2.0))


@pytest.mark.parametrize("name", sorted(optimizers.CLASSES))
def test_every_optimizer_round_trips_to_an_equal_object(name):
    cls = optimizers.CLASSES[name]
    optimizer = cls(learning_rate=0.25, **COMMON)
    config = optimizer.get_config()
    assert list(config) == list(inspect.signature(cls.__init__).parameters)[1:]
    assert config["clipvalue"] == [-0.5, 2.0]
    restored = cls.from_config(round_trip(config))
    assert restored == optimizer
    assert (restored.clip_gradient_min, restored.clip_gradient_max) == (-0.5, 2.0)
    assert serialization.deserialize_optimizer(round_trip(
        serialization.serialize_optimizer(optimizer, "test"))) == optimizer


def test_own_arguments_and_symmetric_clipvalue_round_trip():
    optimizer = tf_embedding.FTRL(0.1, learning_rate_power=-0.25, beta=0.5,
                                  initial_accumulator_value=0.0, allow_zero_accumulator=True,
                                  multiply_linear_by_learning_rate=True, clipvalue=1.5)
    restored = tf_embedding.FTRL.from_config(round_trip(optimizer.get_config()))
    assert restored == optimizer
    assert restored.get_config() == optimizer.get_config()


def test_stock_optimizers_load_as_their_tf_embedding_equals():
    stock = STOCK.Adam(0.5, beta_1=0.8, lazy_adam=False, clipvalue=2.0)
    restored = serialization.deserialize_optimizer(round_trip(
        serialization.serialize_optimizer(stock, "test")))
    assert type(restored) is tf_embedding.Adam
    assert restored == optimizers.from_stock(stock)


def test_names_and_none_are_kept_as_they_are():
    for value in (None, "adagrad"):
        assert serialization.deserialize_optimizer(
            serialization.serialize_optimizer(value, "test")) == value


@pytest.mark.parametrize("make", [
    lambda: K.optimizers.SGD(0.3),
    lambda: K.optimizers.Adagrad(K.optimizers.schedules.ExponentialDecay(0.5, 3, 0.9),
                                 initial_accumulator_value=0.2),
    lambda: K.optimizers.Adam(0.01, beta_1=0.8),
    lambda: K.optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
])
def test_keras_optimizers_round_trip_by_keras_serialization(make):
    optimizer = make()
    restored = serialization.deserialize_optimizer(round_trip(
        serialization.serialize_optimizer(optimizer, "test")))
    assert type(restored) is type(optimizer) and restored is not optimizer
    assert restored.get_config() == optimizer.get_config()


def initializers():
    return {
        "default": None,
        "tf constant": tf.constant_initializer(np.arange(12, dtype=np.float32).reshape(6, 2)),
        "tf random": tf.random_normal_initializer(0.5, 2.0, seed=7),
        "keras": K.initializers.RandomUniform(-2.0, 3.0, seed=5),
        "keras constant": K.initializers.Constant(1.5),
        "row id": tf_embedding.RowIdInitializer(3),
    }


@pytest.mark.parametrize("kind", sorted(initializers()))
def test_table_configs_round_trip_with_every_initializer_kind(kind):
    table = tf_embedding.TableConfig(
        6, 2, initializer=initializers()[kind], optimizer=tf_embedding.Adagrad(0.5),
        combiner="sqrtn", name="user",
        quantization_config=tf_embedding.QuantizationConfig(5, -1.0, 2.0))
    config = round_trip(serialization.serialize_table(table))
    restored = serialization.deserialize_table(config)
    assert serialization.serialize_table(restored) == config
    assert type(restored.initializer) is type(table.initializer)
    for name in ("vocabulary_size", "dim", "combiner", "name", "optimizer", "dtype"):
        assert getattr(restored, name) == getattr(table, name), name
    assert vars(restored.quantization_config) == vars(table.quantization_config)
    if kind not in ("default", "tf random", "keras"):  # seeded ones draw anew per call
        np.testing.assert_array_equal(restored.initializer((6, 2), tf.float32),
                                      table.initializer((6, 2), tf.float32))


def test_quantization_config_and_row_id_initializer_have_configs():
    quantization = tf_embedding.QuantizationConfig(num_buckets=4, lower=-2.0, upper=2.0)
    assert quantization.get_config() == {"num_buckets": 4, "lower": -2.0, "upper": 2.0}
    assert vars(tf_embedding.QuantizationConfig.from_config(
        quantization.get_config())) == vars(quantization)
    assert tf_embedding.RowIdInitializer.from_config(
        tf_embedding.RowIdInitializer(5).get_config()).offset == 5


def test_nested_feature_configs_round_trip_and_share_their_tables_again():
    video = tf_embedding.TableConfig(9, 4, name="video", optimizer=tf_embedding.SGD(0.1))
    user = STOCK.TableConfig(5, 2, name="user", combiner="sum")
    structure = {"sequence": [tf_embedding.FeatureConfig(video, max_sequence_length=3,
                                                         name="watched"),
                              (tf_embedding.FeatureConfig(video, name="favorited"),
                               STOCK.FeatureConfig(user, output_shape=[4], name="friends"))],
                 "single": STOCK.FeatureConfig(user, validate_weights_and_indices=False)}
    config = round_trip(serialization.serialize_features(structure))
    assert [table["config"]["name"] for table in config["tables"]] == ["video", "user"]
    restored = serialization.deserialize_features(config)
    tf.nest.assert_same_structure(restored, structure)
    assert isinstance(restored["sequence"], list) and isinstance(restored["sequence"][1], tuple)
    features = tf.nest.flatten(restored)
    assert all(type(feature) is tf_embedding.FeatureConfig for feature in features)
    assert features[0].table is features[1].table
    assert features[2].table is features[3].table
    for name in ("max_sequence_length", "validate_weights_and_indices", "output_shape", "name"):
        assert [getattr(f, name) for f in features] == [
            getattr(f, name) for f in tf.nest.flatten(structure)]
    assert serialization.serialize_features(restored) == config


def test_a_single_feature_config_round_trips():
    feature = tf_embedding.FeatureConfig(tf_embedding.TableConfig(3, 2, name="t"), name="f")
    restored = serialization.deserialize_features(round_trip(
        serialization.serialize_features(feature)))
    assert type(restored) is tf_embedding.FeatureConfig and restored.name == "f"


def features_of(**table_arguments):
    return {"f": tf_embedding.FeatureConfig(
        tf_embedding.TableConfig(5, 2, name="user", **table_arguments))}


def own_initializer(shape, dtype):
    return tf.zeros(shape, dtype)


Pair = collections.namedtuple("Pair", ["a", "b"])


@pytest.mark.parametrize("make, message", [
    (lambda: features_of(optimizer=tf_embedding.Adagrad(lambda: 0.1)),
     "Table 'user': `optimizer`: the optimizer's `learning_rate` is a Python callable"),
    (lambda: features_of(optimizer=tf_embedding.Adam(
        0.1, slot_variable_creation_fn=lambda table, names, inits: {})),
     "Table 'user': `optimizer`: the optimizer's `slot_variable_creation_fn` is a Python "
     "callable"),
    pytest.param(
        lambda: features_of(optimizer=K.optimizers.Adagrad(lambda: 0.1)),
        "Table 'user': `optimizer`: the Keras optimizer's `learning_rate` is a Python callable",
        marks=pytest.mark.skipif(LEGACY, reason=TF_KERAS_CALLABLE)),
    (lambda: features_of(initializer=own_initializer),
     "Table 'user': `initializer` is <function own_initializer"),
    (lambda: features_of(layout=sparse_core_layout_pb2.SparseCoreTableLayout()),
     "Table 'user': `layout` \\(a SparseCore layout\\) cannot be saved"),
    (lambda: {1: features_of()["f"]}, "keys must be strings"),
    (lambda: Pair(features_of()["f"], features_of()["f"]),
     "holds Pair\\(a=FeatureConfig.*FeatureConfigs nested in dicts, lists and tuples only"),
])
def test_what_a_config_cannot_hold_raises_naming_table_and_argument(make, message):
    with pytest.raises(ValueError, match=message):
        serialization.serialize_features(make())
