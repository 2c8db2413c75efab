"""TfeDecodeTsv (criteo.decode_labeled_lines, what training reads TSV with) against the same
rules written as stock TensorFlow string ops (criteo.decode_lines, what serving graphs run):
equal validity on valid and malformed lines, and bit-equal labels, dense values, rows and
weights on the valid ones; bad attrs and inputs fail with errors that say what is wrong."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import _loader
from tf_embedding.job.data import criteo, input_ops, synthetic
from tf_embedding.job.data.spec import DataSpec, FeatureSpec, TableSpec

pytestmark = pytest.mark.unit

SPEC = DataSpec(
    tables=(TableSpec("user", 5000, "sum", head_size=200), TableSpec("term", 500, "sqrtn"),
            TableSpec("hour", 24, "sum", zipf_alpha=0.3)),
    features=(FeatureSpec("user_id", "user"),
              FeatureSpec("history", "user", max_ids=5),
              FeatureSpec("terms", "term", weighted=True, max_ids=4),
              FeatureSpec("hour", "hour", id_type="string"),
              FeatureSpec("tagged", "term", id_type="string", weighted=True, max_ids=3)),
    num_dense=3)
# The same columns read as dynamic tables' keys: ints as they are, strings hashed into int64.
DYNAMIC_SPEC = dataclasses.replace(SPEC, tables=tuple(
    dataclasses.replace(table, dynamic={}) for table in SPEC.tables))

# Cells that the rules accept, and cells that they reject, for each kind of column.
DENSE_CELLS = ["0", "1", "-2.5", "+.5e-3", "1.", ".25", "3E+2", "", "1e-50", "123456789012"]
BAD_DENSE_CELLS = ["abc", "1e999", "nan", "inf", " 1", "1 ", "-", "1e", ".", "0x10", "1.2.3",
                   "+-1", "e5"]
INT_TOKENS = ["7", "-5", "0", "123456789012345678", "4999", "5000", "-123456789012345678"]
BAD_INT_TOKENS = ["1234567890123456789", "12a", "+5", "-", "1.0", " 3", "x"]
STRING_TOKENS = ["a", "7", "hello world", "é", "-", "1e5"]
WEIGHTS = ["", ":0.5", ":1", ":-2", ":1e3", ":.5"]
BAD_WEIGHTS = [":", ":abc", ":1:2", ":1e999", ":nan"]


def _cell(rng: np.random.Generator, choices: list[str]) -> str:
    return choices[rng.integers(len(choices))]


def _ids_cell(rng: np.random.Generator, feature: FeatureSpec, bad: bool) -> str:
    tokens = []
    for _ in range(rng.integers(0, 4)):
        token = _cell(rng, STRING_TOKENS if feature.id_type == "string" else INT_TOKENS)
        if feature.weighted:
            token += _cell(rng, WEIGHTS)
        tokens.append(token)
    if bad:
        if feature.weighted and rng.integers(2):
            tokens.append(_cell(rng, ["5", "a"]) + _cell(rng, BAD_WEIGHTS))
        elif feature.weighted:
            tokens.append(_cell(rng, BAD_WEIGHTS))  # no id before the weight
        elif feature.id_type == "int":
            tokens.append(_cell(rng, BAD_INT_TOKENS))
        else:
            tokens.append("")  # skipped, like the empty tokens of ",,": the line stays valid
    # Empty tokens (",,", a trailing ",") are skipped.
    return ",".join(tokens) + ("," if rng.integers(4) == 0 else "")


def _line(rng: np.random.Generator) -> str:
    """A line with one defect at most (a defect in one cell, or a wrong number of cells)."""
    defect = rng.integers(8)
    label = _cell(rng, ["2", "", "01", " 1"]) if defect == 1 else _cell(rng, ["0", "1"])
    dense = [_cell(rng, DENSE_CELLS) for _ in range(SPEC.num_dense)]
    if defect == 2:
        dense[rng.integers(len(dense))] = _cell(rng, BAD_DENSE_CELLS)
    bad_feature = rng.integers(len(SPEC.features)) if defect == 3 else -1
    cells = [label, *dense] + [_ids_cell(rng, f, i == bad_feature)
                               for i, f in enumerate(SPEC.features)]
    if defect == 4:
        cells = cells[:-1] if rng.integers(2) else cells + [""]
    return "\t".join(cells)


def _assert_equal_on_valid_rows(lines: list[str], spec: DataSpec = SPEC) -> np.ndarray:
    batch = tf.constant(lines)
    ours, our_valid = criteo.decode_labeled_lines(batch, spec)
    theirs, their_valid = criteo.decode_lines(batch, spec)
    valid = their_valid.numpy()
    np.testing.assert_array_equal(our_valid.numpy(), valid)
    np.testing.assert_array_equal(ours["label"].numpy()[valid], theirs["label"].numpy()[valid])
    np.testing.assert_array_equal(ours["dense"].numpy()[valid], theirs["dense"].numpy()[valid])
    for group in ("ids", "weights"):
        assert ours[group].keys() == theirs[group].keys()
        for name, value in theirs[group].items():
            mine = ours[group][name].to_list()
            expected = value.to_list()
            for row in np.flatnonzero(valid):
                assert mine[row] == expected[row], (group, name, lines[row])
    return valid


@pytest.mark.parametrize("spec", [SPEC, DYNAMIC_SPEC], ids=["rows", "keys"])
def test_random_lines_valid_and_malformed_decode_as_the_string_ops_do(spec):
    rng = np.random.default_rng(11)
    valid = _assert_equal_on_valid_rows([_line(rng) for _ in range(3000)], spec)
    # Both kinds are there in numbers.
    assert 500 < valid.sum() < 2500


def test_keys_are_read_as_they_are_and_strings_hashed_into_int64():
    line = "1\t0\t0\t0\t123456789012345678\t-5,7\t3:0.5\tabc\t"
    batch, valid = criteo.decode_labeled_lines(tf.constant([line]), DYNAMIC_SPEC)
    assert valid.numpy().all()
    assert batch["ids"]["user_id"].to_list() == [[123456789012345678]]
    assert batch["ids"]["history"].to_list() == [[-5, 7]]
    assert batch["ids"]["hour"].to_list() == [
        [int(tf.strings.to_hash_bucket_fast("abc", 2**63 - 1))]]


def test_lines_of_a_synthetic_batch_decode_as_the_string_ops_do():
    batch = synthetic.SyntheticClickLog(SPEC, seed=4).batch(synthetic.TRAIN, 0, 256)
    valid = _assert_equal_on_valid_rows(list(criteo.format_lines(batch, SPEC)))
    assert valid.all()


def test_empty_batch_and_empty_lines():
    assert _assert_equal_on_valid_rows(["", "\t", "1"]).tolist() == [False] * 3
    decoded = input_ops.decode_tsv(tf.constant([], tf.string), 2,
                                   [input_ops.TsvFeature("f", False, True, 5)])
    assert decoded.dense.shape == [0, 2]
    assert decoded.ids[0].shape[0] == 0 and decoded.weights[0].shape[0] == 0


def test_bad_attrs_and_inputs_fail_with_clear_errors():
    decode = _loader.load_ops().tfe_decode_tsv
    lines = tf.constant(["1\t5"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature 'f': vocabulary size"):
        decode(lines=lines, num_dense=0, num_features=1, num_weighted=0, feature_names=["f"],
               string_ids=[False], weighted=[False], vocabulary_sizes=[0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_features = 2 entries"):
        decode(lines=lines, num_dense=0, num_features=2, num_weighted=0, feature_names=["f"],
               string_ids=[False], weighted=[False], vocabulary_sizes=[3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_weighted is 0 but 1"):
        decode(lines=lines, num_dense=0, num_features=1, num_weighted=0, feature_names=["f"],
               string_ids=[False], weighted=[True], vocabulary_sizes=[3])
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="rank 1|vector"):
        decode(lines=tf.constant([["1\t5"]]), num_dense=0, num_features=1, num_weighted=0,
               feature_names=["f"], string_ids=[False], weighted=[False], vocabulary_sizes=[3])
