"""`--embedding-api stock`, the job on stock TensorFlow alone: its forward pass equals the
default (sharded) API's on the same weights, and it trains what the default trains."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job import cli, embedding_apis, training
from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.data.synthetic import TRAIN, SyntheticClickLog
from tf_embedding.job.options import TrainOptions

from helpers.job_runs import CONFIG, checkpoint_values

pytestmark = pytest.mark.unit

# CONFIG's layout: sum, mean and sqrtn tables, multi-hot and weighted features, a table shared
# by two features.
SPEC = DataSpec.from_json({key: CONFIG[key] for key in ("tables", "features", "num_dense")})
OPTIONS = TrainOptions(batch_size=64, embedding_dim=8, bottom_mlp="16", top_mlp="32")


def _batch_with_an_empty_row() -> dict:
    """A synthetic batch whose first sample has no ids in any feature (as a TSV row with
    empty categorical cells has)."""
    batch = SyntheticClickLog(SPEC, seed=3).batch(TRAIN, tf.constant(0), OPTIONS.batch_size)

    def drop_first(value: tf.RaggedTensor) -> tf.RaggedTensor:
        keep = tf.ragged.range(value.row_lengths()) > 0
        keep = tf.concat([tf.zeros_like(keep[:1]), keep[1:]], axis=0)
        return tf.ragged.boolean_mask(value, keep)
    return {**batch, "ids": {k: drop_first(v) for k, v in batch["ids"].items()},
            "weights": {k: drop_first(v) for k, v in batch["weights"].items()}}


def test_the_stock_forward_pass_equals_the_sharded_one_on_the_same_weights(tmp_path):
    sharded = embedding_apis.ShardedTraining(
        embedding_apis.feature_config(SPEC, OPTIONS.embedding_dim, seed=1), OPTIONS)
    path = tf.train.Checkpoint(**sharded.checkpointed()).write(str(tmp_path / "sharded"))
    # Other initial values, then the sharded API's tables through the checkpoint (stock keys).
    stock = embedding_apis.StockTraining(
        embedding_apis.feature_config(SPEC, OPTIONS.embedding_dim, seed=2), OPTIONS)
    tf.train.Checkpoint(embedding=stock.embedding).read(path).expect_partial()
    batch = _batch_with_an_empty_row()
    weights = training.lookup_weights(SPEC, batch)
    ours = sharded.lookup(batch["ids"], weights, training=False)
    theirs = stock.lookup(batch["ids"], weights, training=False)
    assert set(theirs) == set(ours)
    for name in ours:
        # Sums of up to 4 float32 rows in another order.
        np.testing.assert_allclose(theirs[name], ours[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
        assert not np.any(theirs[name][0]), name  # the empty row pools to zeros in both
    model = training.build_model(OPTIONS, SPEC)
    np.testing.assert_allclose(model((batch["dense"], theirs)), model((batch["dense"], ours)),
                               rtol=1e-5, atol=1e-6)


def test_the_stock_baseline_refuses_jit_compile(tmp_path, capsys):
    assert cli.main(["train", "--embedding-api", "stock", "--jit-compile",
                     "--model-dir", str(tmp_path)]) == 2
    assert "--jit-compile with --embedding-api stock: tf_keras' legacy Adagrad" in \
        capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.slow
def test_the_stock_baseline_trains_what_the_sharded_api_trains(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    runs = {api: str(tmp_path / api) for api in ("sharded", "stock")}
    for api, model_dir in runs.items():
        assert cli.main(["train", "--config", str(config), "--model-dir", model_dir,
                         "--embedding-api", api]) == 0
    sharded, stock = (checkpoint_values(runs[api]) for api in ("sharded", "stock"))
    tables = [key for key in sharded if key.startswith("embedding/")
              and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and ".S" not in key]
    assert tables
    for key in tables:
        # As the replicated API's tables (test_cli_end_to_end): the same Adagrad but for
        # tf_keras' epsilon, summed in another order, over CONFIG's 160 steps.
        np.testing.assert_allclose(stock[key], sharded[key], atol=1e-4, err_msg=key)
    metrics = [json.load(open(os.path.join(runs[api], "metrics.json")))
               for api in ("sharded", "stock")]
    # Tables within 1e-4 of values around 0.05-1 move a logit by ~1e-4 at most, which swaps
    # only pairs of held-out examples whose scores were that close: of 16384 examples' pairs,
    # far fewer than 0.1%.
    assert abs(metrics[0]["auc"] - metrics[1]["auc"]) < 1e-3
