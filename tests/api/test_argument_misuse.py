"""A misuse battery: every public argument of the configs and embedding classes, given at least
one value they refuse where it is given (the constructor), with the error type and the words its
message names.

tf_embedding's own checks (`tf_embedding/argument_checks.py`) come after TF's and name the class,
the argument and the value ("<Class>: argument `<name>` is <value>; it must be <accepted>.");
where TF (or keras-rs, Keras) refuses a value itself its message is kept, and the battery checks
its words instead. Before these checks each `ours` value below was accepted silently (a bool as a
size, `jit_compile="no"` switching XLA on, NaN quantization bounds), failed late (at build, at the
first step, in a py_func) or failed with a raw Python error (AttributeError, TypeError of a
comparison). docs/checks.md lists them.
"""

import functools
import inspect
import math
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2
from tensorflow.python.ops import init_ops_v2

import tf_embedding
from tf_embedding import keras as embedding_keras

from helpers.errors import error_of

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding
KERAS_3 = os.environ.get("TF_USE_LEGACY_KERAS") != "1"


def _table(**arguments):
    return tf_embedding.TableConfig(**{"vocabulary_size": 8, "dim": 2, "name": "video",
                                       **arguments})


def _dynamic(**arguments):
    return tf_embedding.DynamicVocabulary(**arguments)


def _feature(**arguments):
    return tf_embedding.FeatureConfig(_table(), **arguments)


def _features():
    return {"watched": _feature()}


def _quantization(num_buckets=4, lower=-1.0, upper=1.0):
    return tf_embedding.QuantizationConfig(num_buckets, lower, upper)


def _sharded(*args, **arguments):
    return tf_embedding.TPUEmbedding(*(args or (_features(), tf_embedding.SGD(0.1))), **arguments)


def _serving(*args, **arguments):
    return tf_embedding.TPUEmbeddingForServing(*(args or (_features(), None)), **arguments)


def _layer(*args, **arguments):
    return embedding_keras.TPUEmbedding(*(args or (_features(), "sgd")), **arguments)


def _keras_rs_features(**table_arguments):
    import keras_rs  # pylint: disable=g-import-not-at-top  (Keras 3 only)
    table = keras_rs.layers.TableConfig(**{"name": "video", "vocabulary_size": 8,
                                           "embedding_dim": 2, "optimizer": "sgd",
                                           **table_arguments})
    return {"watched": keras_rs.layers.FeatureConfig(name="watched", table=table,
                                                     input_shape=(2, 1), output_shape=(2, 2))}


def _keras_rs(feature_configs=None, **arguments):
    from tf_embedding import keras_rs as embedding_rs  # pylint: disable=g-import-not-at-top
    return embedding_rs.DistributedEmbedding(
        _keras_rs_features() if feature_configs is None else feature_configs, **arguments)


class _Case:
    """One refused value: `make()` raises `error`, whose message holds `words`."""

    def __init__(self, owner, argument, make, error, words):
        self.owner, self.argument, self.make, self.error, self.words = (
            owner, argument, make, error, words)

    def __repr__(self):
        return f"{self.owner}.{self.argument}"


def ours(owner, argument, shown, error, make):
    """tf_embedding's check: the message names the class, the argument and the value `shown`
    (the argument's, or the entry of it that is refused)."""
    return _Case(owner, argument, make, error, [f"{owner}: argument `{argument}`", repr(shown)])


def kept(owner, argument, make, error, *words):
    """A value TF (or keras-rs, Keras, an earlier tf_embedding check) refuses itself: its
    message, with these words, is kept."""
    return _Case(owner, argument, make, error, list(words))


def _shape_only(shape):
    return tf.zeros(shape)


NAN, INF = math.nan, math.inf
SGD = tf_embedding.SGD

CASES = [
    # TableConfig
    ours("TableConfig", "vocabulary_size", True, TypeError, lambda: _table(vocabulary_size=True)),
    kept("TableConfig", "vocabulary_size", lambda: _table(vocabulary_size=np.int64(8)),
         ValueError, "Argument `vocabulary_size` must be an int"),
    ours("TableConfig", "dim", True, TypeError, lambda: _table(dim=True)),
    kept("TableConfig", "dim", lambda: _table(dim=0), ValueError, "Argument `dim`"),
    ours("TableConfig", "initializer", tf.keras.initializers.Zeros, TypeError,
         lambda: _table(initializer=tf.keras.initializers.Zeros)),
    ours("TableConfig", "initializer", _shape_only, TypeError,
         lambda: _table(initializer=_shape_only)),
    kept("TableConfig", "initializer", lambda: _table(initializer="zeros"), ValueError,
         "Argument `initializer` must be a callable"),
    ours("TableConfig", "optimizer", SGD, ValueError, lambda: _table(optimizer=SGD)),
    ours("TableConfig", "optimizer", 0.1, ValueError, lambda: _table(optimizer=0.1)),
    kept("TableConfig", "combiner", lambda: _table(combiner="max"), ValueError,
         "String argument `combiner` must be in"),
    ours("TableConfig", "name", 3, TypeError, lambda: _table(name=3)),
    ours("TableConfig", "name", "", ValueError, lambda: _table(name="")),
    ours("TableConfig", "quantization_config", stock.QuantizationConfig(4, -1.0, 1.0), TypeError,
         lambda: _table(quantization_config=stock.QuantizationConfig(4, -1.0, 1.0))),
    ours("TableConfig", "quantization_config", {"num_buckets": 4}, TypeError,
         lambda: _table(quantization_config={"num_buckets": 4})),
    ours("TableConfig", "layout", "div", TypeError, lambda: _table(layout="div")),
    kept("TableConfig", "dtype", lambda: _table(dtype=tf.float64), ValueError,
         "Argument `dtype` must be either float32 or int32"),
    ours("TableConfig", "dynamic", {"admit_after": 2}, TypeError,
         lambda: _table(dynamic={"admit_after": 2})),
    # DynamicVocabulary
    ours("DynamicVocabulary", "admit_after", 0, ValueError, lambda: _dynamic(admit_after=0)),
    ours("DynamicVocabulary", "admit_after", 2.0, TypeError, lambda: _dynamic(admit_after=2.0)),
    ours("DynamicVocabulary", "evict_after_steps", 1, ValueError,
         lambda: _dynamic(evict_after_steps=1)),
    ours("DynamicVocabulary", "evict_every_steps", True, TypeError,
         lambda: _dynamic(evict_every_steps=True)),
    ours("DynamicVocabulary", "refuse_when_full", "yes", TypeError,
         lambda: _dynamic(refuse_when_full="yes")),
    ours("DynamicVocabulary", "candidate_capacity", -5, ValueError,
         lambda: _dynamic(candidate_capacity=-5)),
    ours("DynamicVocabulary", "pool_rows", "8", TypeError, lambda: _dynamic(pool_rows="8")),
    # QuantizationConfig
    ours("QuantizationConfig", "num_buckets", "4", TypeError, lambda: _quantization("4")),
    ours("QuantizationConfig", "num_buckets", None, TypeError, lambda: _quantization(None)),
    ours("QuantizationConfig", "num_buckets", 4.5, TypeError, lambda: _quantization(4.5)),
    kept("QuantizationConfig", "num_buckets", lambda: _quantization(1), ValueError,
         "num_buckets is 1, must be at least 2"),
    ours("QuantizationConfig", "lower", NAN, ValueError, lambda: _quantization(lower=NAN)),
    ours("QuantizationConfig", "lower", -INF, ValueError, lambda: _quantization(lower=-INF)),
    ours("QuantizationConfig", "lower", "0", TypeError, lambda: _quantization(lower="0")),
    ours("QuantizationConfig", "upper", NAN, ValueError, lambda: _quantization(upper=NAN)),
    ours("QuantizationConfig", "upper", None, TypeError, lambda: _quantization(upper=None)),
    ours("QuantizationConfig", "upper", -1.0, ValueError, lambda: _quantization(upper=-1.0)),
    ours("QuantizationConfig", "upper", 0.5, ValueError,
         lambda: _quantization(lower=1.0, upper=0.5)),
    # FeatureConfig
    kept("FeatureConfig", "table", lambda: tf_embedding.FeatureConfig("video"), ValueError,
         "Argument `table` has invalid type"),
    ours("FeatureConfig", "max_sequence_length", True, TypeError,
         lambda: _feature(max_sequence_length=True)),
    kept("FeatureConfig", "max_sequence_length", lambda: _feature(max_sequence_length=-1),
         ValueError, "Argument `max_sequence_length` must be an int and must be >= 0"),
    kept("FeatureConfig", "validate_weights_and_indices",
         lambda: _feature(validate_weights_and_indices=1), ValueError,
         "Argument `validate_weights_and_indices` must be a boolean"),
    ours("FeatureConfig", "output_shape", tf.TensorShape([]), ValueError,
         lambda: _feature(output_shape=[])),
    ours("FeatureConfig", "name", 3, TypeError, lambda: _feature(name=3)),
    ours("FeatureConfig", "name", "", ValueError, lambda: _feature(name="")),
    # TPUEmbedding
    ours("TPUEmbedding", "feature_config", "watched", TypeError,
         lambda: _sharded("watched", SGD(0.1))),
    ours("TPUEmbedding", "feature_config", {}, ValueError, lambda: _sharded({}, SGD(0.1))),
    ours("TPUEmbedding", "feature_config", _table(), TypeError,
         lambda: _sharded({"watched": _table()}, SGD(0.1))),
    ours("TPUEmbedding", "optimizer", SGD, ValueError, lambda: _sharded(_features(), SGD)),
    kept("TPUEmbedding", "optimizer", lambda: _sharded(_features(), 3), ValueError,
         "builtins.int is an unsupported optimizer class"),
    ours("TPUEmbedding", "pipeline_execution_with_tensor_core", "no", TypeError,
         lambda: _sharded(_features(), SGD(0.1), "no")),
    ours("TPUEmbedding", "pipeline_execution_with_tensor_core", None, TypeError,
         lambda: _sharded(_features(), SGD(0.1), None)),
    ours("TPUEmbedding", "table_devices", "/cpu:0", TypeError,
         lambda: _sharded(table_devices="/cpu:0")),
    ours("TPUEmbedding", "table_devices", 3, TypeError, lambda: _sharded(table_devices=[3])),
    ours("TPUEmbedding", "table_devices", "cpu0", ValueError,
         lambda: _sharded(table_devices=["cpu0"])),
    ours("TPUEmbedding", "table_devices", "/cpu:0", TypeError,
         lambda: _sharded(table_devices={"video": "/cpu:0"})),
    ours("TPUEmbedding", "traffic", "rows", TypeError, lambda: _sharded(traffic="rows")),
    kept("TPUEmbedding", "traffic", lambda: _sharded(traffic={"video": "all"}), ValueError,
         "TPUEmbedding: traffic of table 'video' must be 'rows' or 'partial', got 'all'"),
    kept("TPUEmbedding", "partition_strategy", lambda: _sharded(partition_strategy="DIV"),
         ValueError, "TPUEmbedding: Invalid partition_strategy 'DIV': must be 'div'"),
    ours("TPUEmbedding", "sharding_plan", "auto", TypeError,
         lambda: _sharded(sharding_plan="auto")),
    kept("TPUEmbedding", "sharding_plan", lambda: _sharded(sharding_plan={"videos": "row_wise"}),
         ValueError, "TPUEmbedding: sharding_plan names tables that do not exist: ['videos']"),
    ours("TPUEmbedding", "profile_data_directory", 3, TypeError,
         lambda: _sharded(profile_data_directory=3)),
    ours("TPUEmbedding", "collective_timeout_seconds", "10", TypeError,
         lambda: _sharded(collective_timeout_seconds="10")),
    kept("TPUEmbedding", "collective_timeout_seconds",
         lambda: _sharded(collective_timeout_seconds=10), ValueError,
         "TPUEmbedding: collective_timeout_seconds applies under MultiWorkerMirroredStrategy"),
    # TPUEmbeddingV0
    ours("TPUEmbeddingV0", "feature_config", "watched", TypeError,
         lambda: tf_embedding.TPUEmbeddingV0("watched", None)),
    ours("TPUEmbeddingV0", "optimizer", SGD, ValueError,
         lambda: tf_embedding.TPUEmbeddingV0(_features(), SGD)),
    # TPUEmbeddingForServing
    ours("TPUEmbeddingForServing", "feature_config", None, TypeError,
         lambda: _serving(None, None)),
    ours("TPUEmbeddingForServing", "optimizer", SGD, ValueError,
         lambda: _serving(_features(), SGD)),
    ours("TPUEmbeddingForServing", "experimental_sparsecore_restore_info", "x", TypeError,
         lambda: _serving(_features(), None, "x")),
    ours("TPUEmbeddingForServing", "jit_compile", "no", TypeError,
         lambda: _serving(jit_compile="no")),
    # tf_embedding.keras.TPUEmbedding
    ours("keras.TPUEmbedding", "feature_config", {}, ValueError, lambda: _layer({}, "sgd")),
    ours("keras.TPUEmbedding", "optimizer", SGD, ValueError, lambda: _layer(_features(), SGD)),
    kept("keras.TPUEmbedding", "optimizer", lambda: _layer(_features(), "rmsprop"), ValueError,
         "Unknown optimizer name 'rmsprop'"),
    ours("keras.TPUEmbedding", "pipeline_execution_with_tensor_core", "yes", TypeError,
         lambda: _layer(_features(), "sgd", "yes")),
    ours("keras.TPUEmbedding", "batch_size", 0, ValueError, lambda: _layer(batch_size=0)),
    ours("keras.TPUEmbedding", "batch_size", "32", TypeError, lambda: _layer(batch_size="32")),
    ours("keras.TPUEmbedding", "batch_size", 2.5, TypeError, lambda: _layer(batch_size=2.5)),
    ours("keras.TPUEmbedding", "tables_trained_by", "tpu", ValueError,
         lambda: _layer(tables_trained_by="tpu")),
    ours("keras.TPUEmbedding", "sharding_plan", "row_wise", TypeError,
         lambda: _layer(sharding_plan="row_wise")),
    kept("keras.TPUEmbedding", "dtype", lambda: _layer(dtype="float64"), ValueError,
         "dtype policy 'float64'", "tables and slots are float32"),
    # Keras 3's message names `name`; tf_keras raises TypeError "Expected `name` argument ...".
    kept("keras.TPUEmbedding", "name", lambda: _layer(name=3),
         ValueError if KERAS_3 else TypeError, "`name`"),
]

KERAS_RS_CASES = [
    ours("DistributedEmbedding", "feature_configs", "watched", TypeError,
         lambda: _keras_rs("watched")),
    ours("DistributedEmbedding", "feature_configs", {}, ValueError, lambda: _keras_rs({})),
    ours("DistributedEmbedding", "feature_configs", _feature(), TypeError,
         lambda: _keras_rs({"watched": _feature()})),
    kept("DistributedEmbedding", "table_stacking", lambda: _keras_rs(table_stacking="video"),
         ValueError, "Unsupported table stacking for Tensorflow video"),
    kept("DistributedEmbedding", "update_stats", lambda: _keras_rs(update_stats=True),
         ValueError, "`update_stats` cannot be True"),
    kept("DistributedEmbedding", "optimizer",
         lambda: _keras_rs(_keras_rs_features(optimizer=None), optimizer=3), ValueError,
         "Unknown optimizer type <class 'int'>"),
    ours("DistributedEmbedding", "pipeline_execution_with_tensor_core", "no", TypeError,
         lambda: _keras_rs(pipeline_execution_with_tensor_core="no")),
    ours("DistributedEmbedding", "sharding_plan", "row_wise", TypeError,
         lambda: _keras_rs(sharding_plan="row_wise")),
    kept("DistributedEmbedding", "dtype", lambda: _keras_rs(dtype="mixed_float16"), ValueError,
         "DistributedEmbedding", "dtype policy 'mixed_float16'", "loss scaling"),
]


def _check(case):
    with pytest.raises(case.error) as raised:
        case.make()
    message = str(raised.value)
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_refused_value_fails_where_it_is_given_naming_class_and_argument(case):
    _check(case)


@pytest.mark.skipif(not KERAS_3, reason="keras-rs is Keras 3 only")
@pytest.mark.parametrize("case", KERAS_RS_CASES, ids=repr)
def test_keras_rs_refused_values_fail_naming_class_and_argument(case):
    _check(case)


def test_a_profile_directory_that_cannot_be_made_is_refused(tmp_path):
    # Before: accepted; the first sampled training step failed in a py_func (FileNotFoundError).
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    with pytest.raises(ValueError, match=r"TPUEmbedding: argument `profile_data_directory` is "
                                         r".*a_file/profiles'.*a_file is not a directory"):
        _sharded(profile_data_directory=str(blocked / "profiles"))


def _public_arguments(function):
    return {name for name, parameter in inspect.signature(function).parameters.items()
            if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD,
                                                         parameter.VAR_POSITIONAL)}


# Arguments passed through **kwargs that the classes read themselves.
KEYWORD_ARGUMENTS = {
    "keras.TPUEmbedding": {"dtype", "name"},
    "DistributedEmbedding": {"update_stats", "optimizer", "pipeline_execution_with_tensor_core",
                             "dtype"},
}


def test_the_battery_covers_every_public_argument():
    from tf_embedding import keras_rs as embedding_rs  # pylint: disable=g-import-not-at-top
    classes = {
        "TableConfig": tf_embedding.TableConfig, "FeatureConfig": tf_embedding.FeatureConfig,
        "QuantizationConfig": tf_embedding.QuantizationConfig,
        "DynamicVocabulary": tf_embedding.DynamicVocabulary,
        "TPUEmbedding": tf_embedding.TPUEmbedding, "TPUEmbeddingV0": tf_embedding.TPUEmbeddingV0,
        "TPUEmbeddingForServing": tf_embedding.TPUEmbeddingForServing,
        "keras.TPUEmbedding": embedding_keras.TPUEmbedding,
        "DistributedEmbedding": embedding_rs.DistributedEmbedding,
    }
    covered = {(case.owner, case.argument) for case in CASES + KERAS_RS_CASES}
    for owner, cls in classes.items():
        arguments = _public_arguments(cls.__init__) | KEYWORD_ARGUMENTS.get(owner, set())
        assert arguments, owner
        missing = {(owner, argument) for argument in arguments} - covered
        assert not missing


@pytest.mark.parametrize("make", [
    lambda: _table(name=None),  # TF warns
    lambda: _table(vocabulary_size=10 ** 6, dim=64, dtype=tf.int32),
    lambda: _table(dtype="float32"),
    lambda: _table(initializer=tf.keras.initializers.Zeros()),
    lambda: _table(initializer=tf.zeros_initializer()),
    lambda: _table(initializer=init_ops_v2.TruncatedNormal(0.0, 0.5)),
    lambda: _table(initializer=tf_embedding.RowIdInitializer(1)),
    lambda: _table(initializer=lambda shape, dtype: tf.zeros(shape, dtype)),
    lambda: _table(initializer=functools.partial(tf.random.uniform, seed=1)),
    lambda: _table(initializer=tf.random.normal),
    lambda: _table(optimizer="sgd"),
    lambda: _table(optimizer="not validated here"),  # TF's: checked by the embedding object
    lambda: _table(optimizer=tf_embedding.Adagrad(0.1)),
    lambda: _table(optimizer=stock.Adam(0.1)),
    lambda: _table(optimizer=tf.keras.optimizers.Adagrad(0.1)),
    lambda: _table(quantization_config=_quantization(np.int64(4), np.float32(-1), 1)),
    lambda: _table(quantization_config=_quantization(2, 0, 3)),
    lambda: _table(layout=sparse_core_layout_pb2.SparseCoreTableLayout()),
    lambda: _feature(output_shape=[16, 4]),
    lambda: _feature(output_shape=(2,)),
    lambda: _feature(output_shape=[0]),  # an empty batch
    lambda: _feature(output_shape=tf.TensorShape([None, 2])),
    lambda: _feature(output_shape=np.array([2])),
    lambda: _feature(max_sequence_length=3, name="watched"),
    lambda: _sharded(_features(), SGD(0.1), 1),
    lambda: _sharded(_features(), SGD(0.1), np.bool_(True)),
    lambda: _sharded(table_devices=["/cpu:0", "/cpu:0"], partition_strategy="mod"),
    lambda: _sharded(table_devices=("/cpu:0",), traffic={"video": "partial"}),
    lambda: _sharded(table_devices={"video": ["/cpu:0", "/job:localhost/device:CPU:0"]}),
    lambda: _sharded({"watched": stock.FeatureConfig(stock.TableConfig(8, 2, name="video"))},
                     stock.SGD(0.1)),
    lambda: tf_embedding.TPUEmbeddingV0({}, None),  # empty, as TF's serving object takes it
    lambda: _serving({}, None),
    lambda: _serving(_features(), "adam", {"num_tpu_devices": 4}, jit_compile=True),
    lambda: _layer(_features(), "sgd", True, np.int64(32)),
    lambda: _layer(_features(), tf.keras.optimizers.SGD(0.1), batch_size=None),
])
def test_values_tf_and_users_pass_are_accepted(make):
    make()


def test_a_new_profile_directory_and_a_path_object_are_accepted(tmp_path):
    _sharded(profile_data_directory=str(tmp_path / "new" / "profiles"))
    _sharded(profile_data_directory=tmp_path)


@pytest.mark.skipif(not KERAS_3, reason="keras-rs is Keras 3 only")
def test_keras_rs_accepts_its_flags():
    _keras_rs(pipeline_execution_with_tensor_core=True, update_stats=False, table_stacking=None)


@pytest.mark.parametrize("factories, arguments", [
    ((tf_embedding.TableConfig, stock.TableConfig), dict(vocabulary_size=0, dim=True, name=3)),
    ((tf_embedding.TableConfig, stock.TableConfig),
     dict(vocabulary_size=True, dim=2, combiner="max")),
    ((tf_embedding.TableConfig, stock.TableConfig),
     dict(vocabulary_size=np.int64(8), dim=2, name="video")),
    ((tf_embedding.QuantizationConfig, stock.QuantizationConfig),
     dict(num_buckets=1, lower=NAN, upper=NAN)),
    ((tf_embedding.QuantizationConfig, stock.QuantizationConfig),
     dict(num_buckets=-2.5, lower=0.0, upper=1.0)),
])
def test_tf_checks_come_first_with_tf_messages(factories, arguments):
    ours, theirs = factories
    expected = error_of(theirs, **arguments)
    assert expected is not None
    assert error_of(ours, **arguments) == expected


def test_feature_config_checks_come_after_tf_s():
    ours, theirs = _table(), stock.TableConfig(8, 2, name="video")
    for arguments in (dict(max_sequence_length=-1, name=3),
                      dict(output_shape=[], validate_weights_and_indices="yes")):
        expected = error_of(stock.FeatureConfig, theirs, **arguments)
        assert expected is not None
        assert error_of(tf_embedding.FeatureConfig, ours, **arguments) == expected
