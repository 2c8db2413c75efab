"""profile_data_directory: training writes per-table lookup statistics (checked against numpy on
the same ids), a second model of the same configuration adds to the same files, another
configuration gets files of its own, and `tf-embedding stats --profile-dir` reads and plots
them."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import feature_column as efc
from tf_embedding.job import cli
from tf_embedding.sharded import profile_files

from helpers.feature_column import adagrad_spec, raw_features

pytestmark = pytest.mark.integration


VOCABULARY = 10
# Two features of one table; per step the ids of both, batch of 2.
WATCHED = [[0, 1, 4], [7]]
FAVORITED = [[1], [2, 9]]


def engine(directory, partition_strategy="mod"):
    video = tf_embedding.TableConfig(vocabulary_size=VOCABULARY, dim=2, combiner="sum",
                                     name="video")
    config = {"watched": tf_embedding.FeatureConfig(video),
              "favorited": tf_embedding.FeatureConfig(video)}
    return tf_embedding.TPUEmbedding(config, tf_embedding.SGD(0.1),
                                     table_devices=["/cpu:0"] * 3,
                                     partition_strategy=partition_strategy,
                                     profile_data_directory=str(directory))


def train(emb, steps: int, forward_only_steps: int = 0) -> None:
    features = {"watched": tf.ragged.constant(WATCHED, dtype=tf.int64),
                "favorited": tf.ragged.constant(FAVORITED, dtype=tf.int64)}

    @tf.function
    def step(training):
        emb.enqueue(features, training=training)
        activations = emb.dequeue()
        if training:
            emb.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))

    # Forward-only batches are not counted, so the first training batch is still sampled.
    for _ in range(forward_only_steps):
        step(False)
    for _ in range(steps):
        step(True)


def expected_profile(partition_strategy: str, batches: int) -> dict:
    """The file's totals in numpy: every batch holds the same ids."""
    ids = np.array(sum(WATCHED + FAVORITED, []))
    if partition_strategy == "mod":
        blocks = ids % 3
    else:  # rows 0..3, 4..6, 7..9
        blocks = np.searchsorted([4, 7], ids, side="right")
    per_block = np.bincount(blocks, minlength=3)
    return {"batches": batches, "examples": 2 * batches, "lookups": len(ids) * batches,
            "unique": len(np.unique(ids)) * batches,
            "max_shard_load": pytest.approx(batches * per_block.max() / (len(ids) / 3)),
            "shard_lookups": list(per_block * batches)}


def read_files(directory) -> dict[str, dict]:
    return {name: json.load(open(os.path.join(directory, name)))
            for name in sorted(os.listdir(directory))}


def test_files_are_written_shared_by_configuration_and_read_by_stats(tmp_path, capsys):
    directory = tmp_path / "profiles"
    # 34 training batches: the 1st and the 34th are sampled (every 33rd, about 3%).
    train(engine(directory), steps=34, forward_only_steps=2)
    (name, written), = read_files(directory).items()
    assert name.startswith("video-") and name.endswith(".json")
    assert written["parameters"] == {
        "table": "video", "vocabulary_size": VOCABULARY, "dim": 2, "combiner": "sum",
        "num_features": 2, "max_sequence_lengths": [0, 0], "partition_strategy": "mod",
        "num_blocks": 3, "table_devices": 3, "replicas": 1}
    assert {k: written[k] for k in expected_profile("mod", 2)} == expected_profile("mod", 2)

    # A second model of the same configuration adds to the same file ...
    train(engine(directory), steps=1)
    assert list(read_files(directory)) == [name]
    assert ({k: read_files(directory)[name][k] for k in expected_profile("mod", 3)}
            == expected_profile("mod", 3))
    # ... another configuration writes its own.
    train(engine(directory, partition_strategy="div"), steps=1)
    files = read_files(directory)
    assert len(files) == 2
    (div_file,) = [f for f in files.values() if f["parameters"]["partition_strategy"] == "div"]
    assert ({k: div_file[k] for k in expected_profile("div", 1)}
            == expected_profile("div", 1))

    png = tmp_path / "profile.png"
    assert cli.main(["stats", "--profile-dir", str(directory), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "2 lookup profiles" in out
    assert "video (div, 3 blocks)" in out and "video (mod, 3 blocks)" in out
    assert "3.50" in out  # ids per example: 7 ids over 2 examples
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_embedding_features_profile_training_calls_only(tmp_path):
    directory = tmp_path / "profiles"
    spec = adagrad_spec(profile_data_directory=str(directory))
    layer = efc.EmbeddingFeatures(spec)
    rng = np.random.default_rng(0)
    layer(raw_features(rng))  # not training: not profiled
    assert not directory.exists()

    @tf.function
    def train_step(features):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(features, training=True) ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    features = raw_features(rng)
    train_step(features)
    profiles = {p.table: p for p in profile_files.read_directory(str(directory))}
    assert sorted(profiles) == ["tbl_left_right_shared_embedding",
                                "tbl_query_weighted_by_query_weight", "tbl_watched"]
    watched = profiles["tbl_watched"]
    assert (watched.batches, watched.examples) == (1, 4)
    assert watched.lookups == len(features["watched"].values)
    assert profiles["tbl_left_right_shared_embedding"].parameters["num_features"] == 2


def test_reading_a_directory_without_profiles_says_how_to_write_them(tmp_path):
    with pytest.raises(ValueError, match="train with profile_data_directory"):
        profile_files.read_directory(str(tmp_path))
