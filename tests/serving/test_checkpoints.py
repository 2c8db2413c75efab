"""Checkpoint compatibility of TPUEmbeddingForServing with stock TF 2.21, in both directions.

Stock objects use stock configs and optimizers; ours use tf_embedding's. Keys, shapes and the whole
object graph must be identical, and a checkpoint written by either side must restore into the
other (before or after build) with identical tables, slots and lookups.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2
from tensorflow.python.tpu import tpu_embedding_v3_utils
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import config
from tf_embedding import optimizers
from tf_embedding.for_serving import TPUEmbeddingForServing

from helpers.checkpoints import FEATURES, OPTIMIZERS, feature_config, object_graph, save
from helpers.checkpoints import randomize, variable_values

pytestmark = pytest.mark.integration

stock = tf.tpu.experimental.embedding


def make(side: str, optimizer_name: str | None, configs=None):
    """An unbuilt serving object of `side` ("ours" or "stock")."""
    if side == "ours":
        configs, embedding_optimizers, cls = configs or config, optimizers, TPUEmbeddingForServing
    else:
        configs, embedding_optimizers, cls = stock, stock, stock.TPUEmbeddingForServing
    optimizer = (None if optimizer_name is None
                 else getattr(embedding_optimizers, optimizer_name)(**OPTIMIZERS[optimizer_name]))
    return cls(feature_config(configs), optimizer)


@pytest.mark.parametrize("optimizer_name", [None] + list(OPTIMIZERS))
def test_keys_and_object_graph_match_stock(optimizer_name, tmp_path):
    paths = {}
    for side in ("ours", "stock"):
        embedding = make(side, optimizer_name)
        embedding.build()
        paths[side] = save(embedding, tmp_path / side)
    assert tf.train.list_variables(paths["ours"]) == tf.train.list_variables(paths["stock"])
    assert object_graph(paths["ours"]) == object_graph(paths["stock"])
    keys = {name for name, _ in tf.train.list_variables(paths["ours"])}
    assert "embedding/video/.ATTRIBUTES/VARIABLE_VALUE" in keys
    if optimizer_name == "Adam":
        assert "embedding/user.Svelocities/.ATTRIBUTES/VARIABLE_VALUE" in keys


@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
@pytest.mark.parametrize("source, target", [("ours", "stock"), ("stock", "ours")])
@pytest.mark.parametrize("restore_before_build", [True, False])
def test_restore_across_implementations(optimizer_name, source, target, restore_before_build,
                                        tmp_path):
    writer = make(source, optimizer_name)
    expected_values = randomize(writer, seed=len(optimizer_name))
    expected_lookup = writer(FEATURES)
    path = save(writer, tmp_path)

    reader = make(target, optimizer_name)
    if not restore_before_build:
        reader.build()
    status = tf.train.Checkpoint(embedding=reader).restore(path)
    if restore_before_build and target == "ours":
        # Our first call may happen inside a tf.function: variables are still created eagerly,
        # from the checkpoint's values.
        lookup = tf.function(reader)(FEATURES)
    else:
        lookup = reader(FEATURES)
    status.assert_consumed()

    actual_values = variable_values(reader)
    assert actual_values.keys() == expected_values.keys()
    for name, value in expected_values.items():
        np.testing.assert_array_equal(actual_values[name], value, err_msg=name)
    tf.nest.map_structure(np.testing.assert_array_equal, lookup, expected_lookup)


def test_restore_before_build_skips_initializers(tmp_path):
    """Restore-on-create: a pending restore supplies initial values, so no initializer runs."""
    writer = make("ours", "Adagrad")
    expected = randomize(writer, seed=1)
    path = save(writer, tmp_path)

    def failing_initializer(shape, dtype=None):
        raise AssertionError("initializer called despite a pending restore")

    features = feature_config(config)
    for feature in features.values():
        feature.table.initializer = failing_initializer
    reader = TPUEmbeddingForServing(features, optimizers.Adagrad(**OPTIMIZERS["Adagrad"]))
    tf.train.Checkpoint(embedding=reader).restore(path).assert_existing_objects_matched()
    reader.build()
    assert variable_values(reader).keys() == expected.keys()
    np.testing.assert_array_equal(reader.variables["user"]["parameters"],
                                  expected["user:0"])


def test_stock_tpu_embedding_checkpoint_restores(tmp_path):
    """Stock TPUEmbedding (v2, created on CPU) writes the keys the serving object reads."""
    trained = stock.TPUEmbedding(feature_config(stock), stock.Adam(0.1))
    trained.build()
    for table in trained.embedding_tables.values():
        table.assign(tf.random.uniform(table.shape))
    path = save(trained, tmp_path)
    reader = make("ours", "Adam")
    status = tf.train.Checkpoint(embedding=reader).restore(path)
    reader.build()
    status.assert_consumed()
    for table, variable in trained.embedding_tables.items():
        np.testing.assert_array_equal(reader.variables[table.name]["parameters"], variable)


def test_optimizer_none_restores_parameters_only(tmp_path):
    writer = make("stock", "Adam")
    writer.build()
    path = save(writer, tmp_path)
    reader = make("ours", None)
    tf.train.Checkpoint(embedding=reader).restore(path).expect_partial()
    assert {name: list(slots) for name, slots in reader.variables.items()} == {
        "video": ["parameters"], "user": ["parameters"]}
    np.testing.assert_array_equal(reader.variables["video"]["parameters"],
                                  writer.variables["video"]["parameters"])


class _WideVideo:
    """Configs whose video table is 8x6 instead of 8x4."""

    FeatureConfig = config.FeatureConfig

    @staticmethod
    def TableConfig(**kwargs):  # pylint: disable=invalid-name
        if kwargs["name"] == "video":
            kwargs["dim"] = 6
        return config.TableConfig(**kwargs)


def test_shape_mismatch_before_build_names_table_and_shapes(tmp_path):
    writer = make("ours", "Adagrad")
    writer.build()
    path = save(writer, tmp_path)
    reader = make("ours", "Adagrad", configs=_WideVideo)
    tf.train.Checkpoint(embedding=reader).restore(path)
    with pytest.raises(ValueError, match=r"table 'video'.*\(8, 4\).*\(8, 6\)"):
        reader.build()


def test_shape_mismatch_after_build_names_variable_and_shapes(tmp_path):
    writer = make("ours", "Adagrad")
    writer.build()
    path = save(writer, tmp_path)
    reader = make("ours", "Adagrad", configs=_WideVideo)
    reader.build()
    # Checked against the checkpoint before anything is read (TF's own path fails as each
    # variable is assigned).
    with pytest.raises(ValueError, match=r"table 'video'.*shape \(8, 4\).*shape \(8, 6\)"):
        tf.train.Checkpoint(embedding=reader).restore(path)


def test_variable_creation_hook():
    """Subclasses change how variables are made without changing names or tracking."""
    created = []

    class Recording(TPUEmbeddingForServing):

        # private: the test is about this subclass hook (EmbeddingBase's docstring).
        def _create_variable(self, table, name, shape, dtype, initializer, trainable):
            assert name.split("/")[0] == table.name
            created.append((name, shape, dtype, trainable))
            return super()._create_variable(table, name, shape, dtype, initializer, trainable)

    embedding = Recording(feature_config(config), optimizers.Adam(0.1))
    embedding.build()
    assert created == [
        ("video", (8, 4), tf.float32, True),
        ("video/momenta", (8, 4), tf.float32, False),
        ("video/velocities", (8, 4), tf.float32, False),
        ("user", (16, 2), tf.float32, True),
        ("user/momenta", (16, 2), tf.float32, False),
        ("user/velocities", (16, 2), tf.float32, False),
    ]
    assert embedding.variables["video"]["momenta"].name == "video/momenta:0"


def sparse_core_checkpoint(directory, rng) -> tuple[str, dict[str, np.ndarray]]:
    """A checkpoint as TPUEmbeddingV2 writes it: tables `one` (10x4) and `two` (6x4) stacked as
    `one_two` over 4 SparseCores (row r of a table in shard ((r % 4) + rotation) % 4 at position
    offset + r // 4, columns padded to 8), plus an unstacked table `other`.

    Returns the path and the tables' values by name.
    """
    num_sparse_cores, rows_per_shard, padded_dim = 4, 5, 8
    layouts = sparse_core_layout_pb2.SparseCoreTableLayouts()
    stacked = np.zeros((num_sparse_cores * rows_per_shard, padded_dim), np.float32)
    values = {}
    for name, rows, padded_rows, offset, rotation in [("one", 10, 12, 0, 0),
                                                       ("two", 6, 8, 3, 1)]:
        layout = layouts.tables.add(
            table_name=name, stacked_table_name="one_two", num_sparse_cores=num_sparse_cores,
            total_rows_per_sparse_core_shard=rows_per_shard,
            sparse_core_shard_row_offset=offset, sparse_core_shard_rotation=rotation)
        layout.unsharded_shape.extend([rows, 4])
        layout.unsharded_padded_shape.extend([padded_rows, padded_dim])
        values[name] = rng.normal(size=(rows, 4)).astype(np.float32)
        for row in range(rows):
            shard = (row % num_sparse_cores + rotation) % num_sparse_cores
            stacked[shard * rows_per_shard + offset + row // num_sparse_cores, :4] = (
                values[name][row])
    values["other"] = rng.normal(size=(5, 3)).astype(np.float32)

    writer = tf.Module()
    setattr(writer, tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY,
            tf.Variable(layouts.SerializeToString()))
    writer.one_two = tf.Variable(stacked)
    writer.other = tf.Variable(values["other"])
    return save(writer, directory), values


def sparse_core_feature_config(configs):
    tables = [configs.TableConfig(vocabulary_size=rows, dim=dim, name=name)
              for name, rows, dim in [("one", 10, 4), ("two", 6, 4), ("other", 5, 3)]]
    return [configs.FeatureConfig(table=table) for table in tables]


def test_sparse_core_checkpoint_restores_like_stock(tmp_path):
    path, values = sparse_core_checkpoint(tmp_path / "sc", np.random.default_rng(3))
    inputs = [tf.ragged.constant([[0, 9], [3]], dtype=tf.int64),
              tf.ragged.constant([[5], [1, 2]], dtype=tf.int64),
              tf.constant([4, 0], tf.int64)]
    readers = {"ours": TPUEmbeddingForServing(sparse_core_feature_config(config), None),
               "stock": stock.TPUEmbeddingForServing(sparse_core_feature_config(stock), None)}
    for reader in readers.values():
        status = tf.train.Checkpoint(embedding=reader).restore(path)
        reader.build()
        # The unstacked variables get their values from the stacked table, not from keys.
        status.assert_nontrivial_match()
    for name, value in values.items():
        np.testing.assert_array_equal(readers["ours"].variables[name]["parameters"], value)
    tf.nest.map_structure(np.testing.assert_array_equal, readers["ours"](inputs),
                          readers["stock"](inputs))
    # Saved again, both keep the layouts and the stacked table; a SavedModel drops them.
    assert (tf.train.list_variables(save(readers["ours"], tmp_path / "ours"))
            == tf.train.list_variables(save(readers["stock"], tmp_path / "stock")))
    # private: TF's tracking API is what decides a SavedModel's children.
    saved_model_children = readers["ours"]._trackable_children(
        trackable_base.SaveType.SAVEDMODEL)
    assert {"one_two", tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY}.isdisjoint(
        saved_model_children)
