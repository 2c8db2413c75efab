"""SavedModels exported with our serving object load and run in TensorFlow without tf_embedding."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from tf_embedding import config
from tf_embedding import optimizers
from tf_embedding.for_serving import TPUEmbeddingForServing

pytestmark = pytest.mark.integration

stock = tf.tpu.experimental.embedding

RAGGED_SPEC = tf.RaggedTensorSpec([None, None], tf.int64, 1, tf.int64)
FEATURE_SPECS = {
    "watched": RAGGED_SPEC,
    "recent": RAGGED_SPEC,
    "favorited": tf.SparseTensorSpec([None, None], tf.int64),
    "friends": tf.TensorSpec([None], tf.int64),
}
WEIGHT_SPEC = tf.RaggedTensorSpec([None, None], tf.float32, 1, tf.int64)

# Runs in a fresh, isolated interpreter: loads the SavedModel, evaluates both entry points on the
# inputs in argv[2] and writes the outputs to argv[3].
LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf

    export_dir, inputs_path, outputs_path = sys.argv[1:4]
    data = np.load(inputs_path)
    ragged = lambda prefix, dtype: tf.RaggedTensor.from_row_splits(
        tf.constant(data[prefix + "_values"], dtype), tf.constant(data[prefix + "_splits"]))
    features = {
        "watched": ragged("watched", tf.int64),
        "recent": ragged("recent", tf.int64),
        "favorited": tf.SparseTensor(data["favorited_indices"], data["favorited_values"],
                                     data["favorited_shape"]),
        "friends": tf.constant(data["friends"]),
    }
    loaded = tf.saved_model.load(export_dir)
    outputs = loaded.serve(features, ragged("weights", tf.float32))
    outputs["signature"] = loaded.signatures["serving_default"](
        friends=features["friends"])["output_0"]
    assert "tf_embedding" not in sys.modules, "loading imported tf_embedding"
    np.savez(outputs_path, **{name: value.numpy() for name, value in outputs.items()})
""")


def feature_config(configs):
    """`configs` is tf_embedding.config or stock tf.tpu.experimental.embedding."""
    video = configs.TableConfig(vocabulary_size=8, dim=4, combiner="sum", name="video")
    user = configs.TableConfig(vocabulary_size=16, dim=2, combiner="sqrtn", name="user")
    return {"watched": configs.FeatureConfig(table=video),
            "recent": configs.FeatureConfig(table=video, output_shape=[6]),
            "favorited": configs.FeatureConfig(table=video, max_sequence_length=3),
            "friends": configs.FeatureConfig(table=user)}


class DenseServingModule(tf.Module):
    """A model's serving surface: the embedding object and a dense-input signature."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="friends")])
    def serve_friends(self, friends):
        return self.embedding({"friends": friends})["friends"]


class ServingModule(DenseServingModule):
    """Adds a function taking every input kind, with weights."""

    @tf.function(input_signature=[FEATURE_SPECS, WEIGHT_SPEC])
    def serve(self, features, watched_weights):
        weights = {name: None for name in features}
        weights["watched"] = watched_weights
        return self.embedding(features, weights)


def example_inputs():
    watched = tf.ragged.constant([[0, 1], [], [7, 7, 2]], dtype=tf.int64)
    recent = tf.ragged.constant([[1], [2, 3], [4, 5, 6]], dtype=tf.int64)
    weights = tf.ragged.constant([[0.5, 2.0], [], [1.0, 1.0, 3.0]])
    favorited = tf.sparse.from_dense(tf.constant([[3, 1, 0, 0], [0, 0, 0, 0], [5, 6, 7, 1]],
                                                 tf.int64))
    friends = tf.constant([2, 15, 9], tf.int64)
    features = {"watched": watched, "recent": recent, "favorited": favorited,
                "friends": friends}
    arrays = {"watched_values": watched.flat_values, "watched_splits": watched.row_splits,
              "recent_values": recent.flat_values, "recent_splits": recent.row_splits,
              "weights_values": weights.flat_values, "weights_splits": weights.row_splits,
              "favorited_indices": favorited.indices, "favorited_values": favorited.values,
              "favorited_shape": favorited.dense_shape, "friends": friends}
    return features, weights, {name: np.asarray(value) for name, value in arrays.items()}


def ops_in(export_dir) -> set[str]:
    """Every op type in the SavedModel's graph and function library."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(export_dir, inputs file, expected outputs) of a module whose first call is traced."""
    embedding = TPUEmbeddingForServing(feature_config(config), optimizers.Adagrad(0.1))
    module = ServingModule(embedding)
    features, weights, arrays = example_inputs()
    # The first lookup happens while tracing, which also builds the tables.
    expected = {name: value.numpy()
                for name, value in module.serve(features, weights).items()}
    expected["signature"] = module.serve_friends(features["friends"]).numpy()
    return save_with_inputs(module, arrays, tmp_path_factory.mktemp("export")) + (expected,)


def save_with_inputs(module, arrays, export_dir):
    """Exports `module` to `export_dir` and writes the loader's inputs next to it."""
    tf.saved_model.save(module, str(export_dir),
                        signatures={"serving_default": module.serve_friends})
    inputs_path = export_dir.parent / (export_dir.name + "_inputs.npz")
    np.savez(inputs_path, **arrays)
    return export_dir, inputs_path


def load_in_fresh_python(export_dir, inputs_path, tmp_path):
    """The outputs of the SavedModel, computed by an interpreter that cannot import tf_embedding."""
    outputs_path = tmp_path / "outputs.npz"
    # -I: no PYTHONPATH, no current directory, so the repository is not importable.
    subprocess.run([sys.executable, "-I", "-c", LOADER, str(export_dir), str(inputs_path),
                    str(outputs_path)], check=True, cwd=tmp_path, capture_output=True)
    return np.load(outputs_path)


def test_loads_without_tf_embedding(exported, tmp_path):
    export_dir, inputs_path, expected = exported
    actual = load_in_fresh_python(export_dir, inputs_path, tmp_path)
    assert sorted(actual.files) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


@pytest.mark.slow
def test_jit_compiled_lookups_load_without_tf_embedding(tmp_path_factory, tmp_path):
    """`jit_compile=True` exports its XLA-compiled pooling as a stock function, which plain
    TensorFlow compiles on load; its activations are TF's up to the order of additions."""
    embedding = TPUEmbeddingForServing(feature_config(config), optimizers.Adagrad(0.1),
                                       jit_compile=True)
    reference = TPUEmbeddingForServing(feature_config(config), optimizers.Adagrad(0.1))
    reference.build()
    embedding.build()
    for table, values in zip(embedding.embedding_tables.values(),
                             reference.embedding_tables.values()):
        table.assign(values)
    features, weights, arrays = example_inputs()
    reference_module = ServingModule(reference)
    expected = {name: value.numpy()
                for name, value in reference_module.serve(features, weights).items()}
    expected["signature"] = reference({"friends": features["friends"]})["friends"].numpy()
    module = ServingModule(embedding)
    export_dir, inputs_path = save_with_inputs(module, arrays,
                                               tmp_path_factory.mktemp("export_jit"))
    ops = ops_in(export_dir)
    assert not [op for op in ops if op.startswith("Tfe")]
    assert "SparseSegmentSumWithNumSegments" not in ops  # every pooled feature is compiled
    actual = load_in_fresh_python(export_dir, inputs_path, tmp_path)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def test_graph_uses_stock_ops_only(exported):
    ops = ops_in(exported[0])
    assert not [op for op in ops if op.startswith("Tfe")]
    assert {"ResourceGather", "SparseSlice", "ScatterNd"} <= ops


def test_variables_match_stock_export(tmp_path):
    """The SavedModel's variables are keyed as in a stock TPUEmbeddingForServing export."""

    keys = {}
    for side, embedding in [
            ("ours", TPUEmbeddingForServing(feature_config(config), optimizers.Adagrad(0.1))),
            ("stock", stock.TPUEmbeddingForServing(feature_config(stock), stock.Adagrad(0.1)))]:
        embedding.build()
        # Only the dense entry point: stock cannot trace the ragged `output_shape` feature.
        module = DenseServingModule(embedding)
        tf.saved_model.save(module, str(tmp_path / side),
                            signatures={"serving_default": module.serve_friends})
        keys[side] = tf.train.list_variables(str(tmp_path / side / "variables" / "variables"))
    assert keys["ours"] == keys["stock"]


@pytest.fixture(scope="module")
def exported_replicated(tmp_path_factory):
    """A module holding TPUEmbeddingV0 whose serving functions are first traced by the save."""
    from tf_embedding.replicated import TPUEmbeddingV0  # pylint: disable=import-outside-toplevel
    embedding = TPUEmbeddingV0(feature_config(config), optimizers.Adagrad(0.1))
    features, weights, arrays = example_inputs()
    # Eager lookups run the fused kernels: the reference the stock-op export must reproduce.
    expected = {name: value.numpy() for name, value in embedding(
        features, {"watched": weights, "recent": None, "favorited": None,
                   "friends": None}).items()}
    expected["signature"] = embedding({"friends": features["friends"]})["friends"].numpy()
    return save_with_inputs(ServingModule(embedding), arrays,
                            tmp_path_factory.mktemp("export_v0")) + (expected,)


def test_replicated_export_loads_without_tf_embedding(exported_replicated, tmp_path):
    export_dir, inputs_path, expected = exported_replicated
    assert not [op for op in ops_in(export_dir) if op.startswith("Tfe")]
    actual = load_in_fresh_python(export_dir, inputs_path, tmp_path)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def test_replicated_functions_traced_before_the_save_export_stock_ops(tmp_path):
    """The save traces a module's functions again, in its save context: a serving function that
    already ran the fused kernels is exported with stock ops all the same."""
    from tf_embedding.replicated import TPUEmbeddingV0  # pylint: disable=import-outside-toplevel
    module = ServingModule(TPUEmbeddingV0(feature_config(config), optimizers.Adagrad(0.1)))
    features, weights, _ = example_inputs()
    module.serve(features, weights)
    module.serve_friends(features["friends"])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve_friends})
    assert not [op for op in ops_in(tmp_path) if op.startswith("Tfe")]
