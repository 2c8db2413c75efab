"""Readers, hashing and the synthetic click log of the `tf-embedding` job."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding.job.data import common, criteo, sources, synthetic, tfrecord
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec, criteo_spec
from tf_embedding.job.options import DataOptions
from tf_embedding.job.evaluation import roc_auc

pytestmark = pytest.mark.unit

SPEC = DataSpec(
    tables=(TableSpec("user", 5000, "sum", head_size=200), TableSpec("item", 2000, "mean"),
            TableSpec("term", 500, "sqrtn"), TableSpec("hour", 24, "sum", zipf_alpha=0.3)),
    features=(FeatureSpec("user_id", "user"), FeatureSpec("item_id", "item"),
              FeatureSpec("history", "item", max_ids=5, effect_scale=0.5),
              FeatureSpec("terms", "term", weighted=True, max_ids=4),
              FeatureSpec("hour", "hour", id_type="string")),
    num_dense=3)


def batch_lists(batch: common.Batch) -> dict:
    """A batch as plain Python values, for comparisons."""
    return {"label": batch["label"].numpy().tolist(), "dense": batch["dense"].numpy().tolist(),
            "ids": {k: v.to_list() for k, v in batch["ids"].items()},
            "weights": {k: v.to_list() for k, v in batch["weights"].items()}}


def synthetic_batch(rows: int = 64, step: int = 0) -> common.Batch:
    return synthetic.SyntheticClickLog(SPEC, seed=3).batch(synthetic.TEST, step, rows)


def int_spec() -> DataSpec:
    """SPEC with integer ids everywhere, so its synthetic batches round-trip through files."""
    features = tuple(FeatureSpec(f.name, f.table, "int", f.weighted, f.max_ids)
                     for f in SPEC.features)
    return DataSpec(SPEC.tables, features, SPEC.num_dense)


def write_tsv(path, lines) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def write_tfrecord(path, records) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def read_all(dataset: tf.data.Dataset, batches: int) -> list[common.Batch]:
    return list(itertools.islice(iter(dataset), batches))


class TestHashing:
    def test_ints_wrap_into_the_vocabulary(self):
        feature = FeatureSpec("f", "t", id_type="int")
        rows = common.to_rows(tf.constant([-7, -1, 0, 9, 10, 2 ** 40], tf.int64), feature, 10)
        assert rows.numpy().tolist() == [3, 9, 0, 9, 0, (2 ** 40) % 10]

    def test_strings_hash_into_the_vocabulary_deterministically(self):
        feature = FeatureSpec("f", "t", id_type="string")
        values = tf.constant([f"{i:08x}" for i in range(2000)])
        rows = common.to_rows(values, feature, 97).numpy()
        assert rows.min() >= 0 and rows.max() < 97
        assert len(set(rows.tolist())) == 97
        np.testing.assert_array_equal(rows, tf.strings.to_hash_bucket_fast(values, 97).numpy())


class TestTsv:
    def test_round_trip_of_a_synthetic_batch(self, tmp_path):
        spec = int_spec()
        batch = synthetic.SyntheticClickLog(spec, seed=1).batch(synthetic.TRAIN, 0, 50)
        path = write_tsv(tmp_path / "a.tsv", criteo.format_lines(batch, spec))
        [read] = read_all(criteo.read_tsv([path], spec, 50), 1)
        assert int(read["malformed"]) == 0
        assert batch_lists(read) == batch_lists(batch)

    def test_malformed_lines_are_dropped_and_counted(self, tmp_path):
        spec = int_spec()
        good = list(criteo.format_lines(
            synthetic.SyntheticClickLog(spec, seed=1).batch(synthetic.TRAIN, 0, 4), spec))
        cells = good[0].split("\t")

        def variant(index: int, value: str) -> str:
            return "\t".join(cells[:index] + [value] + cells[index + 1:])
        bad = [
            "", "garbage", good[0] + "\textra",                 # column count
            variant(0, "2"), variant(0, ""),                      # label
            variant(1, "1.5x"), variant(1, "nan"), variant(1, "1e99"),  # dense
            variant(4, "12a"), variant(4, "1" * 19),              # int id
            variant(7, "3:abc"), variant(7, "3:1:2"),             # weight
        ]
        lines = [good[0], *bad, good[1], good[2], good[3]]
        path = write_tsv(tmp_path / "a.tsv", lines)
        [read] = read_all(criteo.read_tsv([path], spec, len(lines)), 1)
        assert int(read["malformed"]) == len(bad)
        assert read["label"].shape[0] == 4

    def test_missing_values_are_allowed(self, tmp_path):
        spec = int_spec()
        width = criteo.num_columns(spec)
        line = "\t".join(["1"] + [""] * (width - 1))
        path = write_tsv(tmp_path / "a.tsv", [line])
        [read] = read_all(criteo.read_tsv([path], spec, 8, split="eval"), 1)
        assert int(read["malformed"]) == 0
        assert read["dense"].numpy().tolist() == [[0.0] * spec.num_dense]
        assert all(v.to_list() == [[]] for v in read["ids"].values())

    @pytest.mark.slow
    def test_criteo_lines_hash_hex_categories(self, tmp_path):
        spec = criteo_spec()
        line = "\t".join(["0"] + ["5"] * 13 + ["68fd1e64"] * 25 + [""])
        path = write_tsv(tmp_path / "a.tsv", [line])
        [read] = read_all(criteo.read_tsv([path], spec, 8, split="eval"), 1)
        assert int(read["malformed"]) == 0
        for table, feature in zip(spec.tables[:25], spec.features):
            [[row]] = read["ids"][feature.name].to_list()
            assert row == tf.strings.to_hash_bucket_fast("68fd1e64",
                                                         table.vocabulary_size).numpy()
        assert read["ids"]["C26"].to_list() == [[]]

    def test_empty_file_gives_no_batches(self, tmp_path):
        path = write_tsv(tmp_path / "empty.tsv", [])
        assert read_all(criteo.read_tsv([path], SPEC, 8), 3) == []
        assert read_all(criteo.read_tsv([path], SPEC, 8, split="eval"), 3) == []

    def test_resumed_stream_continues_where_it_stopped(self, tmp_path):
        spec = int_spec()
        batch = synthetic.SyntheticClickLog(spec, seed=1).batch(synthetic.TRAIN, 0, 30)
        path = write_tsv(tmp_path / "a.tsv", criteo.format_lines(batch, spec))
        straight = read_all(criteo.read_tsv([path], spec, 4), 12)
        resumed = read_all(criteo.read_tsv([path], spec, 4, start_step=5), 7)
        assert [batch_lists(b) for b in straight[5:]] == [batch_lists(b) for b in resumed]

    def test_holdout_splits_records_without_overlap(self, tmp_path):
        spec = int_spec()
        batch = synthetic.SyntheticClickLog(spec, seed=1).batch(synthetic.TRAIN, 0, 40)
        path = write_tsv(tmp_path / "a.tsv", criteo.format_lines(batch, spec))
        [train] = read_all(criteo.read_tsv([path], spec, 36, holdout_every=10), 1)
        [held] = read_all(criteo.read_tsv([path], spec, 36, 0, 10, "eval"), 1)
        users = batch_lists(batch)["ids"]["user_id"]
        assert train["ids"]["user_id"].to_list() == [u for i, u in enumerate(users) if i % 10 != 9]
        assert held["ids"]["user_id"].to_list() == users[9::10]
        # Windows that cross chunks of the file and its repeats: the kept records, cycled.
        windows = read_all(criteo.read_tsv([path], spec, 7, holdout_every=10), 12)
        kept = [u for i, u in enumerate(users) if i % 10 != 9]
        assert [w["ids"]["user_id"].to_list() for w in windows] == [
            [kept[(7 * k + j) % len(kept)] for j in range(7)] for k in range(12)]


class TestTfRecord:
    def examples(self, spec: DataSpec, rows: int = 6) -> tuple[common.Batch, list[bytes]]:
        batch = synthetic.SyntheticClickLog(spec, seed=2).batch(synthetic.TRAIN, 0, rows)
        return batch, [e.SerializeToString() for e in tfrecord.to_examples(batch, spec)]

    def test_round_trip_of_a_synthetic_batch(self, tmp_path):
        batch, records = self.examples(SPEC)
        path = write_tfrecord(tmp_path / "a.tfrecord", records)
        [read] = read_all(tfrecord.read_tfrecord([path], SPEC, len(records)), 1)
        assert int(read["malformed"]) == 0
        expected = batch_lists(batch)
        # String features are written as the decimal id and read back hashed.
        expected["ids"]["hour"] = [
            [int(tf.strings.to_hash_bucket_fast(str(i), 24)) for i in row]
            for row in expected["ids"]["hour"]]
        assert batch_lists(read) == expected

    @pytest.mark.slow
    def test_malformed_examples_are_dropped_and_counted(self, tmp_path):
        batch, records = self.examples(SPEC, rows=3)

        def edited(**features) -> bytes:
            example = tf.train.Example.FromString(records[0])
            for key, value in features.items():
                if value is None:
                    del example.features.feature[key]
                else:
                    example.features.feature[key].CopyFrom(value)
            return example.SerializeToString()
        floats = lambda *v: tf.train.Feature(float_list=tf.train.FloatList(value=v))  # noqa
        ints = lambda *v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))  # noqa
        bad = [
            b"not an example",
            edited(label=None), edited(label=ints(2)), edited(label=ints(0, 1)),
            edited(dense=floats(1.0)), edited(dense=floats(1.0, float("inf"), 0.0)),
            edited(**{"terms/weights": floats()}),
            edited(user_id=floats(1.0)),  # wrong type: fails to parse on its own
        ]
        path = write_tfrecord(tmp_path / "a.tfrecord", [records[0], *bad, *records[1:]])
        [read] = read_all(tfrecord.read_tfrecord([path], SPEC, len(bad) + 3), 1)
        assert int(read["malformed"]) == len(bad)
        assert read["label"].numpy().tolist() == batch["label"].numpy().tolist()

    def test_window_of_only_bad_records_is_an_empty_batch(self, tmp_path):
        _, records = self.examples(SPEC, rows=2)
        path = write_tfrecord(tmp_path / "a.tfrecord", [b"x", b"y", *records])
        first, second = read_all(tfrecord.read_tfrecord([path], SPEC, 2), 2)
        assert (int(first["malformed"]), first["label"].shape[0]) == (2, 0)
        assert (int(second["malformed"]), second["label"].shape[0]) == (0, 2)

    def test_empty_file_gives_no_batches(self, tmp_path):
        path = write_tfrecord(tmp_path / "empty.tfrecord", [])
        assert read_all(tfrecord.read_tfrecord([path], SPEC, 8), 3) == []


class TestSynthetic:
    def test_batches_are_a_function_of_seed_split_and_step(self):
        a = synthetic.SyntheticClickLog(SPEC, seed=3)
        b = synthetic.SyntheticClickLog(SPEC, seed=3)
        assert batch_lists(a.batch(synthetic.TRAIN, 7, 32)) == \
            batch_lists(b.batch(synthetic.TRAIN, 7, 32))
        assert batch_lists(a.batch(synthetic.TRAIN, 7, 32)) != \
            batch_lists(a.batch(synthetic.TRAIN, 8, 32))
        assert batch_lists(a.batch(synthetic.TRAIN, 7, 32)) != \
            batch_lists(a.batch(synthetic.TEST, 7, 32))
        [from_dataset] = read_all(a.dataset(synthetic.TRAIN, 32, start_step=7), 1)
        assert batch_lists(from_dataset) == batch_lists(a.batch(synthetic.TRAIN, 7, 32))

    def test_ids_are_in_range_and_zipf_distributed(self):
        batch = synthetic_batch(rows=4096)
        for feature in SPEC.features:
            ids = batch["ids"][feature.name]
            lengths = ids.row_lengths().numpy()
            assert lengths.min() >= 1 and lengths.max() <= feature.max_ids
            size = SPEC.table(feature.table).vocabulary_size
            flat = ids.flat_values.numpy()
            assert flat.min() >= 0 and flat.max() < size
        counts = np.sort(np.bincount(batch["ids"]["user_id"].flat_values.numpy()))[::-1]
        assert counts[0] > 20 * counts[50]  # a heavy head
        weights = batch["weights"]["terms"].flat_values.numpy()
        assert weights.min() >= 0.2 and weights.max() <= 1.0

    def test_bayes_auc_is_well_above_chance_and_beats_worse_scores(self):
        batch = synthetic_batch(rows=20000)
        labels = batch["label"].numpy()
        truth = batch["probability"].numpy()
        bayes = roc_auc(labels, truth)
        assert 0.7 < bayes < 0.95
        assert 0.2 < labels.mean() < 0.6
        noisy = truth + np.random.default_rng(0).normal(0, 0.3, truth.shape)
        assert roc_auc(labels, noisy) < bayes - 0.02
        assert abs(roc_auc(labels, np.random.default_rng(1).random(len(labels))) - 0.5) < 0.02


def test_roc_auc_counts_ties_as_half():
    labels = np.array([0, 1, 0, 1, 1, 0, 0])
    scores = np.array([0.1, 0.4, 0.4, 0.8, 0.2, 0.2, 0.9])
    pairs = [(p, n) for p in scores[labels == 1] for n in scores[labels == 0]]
    brute = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs])
    assert roc_auc(labels, scores) == pytest.approx(brute)
    assert np.isnan(roc_auc(np.ones(3), np.arange(3.0)))


def test_source_requires_matching_files(tmp_path):
    options = DataOptions(data="tsv", train_input=[str(tmp_path / "missing-*.tsv")])
    with pytest.raises(ValueError, match="no file matches"):
        sources.Source(options, criteo_spec())


class TestSpec:
    def test_json_round_trip(self):
        assert DataSpec.from_json(SPEC.to_json()) == SPEC

    @pytest.mark.parametrize("change, message", [
        ({"tables": [{"name": "t", "vocabulary_size": 0}]}, "vocabulary_size"),
        ({"features": [{"name": "f", "table": "nope"}]}, "not one of"),
        ({"features": [{"name": "f", "table": "t", "id_type": "float"}]}, "id_type"),
        ({"features": [{"name": "f", "table": "t", "colour": 1}]}, "unknown keys"),
        ({"tables": [{"name": "t", "vocabulary_size": 5, "combiner": "max"}]}, "combiner"),
        ({"dense_transform": "sqrt"}, "dense_transform"),
    ])
    def test_invalid_layouts_name_the_problem(self, change, message):
        layout = {"tables": [{"name": "t", "vocabulary_size": 5}],
                  "features": [{"name": "f", "table": "t"}], "num_dense": 1}
        layout.update(change)
        with pytest.raises(ValueError, match=message):
            DataSpec.from_json(layout)
