"""Dynamic tables (`TableConfig(dynamic=DynamicVocabulary(...))`) in the sharded `TPUEmbedding`,
against a numpy replay: the index's plain-Python model (helpers/dynamic_index_model.py) composed
with the numpy optimizer rules (helpers/references.py), step by step, for 1, 2 and 4 blocks and
for 2 and 3 MirroredStrategy replicas sharing each global batch.

Checked: each step's activations (a key without a row reads zeros and still counts in a mean's
denominator), the table and its slots (new rows start at their pool row and slot initial values,
keys without a row get no gradient), the statistics, evaluation changing nothing, the
checkpoint round trip (before and after build), and the errors where a dynamic table cannot go.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from helpers import references
from helpers.dynamic_index_model import IndexModel, Options, zipf_key_samples

pytestmark = pytest.mark.unit

DIM = 3
BATCH = 6
LEARNING_RATE = 0.1
STEPS = 12
STATISTICS = ("step", "occupied", "candidates", "admitted", "evicted", "refused")


def _features(dynamic, capacity=12, combiner="mean", batch=BATCH):
    """Two features, `clicked` and `viewed`, of one table `items` (`batch` rows each)."""
    table = tf_embedding.TableConfig(
        vocabulary_size=capacity, dim=DIM, name="items", combiner=combiner,
        initializer=tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=3), dynamic=dynamic)
    return {name: tf_embedding.FeatureConfig(table, name=name, output_shape=[batch])
            for name in ("clicked", "viewed")}


def _embedding(dynamic, capacity=12, blocks=1, combiner="mean", partition_strategy="div",
               optimizer=None, batch=BATCH):
    return tf_embedding.TPUEmbedding(
        _features(dynamic, capacity, combiner, batch),
        optimizer or tf_embedding.Adagrad(LEARNING_RATE),
        table_devices=["/cpu:0"] * blocks if blocks > 1 else None,
        partition_strategy=partition_strategy)


def _batches(steps, seed, key_space=40):
    """Per step: {feature: list of BATCH lists of keys}, Zipf-like keys from a wide id space
    (their ranks scattered over int64) so that blocks fill, keys return and keys age out."""
    rng = np.random.default_rng(seed)
    scatter = rng.integers(0, 2**62, size=key_space)
    batches = []
    for _ in range(steps):
        batches.append({name: zipf_key_samples(rng, scatter, BATCH)
                        for name in ("clicked", "viewed")})
    return batches


def _ragged(samples):
    return tf.ragged.constant(samples, dtype=tf.int64, ragged_rank=1, inner_shape=())


_STEPS = {}


def _run_step(embedding, batch, gradients, training):
    """One step (`training`: enqueue, dequeue and apply; else enqueue and dequeue), each
    embedding's step traced once per mode."""
    if id(embedding) not in _STEPS:
        @tf.function
        def step(features, gradients, training):
            embedding.enqueue(features, training=training)
            activations = embedding.dequeue()
            if training:
                embedding.apply_gradients(gradients)
            return activations
        _STEPS[id(embedding)] = (embedding, step)
    step = _STEPS[id(embedding)][1]
    return {name: value.numpy() for name, value in
            step({name: _ragged(samples) for name, samples in batch.items()},
                 {name: tf.constant(value) for name, value in gradients.items()},
                 training).items()}


class Replay:
    """The numpy model of one dynamic table with Adagrad: the index model, then the rows given
    to new keys reset, then the lookup and the update of the rows the keys map to."""

    def __init__(self, embedding, options: Options, combiner: str):
        variables = _values(embedding)
        self.table = variables["parameters"]
        self.accumulators = variables["accumulators"]
        self.pool = embedding.engine.tables[0].dynamic.pool.numpy()
        self.index = IndexModel(options)
        self.combiner = combiner

    def step(self, batch, gradients, training):
        keys = [key for name in ("clicked", "viewed") for sample in batch[name] for key in sample]
        rows, admitted_rows, pool_rows = self.index.lookup(keys, training)
        row_of = dict(zip(keys, rows))
        for row, pool_row in zip(admitted_rows, pool_rows):
            self.table[row] = self.pool[pool_row]
            self.accumulators[row] = 0.1
        activations, csr_rows = {}, []
        for name in ("clicked", "viewed"):
            output = np.zeros([BATCH, DIM], np.float32)
            for sample_index, sample in enumerate(batch[name]):
                gains = references.combined_gains([1.0] * len(sample), self.combiner)
                kept = [(row_of[key], gain) for key, gain in zip(sample, gains)
                        if row_of[key] >= 0]
                for row, gain in kept:
                    output[sample_index] += np.float32(gain) * self.table[row]
                csr_rows.append(kept)
            activations[name] = output
        if training:
            row_splits, ids, gains = references.csr(csr_rows)
            stacked = np.concatenate([gradients[name] for name in ("clicked", "viewed")])
            references.reference_step(tf_embedding.Adagrad(LEARNING_RATE), self.table,
                                      [self.accumulators],
                                      [(row_splits, ids, gains, stacked)], LEARNING_RATE)
        return activations

    def statistics(self):
        return dict(zip(STATISTICS, (int(v) for v in self.index.state()[2])))


def _values(embedding):
    """The table and its slots, each a numpy array in table row order."""
    values = {}
    for name, blocks in embedding.table_blocks()["items"].items():
        value = np.zeros([12, DIM], np.float32)
        for block in blocks:
            value[list(block.rows)] = block.variable.numpy()
        values[name] = value
    return values


def _check_step(embedding, replay, step, actual, expected):
    """One step's activations and the statistics after it, against the replay's."""
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {step} {name}")
    assert embedding.dynamic_statistics()["items"] == replay.statistics(), step


def _check_table(embedding, replay):
    """The table and its Adagrad slot, against the replay's."""
    values = _values(embedding)
    np.testing.assert_allclose(values["parameters"], replay.table, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values["accumulators"], replay.accumulators, rtol=1e-5,
                               atol=1e-6)


OPTIONS = {
    "admit_at_first": dict(admit_after=1),
    "admit_after_2_evict_after_3": dict(admit_after=2, evict_after_steps=3),
    "refuse_when_full": dict(admit_after=1, refuse_when_full=True),
}


@pytest.mark.parametrize("blocks, strategy", [(1, "div"), (2, "div"), (4, "mod")])
@pytest.mark.parametrize("combiner", ["mean", "sum"])
@pytest.mark.parametrize("rules", sorted(OPTIONS))
def test_training_matches_the_numpy_replay(rules, combiner, blocks, strategy):
    dynamic = tf_embedding.DynamicVocabulary(pool_rows=5, **OPTIONS[rules])
    embedding = _embedding(dynamic, blocks=blocks, combiner=combiner,
                           partition_strategy=strategy)
    embedding.build()
    replay = Replay(embedding, _options_of(embedding, dynamic), combiner)
    rng = np.random.default_rng(7)
    for step, batch in enumerate(_batches(STEPS, seed=blocks)):
        training = step % 4 != 3  # every fourth step evaluates
        gradients = {name: rng.normal(size=[BATCH, DIM]).astype(np.float32)
                     for name in ("clicked", "viewed")}
        _check_step(embedding, replay, step, _run_step(embedding, batch, gradients, training),
                    replay.step(batch, gradients, training))
    _check_table(embedding, replay)
    statistics = embedding.dynamic_statistics()["items"]
    # The stream exercises each rule: full blocks evict (or refuse) keys.
    assert statistics["refused" if rules == "refuse_when_full" else "evicted"] > 0


def test_a_keys_first_row_depends_on_the_key_alone():
    """The same key admitted into tables of 1 and 4 blocks, at different steps, starts at the
    same row of the pool (the initializer's value, chosen by a hash of the key)."""
    dynamic = tf_embedding.DynamicVocabulary(pool_rows=7)
    key = 123_456_789_012
    first_rows = []
    for blocks, earlier_keys in ((1, []), (4, [5, 6, 7])):
        embedding = _embedding(dynamic, blocks=blocks, optimizer=tf_embedding.SGD(0.0))
        if earlier_keys:
            _run_step(embedding, {"clicked": [earlier_keys] + [[]] * 5, "viewed": [[]] * 6},
                      _zero_gradients(), training=True)
        first_rows.append(_run_step(embedding, {"clicked": [[key]] + [[]] * 5,
                                                "viewed": [[]] * 6},
                                    _zero_gradients(), training=True)["clicked"][0])
    np.testing.assert_array_equal(first_rows[0], first_rows[1])
    pool = tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=3)((7, DIM)).numpy()
    assert any(np.array_equal(first_rows[0], row) for row in pool)


def _zero_gradients():
    return {name: np.zeros([BATCH, DIM], np.float32) for name in ("clicked", "viewed")}


@pytest.mark.parametrize("before_build", [True, False], ids=["before_build", "after_build"])
def test_a_checkpoint_holds_the_index_and_continues_identically(before_build, tmp_path):
    dynamic = tf_embedding.DynamicVocabulary(admit_after=2, evict_after_steps=3)
    batches = _batches(8, seed=11)
    gradients = _zero_gradients() | {"clicked": np.ones([BATCH, DIM], np.float32)}
    original = _embedding(dynamic)
    for batch in batches[:4]:
        _run_step(original, batch, gradients, training=True)
    path = tf.train.Checkpoint(embedding=original).save(str(tmp_path / "ckpt"))
    restored = _embedding(dynamic)
    if not before_build:
        restored.build()
    status = tf.train.Checkpoint(embedding=restored).restore(path)
    restored.build()
    status.assert_consumed()
    assert restored.dynamic_statistics() == original.dynamic_statistics()
    for batch in batches[4:]:
        for embedding in (original, restored):
            _run_step(embedding, batch, gradients, training=True)
    assert restored.dynamic_statistics() == original.dynamic_statistics()
    for name, value in _values(original).items():
        np.testing.assert_array_equal(_values(restored)[name], value, err_msg=name)


def test_a_fixed_tables_checkpoint_keys_are_unchanged(tmp_path):
    """Only a dynamic table adds checkpoint entries (its index, pool and exported keys, as
    `<table>.dynamic`)."""
    fixed = _embedding(None)
    fixed.build()
    keys = dict(tf.train.list_variables(
        tf.train.Checkpoint(embedding=fixed).save(str(tmp_path / "fixed"))))
    assert not any("dynamic" in key for key in keys)
    dynamic = _embedding(tf_embedding.DynamicVocabulary())
    dynamic.build()
    dynamic_keys = dict(tf.train.list_variables(
        tf.train.Checkpoint(embedding=dynamic).save(str(tmp_path / "dynamic"))))
    assert sorted(set(dynamic_keys) - set(keys)) == [
        "embedding/items..dynamic/index/.ATTRIBUTES/candidate_records",
        "embedding/items..dynamic/index/.ATTRIBUTES/row_records",
        "embedding/items..dynamic/index/.ATTRIBUTES/stats",
        "embedding/items..dynamic/pool/.ATTRIBUTES/VARIABLE_VALUE",
        "embedding/items..dynamic/serving_keys/key_rows/.ATTRIBUTES/table-keys",
        "embedding/items..dynamic/serving_keys/key_rows/.ATTRIBUTES/table-values"]


def test_a_checkpoint_of_another_capacity_fails_naming_the_table(tmp_path):
    small = _embedding(tf_embedding.DynamicVocabulary(), capacity=12)
    _run_step(small, _batches(1, seed=1)[0], _zero_gradients(), training=True)
    path = tf.train.Checkpoint(embedding=small).save(str(tmp_path / "ckpt"))
    large = _embedding(tf_embedding.DynamicVocabulary(), capacity=16)
    large.build()
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="items"):
        tf.train.Checkpoint(embedding=large).restore(path)


def test_keys_are_any_non_negative_int64_and_negative_ones_are_named():
    embedding = _embedding(tf_embedding.DynamicVocabulary())
    batch = {"clicked": [[2**63 - 1, 0]] + [[]] * 5, "viewed": [[]] * 6}
    _run_step(embedding, batch, _zero_gradients(), training=True)
    assert embedding.dynamic_statistics()["items"]["occupied"] == 2
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'items', feature 'clicked': id -3 at lookup 0 is negative"):
        _run_step(embedding, {"clicked": [[-3]] + [[]] * 5, "viewed": [[]] * 6},
                  _zero_gradients(), training=True)
    assert embedding.dynamic_statistics()["items"]["occupied"] == 2


def test_a_jit_compiled_step_is_refused_naming_the_table():
    embedding = _embedding(tf_embedding.DynamicVocabulary())
    embedding.build()

    @tf.function(jit_compile=True)
    def step(features):
        embedding.enqueue(features, training=False)
        return embedding.dequeue()

    with pytest.raises(ValueError, match="Table items is dynamic.*jit_compile"):
        step({name: _ragged([[1]] * BATCH) for name in ("clicked", "viewed")})


def _options_of(embedding, dynamic):
    """The index model's options for `embedding`'s dynamic table `items`."""
    layout = embedding.engine.tables[0].layout
    return Options(list(layout.rows), strided=layout.strided, pool_rows=5,
                   evict_after_steps=dynamic.evict_after_steps or 0,
                   admit_after=dynamic.admit_after, refuse_when_full=dynamic.refuse_when_full,
                   candidate_capacity=dynamic.candidates(12))


def _replicated_step(strategy, embedding, enqueue_in_replica):
    """A training or forward step on every replica: `enqueue` in cross-replica context with
    per-replica features, or inside strategy.run (`enqueue_in_replica`)."""
    @tf.function
    def step(features, gradients, training):
        if not enqueue_in_replica:
            embedding.enqueue(features, training=training)

        def replica_step(features, gradients):
            if enqueue_in_replica:
                embedding.enqueue(features, training=training)
            activations = embedding.dequeue()
            if training:
                embedding.apply_gradients(gradients)
            return activations

        return strategy.run(replica_step, args=(features, gradients))
    return step


@pytest.mark.parametrize("enqueue_in_replica", [False, True])
@pytest.mark.parametrize("replicas, blocks", [(2, 1), (3, 2)])
def test_replicas_count_the_global_batch_once(replicas, blocks, enqueue_in_replica):
    """MirroredStrategy's replicas, each with its share of the global batch, train the table
    as the numpy replay of the global batch does: one index step per global step."""
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{r}" for r in range(replicas)])
    dynamic = tf_embedding.DynamicVocabulary(pool_rows=5, admit_after=2, evict_after_steps=3)
    with strategy.scope():
        embedding = _embedding(dynamic, blocks=blocks, batch=BATCH // replicas)
        embedding.build()
    replay = Replay(embedding, _options_of(embedding, dynamic), "mean")
    step = _replicated_step(strategy, embedding, enqueue_in_replica)
    share = BATCH // replicas

    def per_replica(values):
        return strategy.experimental_distribute_values_from_function(
            lambda context: values(slice(context.replica_id_in_sync_group * share,
                                         (context.replica_id_in_sync_group + 1) * share)))

    rng = np.random.default_rng(11)
    for number, batch in enumerate(_batches(STEPS, seed=replicas)):
        training = number % 4 != 3
        gradients = {name: rng.normal(size=[BATCH, DIM]).astype(np.float32)
                     for name in ("clicked", "viewed")}
        outputs = step(per_replica(lambda rows: {name: _ragged(samples[rows])
                                                 for name, samples in batch.items()}),
                       per_replica(lambda rows: {name: tf.constant(value[rows])
                                                 for name, value in gradients.items()}),
                       training)
        _check_step(embedding, replay, number,
                    {name: np.concatenate([value.numpy() for value in
                                           strategy.experimental_local_results(output)])
                     for name, output in outputs.items()},
                    replay.step(batch, gradients, training))
    _check_table(embedding, replay)
    assert embedding.dynamic_statistics()["items"]["evicted"] > 0


def test_a_training_enqueue_of_one_replica_of_several_is_refused_naming_the_table():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        embedding = _embedding(tf_embedding.DynamicVocabulary(), batch=BATCH // 2)
    features = {name: _ragged([[1]] * (BATCH // 2)) for name in ("clicked", "viewed")}
    with pytest.raises(ValueError, match="Table items is dynamic.*every replica in one call"):
        embedding.enqueue(features, training=True, device="/cpu:1")
    embedding.enqueue(features, training=False, device="/cpu:1")  # a forward-only batch may


@pytest.mark.parametrize("options, message", [
    (dict(admit_after=0), "admit_after"),
    (dict(evict_after_steps=1), "evict_after_steps"),
    (dict(pool_rows=True), "pool_rows"),
    (dict(refuse_when_full="yes"), "refuse_when_full"),
])
def test_invalid_options_are_named(options, message):
    with pytest.raises((ValueError, TypeError), match=f"DynamicVocabulary.*{message}"):
        tf_embedding.DynamicVocabulary(**options)


def test_a_dynamic_option_of_another_type_is_refused():
    with pytest.raises(TypeError, match="dynamic"):
        tf_embedding.TableConfig(vocabulary_size=4, dim=2, name="t", dynamic={"admit_after": 1})


def test_a_key_of_the_previous_step_keeps_its_row():
    """A pipelined enqueue looks step N + 1 up before step N's gradients are applied: a full
    block gives away no row looked up in step N (the new key is refused), only older ones."""
    embedding = _embedding(tf_embedding.DynamicVocabulary(), capacity=2)
    statistics = []
    for keys in ([11, 12], [13], [13]):
        _run_step(embedding, {"clicked": [keys] + [[]] * 5, "viewed": [[]] * 6},
                  _zero_gradients(), training=True)
        statistics.append(embedding.dynamic_statistics()["items"])
    assert [(s["occupied"], s["admitted"], s["evicted"], s["refused"]) for s in statistics] == [
        (2, 2, 0, 0), (2, 2, 0, 1), (2, 3, 1, 1)]


def test_a_v0_embedding_refuses_a_dynamic_table():
    """TPUEmbeddingV0 reads ids as rows (TPUEmbeddingForServing serves a dynamic table by its
    keys: serving/test_dynamic_serving.py)."""
    with pytest.raises(ValueError, match="Table items is dynamic.*cannot hold"):
        tf_embedding.TPUEmbeddingV0(_features(tf_embedding.DynamicVocabulary()),
                                    tf_embedding.Adagrad(LEARNING_RATE))
