"""The sharded engine's steps compiled whole by XLA (`tf.function(jit_compile=True)`) against
the same steps on the TF-runtime kernels (references.XLA_TOLERANCE: bit for bit, as the CPU
custom calls run the TF kernels' code), their run-time errors, and the engine's misuse under
XLA. (The ops' XLA kernels meet every optimizer option in test_optimizer_ops.py and
test_sparse_apply_rows_ops.py, the conversion every input kind in test_replicated.py.)
"""

import functools
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding

from helpers.references import XLA_TOLERANCE
from helpers.sharded import FEATURES, GLOBAL_BATCH, MAX_SEQUENCE_LENGTH, TABLES, feature_config
from helpers.sharded import make_samples, to_inputs, variable_values
from helpers.xla_compiles import run_counting_compiles

pytestmark = pytest.mark.integration

F = np.float32
NUM_STEPS = 3

OPTIMIZERS = {
    "sgd": lambda: tf_embedding.SGD(0.1, clipvalue=0.5),
    "adagrad": lambda: tf_embedding.Adagrad(
        0.1, initial_accumulator_value=0.2, weight_decay_factor=0.01,
        multiply_weight_decay_factor_by_learning_rate=True),
    "adagrad_momentum": lambda: tf_embedding.AdagradMomentum(
        0.1, momentum=0.9, use_nesterov=True, beta2=0.99),
    "adam": lambda: tf_embedding.Adam(0.1),
    "adam_non_lazy": lambda: tf_embedding.Adam(0.1, lazy_adam=False, clip_weight_max=0.5),
    "ftrl": lambda: tf_embedding.FTRL(0.1, l1_regularization_strength=0.01,
                                      l2_regularization_strength=0.02, beta=0.1),
}


def train(optimizer: str, kind: str, jit_compile: bool, tpu_shaped: bool = False,
          **options) -> tuple[list, dict]:
    """NUM_STEPS steps of enqueue, dequeue and apply_gradients: the activations of each step and
    the final tables and slots. All in one function, or `tpu_shaped`: enqueue in an outer
    tf.function, dequeue and apply_gradients in a function it calls (the one compiled)."""
    emb = tf_embedding.TPUEmbedding(feature_config(), OPTIMIZERS[optimizer](), **options)
    rng = np.random.default_rng(7)
    targets = {name: tf.constant(rng.uniform(-1, 1, [GLOBAL_BATCH, MAX_SEQUENCE_LENGTH,
                                                     TABLES[f.table].dim]
                                             if f.kind == "sequence"
                                             else [GLOBAL_BATCH, TABLES[f.table].dim]).astype(F))
               for name, f in FEATURES.items()}

    def dequeue_and_apply():
        with tf.GradientTape() as tape:
            activations = emb.dequeue()
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_sum(tf.square(activations[name] - targets[name]))
                             for name in sorted(activations)])
        emb.apply_gradients(tape.gradient(loss, activations))
        return activations

    if tpu_shaped:
        compiled = tf.function(dequeue_and_apply, jit_compile=jit_compile)

        @tf.function
        def step(features, weights):
            emb.enqueue(features, weights, training=True)
            return compiled()
    else:
        @tf.function(jit_compile=jit_compile)
        def step(features, weights):
            emb.enqueue(features, weights, training=True)
            return dequeue_and_apply()

    history = []
    for samples in make_samples(NUM_STEPS, seed=7):
        history.append({name: value.numpy()
                        for name, value in step(*to_inputs(samples, kind)).items()})
    return history, variable_values(emb)


def assert_same_training(actual: tuple[list, dict], expected: tuple[list, dict]) -> None:
    for step, (got, want) in enumerate(zip(actual[0], expected[0])):
        for name in FEATURES:
            np.testing.assert_allclose(got[name], want[name], **XLA_TOLERANCE,
                                       err_msg=f"step {step}, feature {name}")
    for table, slots in expected[1].items():
        for slot, want in slots.items():
            np.testing.assert_allclose(actual[1][table][slot], want, **XLA_TOLERANCE,
                                       err_msg=f"{table}/{slot}")


TRAINING_CASES = [(optimizer, ("ragged", "sparse", "mixed")[i % 3])
                  for i, optimizer in enumerate(OPTIMIZERS)]


@pytest.mark.parametrize("optimizer, kind", TRAINING_CASES)
def test_compiled_training_steps_match_the_tf_runtime(optimizer, kind):
    assert_same_training(train(optimizer, kind, jit_compile=True),
                         train(optimizer, kind, jit_compile=False))


@pytest.mark.parametrize("optimizer, kind", [("adagrad", "ragged"), ("ftrl", "sparse"),
                                             ("adam", "mixed")])
def test_tpu_shaped_steps_compile_the_inner_function_and_match_the_tf_runtime(optimizer, kind):
    """On a TPU, enqueue runs in the outer function and dequeue / apply_gradients in the
    compiled replica function: the same program compiles here."""
    assert_same_training(train(optimizer, kind, jit_compile=True, tpu_shaped=True),
                         train(optimizer, kind, jit_compile=False))


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_tpu_shaped_forward_steps_compile_the_inner_function(kind):
    """A forward-only sparse batch waits unconverted in the engine's queue; the compiled
    dequeue's caller converts it."""
    emb = tf_embedding.TPUEmbedding(feature_config(), OPTIMIZERS["sgd"]())
    compiled = tf.function(emb.dequeue, jit_compile=True)

    @tf.function
    def compiled_forward(features, weights):
        emb.enqueue(features, weights, training=False)
        return compiled()

    @tf.function
    def forward(features, weights):
        emb.enqueue(features, weights, training=False)
        return emb.dequeue()

    for samples in make_samples(2, seed=3):
        inputs = to_inputs(samples, kind)
        got, want = compiled_forward(*inputs), forward(*inputs)
        for name in FEATURES:
            np.testing.assert_allclose(got[name], want[name], **XLA_TOLERANCE, err_msg=name)


@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense"])
def test_tpu_shaped_forward_steps_of_unweighted_features_compile_the_inner_function(kind):
    """Without weights a forward batch waits unconverted in a raw queue (the uncompiled
    dequeue's fast path); the compiled dequeue's caller converts it from there."""
    table = tf.tpu.experimental.embedding.TableConfig(
        100, 4, combiner="mean",
        initializer=lambda shape, dtype=tf.float32: tf.random.stateless_uniform(shape, [3, 4]))
    emb = tf_embedding.TPUEmbedding(
        {"f": tf.tpu.experimental.embedding.FeatureConfig(table=table, name="f")},
        OPTIMIZERS["sgd"]())
    compiled = tf.function(emb.dequeue, jit_compile=True)

    @tf.function
    def compiled_forward(ids):
        emb.enqueue({"f": ids}, training=False)
        return compiled()

    @tf.function
    def forward(ids):
        emb.enqueue({"f": ids}, training=False)
        return emb.dequeue()

    rng = np.random.default_rng(5)
    for _ in range(3):
        lengths = rng.integers(1, 4, 8)
        ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, 100, lengths.sum()), lengths)
        if kind == "sparse":
            ids = ids.to_sparse()
        elif kind == "dense":  # one id per sample
            ids = tf.constant(rng.integers(0, 100, [8, 1]))
        np.testing.assert_allclose(compiled_forward(ids)["f"], forward(ids)["f"],
                                   **XLA_TOLERANCE)


@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense"])
def test_a_compiled_forward_step_looks_up_every_table_in_one_custom_call(kind):
    """enqueue(training=False) + dequeue compiled whole: the unweighted batch waits unconverted
    in the function's hand-off and every table's features are looked up in one custom call, with
    the uncompiled step's bits; a bad id fails it as it fails the uncompiled step."""
    configs = [tf.tpu.experimental.embedding.TableConfig(
        60 + t, 3 + t, combiner=combiner, name=f"t{t}",
        initializer=lambda shape, dtype=tf.float32, t=t: tf.random.stateless_uniform(shape,
                                                                                     [t, 1]))
        for t, combiner in enumerate(["sum", "mean", "sqrtn"])]
    emb = tf_embedding.TPUEmbedding(
        {f"f{t}": tf.tpu.experimental.embedding.FeatureConfig(table=table, name=f"f{t}")
         for t, table in enumerate(configs)}, OPTIMIZERS["sgd"]())

    def forward(features):
        emb.enqueue(features, training=False)
        return emb.dequeue()

    compiled, uncompiled = tf.function(forward, jit_compile=True), tf.function(forward)
    rng = np.random.default_rng(8)

    def batch(bad_id=False):
        features = {}
        for t in range(3):
            if kind == "dense":  # one id per sample
                ids = rng.integers(0, 60, 6)
                if bad_id and t == 1:
                    ids[2] = 61
                features[f"f{t}"] = tf.constant(ids)
                continue
            ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, 60, 20), [3, 0, 5, 2, 6, 4])
            if bad_id and t == 1:
                ids = tf.concat([ids[:2], tf.ragged.constant([[61]], tf.int64), ids[3:]], 0)
            features[f"f{t}"] = ids.to_sparse() if kind == "sparse" else ids
        return features

    for _ in range(2):
        features = batch()
        got, want = compiled(features), uncompiled(features)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    hlo = compiled.experimental_get_compiler_ir(features)(stage="hlo")
    assert hlo.count('custom_call_target="tf_embedding_features_lookup"') == 1
    assert "tf_embedding_features_to_csr" not in hlo
    message = r"Table 't1', feature 'f1': id 61 at lookup \d+ is out of range"
    for step in (compiled, uncompiled):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            step(batch(bad_id=True))


def train_on_summed_activations(emb, features, weights, training=True):
    """enqueue + dequeue + apply_gradients of one batch, the activations' sum as the loss."""
    emb.enqueue(features, weights, training=training)
    with tf.GradientTape() as tape:
        activations = emb.dequeue()
        tape.watch(activations)
        loss = tf.add_n([tf.reduce_sum(a) for a in tf.nest.flatten(activations)])
    emb.apply_gradients(tape.gradient(loss, activations))


def assert_unchanged(emb, before):
    """Every table and slot of `emb` still holds `before` (variable_values)."""
    for table, slots in before.items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(variable_values(emb)[table][slot], value)


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
@pytest.mark.parametrize("fault, message", [
    ("id", r"Table 'video', feature 'watched': id 13 at lookup \d+ is out of range for "
           "vocabulary size 13"),
    ("learning_rate", "Table '[a-z]+': learning_rate must be finite and >= 0, got nan"),
])
def test_bad_data_fails_the_compiled_step_as_it_fails_the_uncompiled_one(kind, fault, message):
    learning_rate = tf.Variable(0.1)
    emb = tf_embedding.TPUEmbedding(feature_config(), tf_embedding.SGD(lambda: learning_rate))
    emb.build(per_replica_batch_size=GLOBAL_BATCH)
    samples = make_samples(1, seed=5)[0]
    if fault == "id":
        samples["watched"][0] = [(13, 1.0), *samples["watched"][0]]
    else:
        learning_rate.assign(float("nan"))

    before = variable_values(emb)
    for jit_compile in (True, False):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            tf.function(functools.partial(train_on_summed_activations, emb),
                        jit_compile=jit_compile)(*to_inputs(samples, kind))
    # A failed step updates nothing.
    assert_unchanged(emb, before)


@pytest.mark.parametrize("table_devices", [["/cpu:0", "/cpu:0"], ["/cpu:0", "/cpu:1"]])
def test_tables_of_several_blocks_are_refused_inside_xla(table_devices):
    with pytest.raises(ValueError, match=r"Table \w+ is split into 2 blocks .* inside "
                       "jit_compile=True a table must be one block on the step's device"):
        train("sgd", "ragged", jit_compile=True, table_devices=table_devices)


def test_an_eager_enqueue_before_a_compiled_dequeue_is_named_as_the_call_to_move():
    emb = tf_embedding.TPUEmbedding(feature_config(), OPTIMIZERS["sgd"]())
    features, weights = to_inputs(make_samples(1, seed=0)[0], "ragged")
    emb.enqueue(features, weights, training=False)

    @tf.function(jit_compile=True)
    def compiled_step():
        return emb.dequeue()

    with pytest.raises(RuntimeError, match=r"dequeue\(\) called without an enqueue\(\) before it "
                       r"in the same function\. Inside a tf.function\(jit_compile=True\).*Call "
                       r"enqueue\(\) in the compiled function or in a tf.function around it"):
        compiled_step()
    # The batch is still queued for a dequeue outside XLA.
    assert set(emb.dequeue()) == set(FEATURES)


def test_apply_gradients_of_a_run_time_training_flag_is_refused_inside_xla():
    """XLA drops the run-time check that the batch was enqueued with training=True, which would
    let a training=False batch update the tables: such a compiled step is refused when traced,
    and updates nothing."""
    emb = tf_embedding.TPUEmbedding(feature_config(), OPTIMIZERS["sgd"]())
    emb.build(per_replica_batch_size=GLOBAL_BATCH)
    before = variable_values(emb)
    step = tf.function(functools.partial(train_on_summed_activations, emb), jit_compile=True)
    with pytest.raises(ValueError, match=r"training flag known only at run time.*Python bool"):
        step(*to_inputs(make_samples(1, seed=4)[0], "ragged"), tf.constant(False))
    assert_unchanged(emb, before)


def test_profiling_is_refused_inside_xla(tmp_path):
    with pytest.raises(ValueError, match="profile_data_directory writes its files from the host"):
        train("sgd", "ragged", jit_compile=True, profile_data_directory=str(tmp_path))


# A TPU-shaped step (enqueue outside, dequeue and apply_gradients compiled) over batches whose
# id counts vary: run in a process of its own, as XLA_FLAGS are read once per process. Prints
# each batch's id count, then whether the compiled run's tables equal the uncompiled run's.
_VARYING_BATCHES = """
import numpy as np, tensorflow as tf, tf_embedding
table = tf.tpu.experimental.embedding.TableConfig(
    1000, 8, combiner="mean",
    initializer=lambda shape, dtype=tf.float32: tf.random.stateless_uniform(shape, [1, 2]))
features = {"f": tf.tpu.experimental.embedding.FeatureConfig(table=table, name="f")}
rng = np.random.default_rng(0)
# 64 rows of 1-5 ids (about 190 ids), then of 4-8 ids (about 380): two buckets, 256 and 512.
batches = [rng.integers(low, low + 5, 64) for low in [1] * 10 + [4] * 10]
batches = [tf.RaggedTensor.from_row_lengths(rng.integers(0, 1000, n.sum()), n) for n in batches]
tables = []
for jit_compile in (True, False):
    emb = tf_embedding.TPUEmbedding(features, tf_embedding.Adagrad(0.1))
    def dequeue_and_apply():
        with tf.GradientTape() as tape:
            activations = emb.dequeue()
            tape.watch(activations)
            loss = tf.reduce_sum(tf.square(activations["f"]))
        emb.apply_gradients(tape.gradient(loss, activations))
    inner = tf.function(dequeue_and_apply, jit_compile=jit_compile)
    @tf.function
    def step(ids):
        emb.enqueue({"f": ids}, training=True)
        inner()
    for ids in batches:
        step(ids)
    tables.append(tf.convert_to_tensor(emb.embedding_tables[table]).numpy())
print(" ".join(str(int(tf.size(ids.values))) for ids in batches))
print("same tables" if np.array_equal(*tables) else "DIFFERENT TABLES")
"""


@pytest.mark.slow
def test_batches_of_varying_id_counts_compile_once_per_power_of_two(tmp_path):
    counts, buckets, verdict, compiles = run_counting_compiles(_VARYING_BATCHES, tmp_path)
    assert len(set(counts)) > len(buckets) == 2
    assert compiles == len(buckets)
    assert verdict == "same tables"


# Steps compiled whole (enqueue inside) over batches of one shape and different ids, in a process
# of its own (XLA_FLAGS): a forward step and a training step, each of sparse, ragged and
# weighted sparse features, of two tables (so splits of each table's features are compiled),
# in the order given by MODES, then the activations' sum of the last forward step.
_SAME_SHAPED_BATCHES = """
import sys, numpy as np, tensorflow as tf, tf_embedding
tables = [tf.tpu.experimental.embedding.TableConfig(200, 4, combiner=c, name=f"t{i}")
          for i, c in enumerate(["sum", "mean"])]
features = {f"f{i}": tf.tpu.experimental.embedding.FeatureConfig(table=tables[i % 2], name=f"f{i}")
            for i in range(3)}
emb = tf_embedding.TPUEmbedding(features, tf_embedding.SGD(0.1))
emb.build(per_replica_batch_size=16)
rng = np.random.default_rng(0)
mode = sys.argv[1]
@tf.function(jit_compile=True)
def step(features, weights):
    emb.enqueue(features, weights, training=mode == "train")
    if mode != "train":
        return emb.dequeue()
    with tf.GradientTape() as tape:
        activations = emb.dequeue()
        tape.watch(activations)
        loss = tf.add_n([tf.reduce_sum(a) for a in tf.nest.flatten(activations)])
    emb.apply_gradients(tape.gradient(loss, activations))
    return activations
for _ in range(4):
    lengths = np.full(16, 3)
    ids = {name: tf.RaggedTensor.from_row_lengths(rng.integers(0, 200, 48), lengths)
           for name in features}
    weights = {name: None for name in features}
    if sys.argv[2] != "ragged":
        ids = {name: value.to_sparse() for name, value in ids.items()}
    if sys.argv[2] == "weighted":
        weights = {name: tf.SparseTensor(value.indices, rng.uniform(size=48).astype(np.float32),
                                         value.dense_shape) for name, value in ids.items()}
    step(ids, weights)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["forward", "train"])
@pytest.mark.parametrize("kind", ["sparse", "ragged", "weighted"])
def test_steps_compiled_whole_compile_once_for_batches_of_one_shape(tmp_path, mode, kind):
    """The ids are not baked into the compiled program: each features' row counts, which size
    the split of a table's activations, come from the inputs' shapes inside XLA."""
    result = subprocess.run([sys.executable, "-c", _SAME_SHAPED_BATCHES, mode, kind],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path}"})
    assert result.returncode == 0, result.stderr[-5000:]
    compiles = [name for name in os.listdir(tmp_path)
                if name.endswith(".before_optimizations.txt")]
    assert len(compiles) == 1, compiles
