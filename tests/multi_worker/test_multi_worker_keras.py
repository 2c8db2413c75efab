"""The Keras front ends on a loopback MultiWorkerMirroredStrategy cluster of 2 workers: the Keras
layer, `EmbeddingFeatures` and (Keras 3) keras-rs's layer train every table and slot
bit-identical to one process on the global batch, by `model.fit` under tf_keras and by a custom
loop under Keras 3 (whose `model.fit` fails under MWMS for any model, docs/multi_worker.md);
the Dense part matches to a tolerance. Every worker saves (`save_weights`, `tf.train.Checkpoint`;
rank 0 to the real path) and rank 0's files restore one process's tables into a one-process
model. An id past its table on one worker fails the lookup on both with the message naming the
table and the feature. The Keras layer of dynamic tables looks up as one process after training.

Run in the suite's Keras 3 part and again in its tf_keras part (tools/run_tests.sh)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from helpers import multi_worker
from helpers.multi_worker_keras import GLOBAL_BATCH, STEPS, dataset, forward_outputs
from helpers.multi_worker_keras import make_model, model_values, train
from helpers.multi_worker_training import whole_tables

pytestmark = pytest.mark.cluster

LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
LOOP = "fit" if LEGACY_KERAS else "custom"
# keras-rs is a Keras 3 library (Python 3.11+).
FRONT_ENDS = ("keras", "feature_column") + (
    () if LEGACY_KERAS or sys.version_info < (3, 11) else ("keras_rs",))
BAD_ID = "Table video, feature watched: an id is out of range for vocabulary size 9"


def tables_of(model) -> dict[str, np.ndarray]:
    return whole_tables(model.embedding)


def fresh_model(name: str):
    """A one-process model of `name`, built by a forward pass (which changes no table)."""
    model = make_model(tf.distribute.get_strategy(), name)
    model(next(iter(dataset(model.case)))[0])
    return model


def assert_equal(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str):
    assert sorted(actual) == sorted(expected), what
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=f"{what} {key}")


def test_front_ends_on_two_workers_train_and_save_the_bits_of_one_process(tmp_path):
    results = multi_worker.run_workers(
        2, [multi_worker.script("mw_keras.py"), str(tmp_path), LOOP, *FRONT_ENDS])
    multi_worker.assert_succeeded(results)
    for result in results:
        failures = [line for line in result.stdout.splitlines() if line.startswith("bad id:")]
        assert len(failures) == 1 and failures[0].startswith(
            "bad id: InvalidArgumentError: ") and BAD_ID in failures[0], failures

    for name in FRONT_ENDS:
        model = train(tf.distribute.get_strategy(), name, LOOP)
        expected = tables_of(model)
        saved = dict(np.load(tmp_path / f"{name}.npz"))
        workers_dense = {key: saved.pop(key) for key in model_values(model)}
        assert_equal(saved, expected, f"{name} trained")
        for key, value in model_values(model).items():
            np.testing.assert_allclose(workers_dense[key], value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} {key}")
        if "global_step" in workers_dense:
            assert workers_dense["global_step"] == STEPS  # one update per step

        loaded = fresh_model(name)
        loaded.load_weights(str(tmp_path / f"{name}.weights.h5"))
        assert_equal(tables_of(loaded), expected, f"{name} save_weights")
        restored = fresh_model(name)
        tf.train.Checkpoint(model=restored).read(
            str(tmp_path / name / "ckpt")).expect_partial()
        assert_equal(tables_of(restored), expected, f"{name} checkpoint")


def test_the_keras_layer_of_dynamic_tables_on_two_workers_looks_up_as_one_process(tmp_path):
    """Its rows lie elsewhere on 2 blocks than on one, so the model's outputs after training
    (keys admitted at their first lookup, capacities no block fills) are compared, and the
    index's statistics."""
    multi_worker.assert_succeeded(multi_worker.run_workers(
        2, [multi_worker.script("mw_keras.py"), str(tmp_path), LOOP, "keras_dynamic"]))
    model = train(tf.distribute.get_strategy(), "keras_dynamic", LOOP)
    expected = forward_outputs(tf.distribute.get_strategy(), model)
    assert np.all(expected[:, 0] != 0)  # every sample reads trained rows
    per_worker = GLOBAL_BATCH // 2
    for rank in range(2):
        actual = np.load(tmp_path / f"keras_dynamic.forward.rank{rank}.npy")
        # Column 0 reads the tables alone; column 1, the Dense layer, all-reduced (a tolerance).
        np.testing.assert_array_equal(actual[:, 0],
                                      expected[rank * per_worker:(rank + 1) * per_worker, 0])
        np.testing.assert_allclose(actual[:, 1],
                                   expected[rank * per_worker:(rank + 1) * per_worker, 1],
                                   rtol=1e-5, atol=1e-6)
    statistics = model.embedding.dynamic_statistics()
    assert statistics["video"]["admitted"] == 9 and statistics["user"]["admitted"] == 5
