"""The golden checkpoints and `.keras` file (tests/golden/README.md), written by an earlier
commit, load into today's objects with exactly the values they hold, and today's objects write
them in the same format. A change that fails here breaks users' files: keep the old format
readable (and say so in CHANGELOG.md) instead of regenerating the files.

Checked for every checkpoint kind (golden_fixture.py): it restores into a fresh object of its own
class before and after build (every table and slot restored, bit for bit, and the same lookups);
today's object of that class writes the same keys, shapes and object graph; and, as DESIGN.md
promises, any engine's checkpoint restores into the other classes and into TPUEmbedding at
another block count (MirroredStrategy over 2 logical CPUs). The `.keras` file loads with the
layer's state, predicts what it predicted, and trains on as the original did.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import golden_fixture as fx
from tensorflow.core.protobuf import trackable_object_graph_pb2

pytestmark = pytest.mark.unit

keras3_only = pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1",
                                 reason="Keras 3's files, models and optimizers")
# Every checkpoint kind; v0_keras_slots's objects are made with a Keras 3 optimizer.
KINDS = [pytest.param(kind, marks=keras3_only) if kind == "v0_keras_slots" else kind
         for kind in fx.CHECKPOINTS]
# The kinds whose slots are the embedding's own, with one layout of keys: any of them restores
# into any other class (v0_keras_slots holds Keras' slots under TF's other keys).
INTERCHANGEABLE = ("sharded", "v0", "serving")
# (source, target class, the target's logical CPUs of a MirroredStrategy, 0: default strategy):
# every other class, and TPUEmbedding at 2 blocks.
TARGETS = [("sharded", 0), ("sharded", 2), ("v0", 0), ("serving", 0)]
CROSS_RESTORES = [(source, target, devices) for source in INTERCHANGEABLE
                  for target, devices in TARGETS if (source, devices) != (target, 0)]


@pytest.fixture(scope="module")
def expected():
    with np.load(fx.DATA / fx.EXPECTED) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def manifest():
    return json.loads((fx.DATA / fx.MANIFEST).read_text())


def _golden(kind: str) -> str:
    return str(fx.DATA / fx.CHECKPOINTS[kind])


def _section(expected: dict, prefix: str) -> dict[str, np.ndarray]:
    return {key[len(prefix):]: value for key, value in expected.items()
            if key.startswith(prefix)}


def _written(embedding, directory) -> str:
    """A checkpoint of `embedding` as today's code writes it (users' `save`)."""
    return tf.train.Checkpoint(embedding=embedding).save(str(directory / "ckpt"))


def _strategy(devices: int):
    return fx.mirrored(devices) if devices else None


def _restored(kind: str, source: str, devices: int, before_build: bool):
    """A fresh `kind` object with checkpoint `source` restored into it (before or after its
    variables exist), its lookups of batch 2, and the restore's status."""
    strategy = _strategy(devices)
    embedding = fx.make(kind, strategy)
    if not before_build:
        embedding.build()
    status = tf.train.Checkpoint(embedding=embedding).restore(_golden(source))
    lookups = fx.lookup(kind, embedding, strategy=strategy)
    return embedding, lookups, status


def _object_graph(prefix: str) -> list:
    """Every node of a checkpoint's object graph: its children, its attributes' checkpoint keys,
    its slot references (not variables' names, which restores never read)."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(
        tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return [([(child.node_id, child.local_name) for child in node.children],
             [(attribute.name, attribute.checkpoint_key) for attribute in node.attributes],
             [(slot.original_variable_node_id, slot.slot_name, slot.slot_variable_node_id)
              for slot in node.slot_variables])
            for node in graph.nodes]


def _assert_equal(actual: dict, expected: dict, what: str) -> None:
    assert sorted(actual) == sorted(expected), what
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=f"{what}: {key}")


def _assert_close(actual, expected, what: str) -> None:
    """Values computed by TF's dense layers: their matmul's bits depend on the machine's vector
    ISA and oneDNN's kernels (DESIGN.md's determinism promise covers this package's kernels),
    so a file written on one machine is read on another up to float rounding."""
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("kind", KINDS)
def test_the_golden_checkpoint_holds_what_the_generator_wrote(kind, expected, manifest):
    entry = manifest["checkpoints"][kind]
    assert dict(tf.train.list_variables(_golden(kind))) == entry["keys"]
    _assert_equal(fx.checkpoint_tensors(_golden(kind)),
                  _section(expected, f"{kind}/tensor/"), kind)


@pytest.mark.parametrize("before_build", [True, False], ids=["before_build", "after_build"])
@pytest.mark.parametrize("kind", KINDS)
def test_restores_into_a_fresh_object_of_its_class(kind, before_build, expected, tmp_path):
    embedding, lookups, status = _restored(kind, kind, 0, before_build)
    status.assert_consumed()
    # Every table and slot, read back from what the restored object writes, by key.
    _assert_equal(fx.checkpoint_tensors(_written(embedding, tmp_path)),
                  _section(expected, f"{kind}/tensor/"), f"{kind}'s variables")
    _assert_equal(lookups, _section(expected, f"{kind}/lookup/"), f"{kind}'s lookups")


@pytest.mark.parametrize("kind", KINDS)
def test_todays_object_writes_the_golden_format(kind, tmp_path):
    """Same keys, shapes and object graph as the golden checkpoint: a renamed key, slot or
    child fails here even where a restore would tolerate it."""
    embedding = fx.make(kind)
    fx.lookup(kind, embedding)  # builds, as training's first step would
    written = _written(embedding, tmp_path)
    assert tf.train.list_variables(written) == tf.train.list_variables(_golden(kind))
    assert _object_graph(written) == _object_graph(_golden(kind))


@pytest.mark.parametrize("source, target, devices", CROSS_RESTORES,
                         ids=[f"{s}-into-{t}{f'@{n}' if n else ''}" for s, t, n in CROSS_RESTORES])
def test_restores_into_every_other_class_and_block_count(source, target, devices, expected,
                                                         tmp_path):
    embedding, lookups, status = _restored(target, source, devices, before_build=True)
    status.assert_consumed()
    _assert_equal(fx.checkpoint_tensors(_written(embedding, tmp_path)),
                  _section(expected, f"{source}/tensor/"), f"{source} into {target}")
    # Another class or block count sums a row's lookups in another order (DESIGN.md,
    # "Determinism"): equal up to float rounding.
    source_lookups = _section(expected, f"{source}/lookup/")
    assert sorted(lookups) == sorted(source_lookups)
    for name, value in source_lookups.items():
        np.testing.assert_allclose(lookups[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def _load_keras_file():
    import tf_embedding.keras  # pylint: disable=import-outside-toplevel
    model = tf.keras.models.load_model(str(fx.DATA / fx.KERAS_FILE))
    assert type(model.get_layer("embedding")) is tf_embedding.keras.TPUEmbedding
    return model


@keras3_only
def test_the_keras_file_loads_with_its_state_and_predictions(expected):
    model = _load_keras_file()
    _assert_equal(fx.keras_state(model), _section(expected, "keras/state/"), "layer state")
    _assert_close(model.predict(fx.keras_features(2), verbose=0), expected["keras/predict"],
                  "predictions")


@keras3_only
def test_the_keras_file_trains_on_as_the_saved_model_did(expected):
    """One more fit step on batch 2, as the generator took after saving: the layer's Adagrad
    and the model's Keras Adam continue from their saved slots and step counters."""
    model = _load_keras_file()
    model.fit(fx.keras_features(2), fx.keras_labels(2), batch_size=fx.BATCH, epochs=1,
              verbose=0, shuffle=False)
    # The step's gradients pass through the model's dense layers: close, not bit-identical.
    state = fx.keras_state(model)
    after_step = _section(expected, "keras/after_step/state/")
    assert sorted(state) == sorted(after_step)
    for key, value in after_step.items():
        _assert_close(state[key], value, f"layer state after a step: {key}")
    _assert_close(model.predict(fx.keras_features(2), verbose=0),
                  expected["keras/after_step/predict"], "predictions after a step")


@keras3_only
def test_todays_layer_saves_the_golden_keys(expected):
    """The layer's `save_own_variables` keys (what `.keras` files hold) and shapes."""
    model = fx.keras_model()
    saved = {key: value.shape for key, value in _section(expected, "keras/state/").items()}
    assert {key: value.shape for key, value in fx.keras_state(model).items()} == saved
