"""`tf-embedding train --embedding-api keras-rs` end to end on test_cli_end_to_end's small log:
keras-rs's layer in the job's Keras model trains what `--embedding-api keras` trains (the same
initial values, the same Adagrad on the same gradients), so their checkpoints and test AUC
agree, and its export scores like theirs."""

import json
import os
import sys

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("keras-rs needs Python 3.11 or newer", allow_module_level=True)

from tf_embedding.job import cli  # pylint: disable=wrong-import-position

from helpers.job_runs import CONFIG, checkpoint_values  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_rs_runs")
    config = root / "config.json"
    config.write_text(json.dumps(CONFIG))
    for api in ("keras", "keras-rs"):
        assert cli.main(["train", "--config", str(config), "--model-dir", str(root / api),
                         "--embedding-api", api]) == 0
    return {api: str(root / api) for api in ("keras", "keras-rs")}


def test_keras_rs_run_trains_what_the_keras_layer_run_trains(runs):
    keras_layer, keras_rs = (checkpoint_values(runs[api]) for api in ("keras", "keras-rs"))
    tables = [key for key in keras_layer if key.startswith("embedding/_tpu_embedding/")]
    assert len(tables) == 2 * len(CONFIG["tables"])  # each table and its accumulators
    assert sorted(keras_rs) == sorted(keras_layer)
    for key, value in keras_layer.items():
        np.testing.assert_allclose(keras_rs[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_keras_rs_run_reaches_the_keras_layer_runs_test_auc(runs):
    metrics = {api: json.load(open(os.path.join(path, "metrics.json")))
               for api, path in runs.items()}
    assert metrics["keras-rs"]["examples"] == CONFIG["eval_examples"]
    assert abs(metrics["keras-rs"]["auc"] - metrics["keras"]["auc"]) < 0.005
    assert metrics["keras-rs"]["bayes_auc"] - metrics["keras-rs"]["auc"] < 0.03
