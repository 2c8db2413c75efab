"""`tf-embedding train --model dcnv2`: MLPerf DLRM-DCNv2's layout (26 multi-hot features of
fixed sizes, vocabularies capped by --vocabulary-cap), its low-rank cross network against
numpy, its defaults (widths, MLPs, Adagrad) under the config's values and the flags, and small
runs of it: synthetic in the sharded and Keras paths, and from the TSV `generate` writes."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli
from tf_embedding.job import model as model_lib
from tf_embedding.job.data import sources, spec as spec_lib
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

SMALL = ["--model", "dcnv2", "--vocabulary-cap", "300", "--embedding-dim", "4",
         "--bottom-mlp", "8", "--top-mlp", "16", "--batch-size", "64", "--steps", "12",
         "--checkpoint-every", "6", "--eval-examples", "1024", "--progress", "none"]


@pytest.mark.unit
def test_the_cross_network_is_dcn_v2s_formula():
    layer = model_lib.CrossNetwork(6, num_layers=2, rank=3)
    x0 = np.random.default_rng(0).normal(size=[5, 6]).astype(np.float32)
    got = layer(tf.constant(x0)).numpy()
    x = x0
    for down, up in zip(layer.down, layer.up):
        x = x0 * ((x @ down.kernel.numpy()) @ up.kernel.numpy() + up.bias.numpy()) + x
    np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-5)


def _cross_model_and_inputs(seed: int):
    """A cross model over features b and a (width 4) and 3 dense inputs; a batch of 7."""
    spec = DataSpec(tables=(TableSpec("t", 10),),
                    features=(FeatureSpec("b", "t"), FeatureSpec("a", "t")), num_dense=3)
    model = model_lib.RankingModel(spec, 4, [5], [6], interaction="cross")
    rng = np.random.default_rng(seed)
    dense = tf.constant(rng.normal(size=[7, 3]), tf.float32)
    return model, dense, {n: tf.constant(rng.normal(size=[7, 4]), tf.float32) for n in "ab"}


@pytest.mark.unit
def test_the_cross_model_feeds_the_cross_network_the_concatenated_vectors():
    model, dense, activations = _cross_model_and_inputs(1)
    got = model((dense, activations)).numpy()
    # The bottom vector first, then the features in name order: the cross network's input.
    flat = np.concatenate([model.bottom(dense).numpy(), activations["a"], activations["b"]], 1)
    expected = model.top(model.cross(flat)).numpy()[:, 0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert model_lib.CROSS_LAYERS == len(model.cross.down) == 3
    assert {layer.kernel.shape[1] for layer in model.cross.down} == {model_lib.CROSS_RANK}


@pytest.mark.unit
def test_mlperfs_layout_with_its_multi_hot_sizes_and_the_cap():
    spec = spec_lib.mlperf_dcnv2_spec(vocabulary_cap=100_000)
    assert len(spec.features) == 26 and spec.num_dense == 13
    assert [(f.min_ids, f.max_ids) for f in spec.features] == [
        (hot, hot) for hot in spec_lib.MLPERF_DCNV2_MULTI_HOT]
    assert [t.vocabulary_size for t in spec.tables] == [
        min(v, 100_000) for v in spec_lib.MLPERF_DCNV2_VOCABULARIES]


@pytest.mark.unit
def test_synthetic_batches_have_mlperfs_fixed_multi_hot_sizes():
    _, options, spec = cli.parse(["train", "--model", "dcnv2", "--vocabulary-cap", "1000",
                                  "--batch-size", "16"])
    batch = next(iter(sources.Source(options, spec).train(0)))
    for feature, hot in zip(spec.features, spec_lib.MLPERF_DCNV2_MULTI_HOT):
        lengths = batch["ids"][feature.name].row_lengths().numpy()
        assert set(lengths) == {hot}, feature.name
        assert batch["ids"][feature.name].flat_values.numpy().max() < feature_vocabulary(
            spec, feature)


def feature_vocabulary(spec, feature):
    return spec.table(feature.table).vocabulary_size


@pytest.mark.unit
def test_dcnv2s_defaults_yield_to_the_config_and_the_flags(tmp_path):
    _, options, _ = cli.parse(["train", "--model", "dcnv2"])
    assert (options.embedding_dim, options.bottom_mlp, options.top_mlp) == (
        128, "512,256", "1024,1024,512,256")
    assert options.learning_rate == options.embedding_learning_rate == 0.004
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": "dcnv2", "embedding_dim": 32}))
    _, options, _ = cli.parse(["train", "--config", str(config), "--top-mlp", "64"])
    assert (options.model, options.embedding_dim, options.top_mlp, options.bottom_mlp) == (
        "dcnv2", 32, "64", "512,256")
    _, options, _ = cli.parse(["train"])
    assert (options.model, options.embedding_dim) == ("dlrm", 16)
    assert isinstance(model_lib.dense_optimizer("dcnv2", 0.1), keras.optimizers.Adagrad)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("api", ["sharded", "keras"])
def test_a_small_dcnv2_run_trains_and_exports(tmp_path, api):
    model_dir = str(tmp_path / "run")
    assert cli.main(["train", *SMALL, "--embedding-api", api, "--model-dir", model_dir]) == 0
    with open(os.path.join(model_dir, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["steps"] == 12 and 0 < metrics["auc"] < 1
    with open(os.path.join(model_dir, "config.json")) as f:
        saved = json.load(f)
    assert [f["max_ids"] for f in saved["data_spec"]["features"]] == list(
        spec_lib.MLPERF_DCNV2_MULTI_HOT)
    exported = tf.saved_model.load(os.path.join(model_dir, "export"))
    assert "serve_tsv" in exported.signatures


@pytest.mark.integration
@pytest.mark.slow
def test_dcnv2_trains_from_multi_hot_tsv(tmp_path):
    records = str(tmp_path / "train.tsv")
    assert cli.main(["generate", *SMALL[:4], "--output", records, "--examples", "2000"]) == 0
    with open(records) as f:
        cells = f.readline().rstrip("\n").split("\t")
    # label, 13 dense, then each feature's multi-hot ids separated by ','.
    assert [len(cell.split(",")) for cell in cells[14:]] == list(spec_lib.MLPERF_DCNV2_MULTI_HOT)
    model_dir = str(tmp_path / "run")
    assert cli.main(["train", *SMALL, "--data", "tsv", "--train-input", records,
                     "--model-dir", model_dir]) == 0
    with open(os.path.join(model_dir, "metrics.json")) as f:
        assert json.load(f)["examples"] > 0


@pytest.mark.unit
def test_a_feature_with_min_ids_above_max_ids_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"features\['f'\]: 1 <= min_ids <= max_ids must hold, "
                                         r"got min_ids 3 and max_ids 2"):
        DataSpec(tables=(TableSpec("t", 10),),
                 features=(FeatureSpec("f", "t", min_ids=3, max_ids=2),), num_dense=0)


@pytest.mark.unit
def test_the_cross_models_activation_gradients_are_tf_concats():
    model, dense, activations = _cross_model_and_inputs(2)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(activations)
        ours = model((dense, activations))
        flat = tf.concat([model.bottom(dense), activations["a"], activations["b"]], axis=1)
        theirs = model.top(model.cross(flat))[:, 0]
    for name in "ab":
        np.testing.assert_allclose(tape.gradient(ours, activations[name]).numpy(),
                                   tape.gradient(theirs, activations[name]).numpy(),
                                   rtol=1e-6, atol=1e-7)
