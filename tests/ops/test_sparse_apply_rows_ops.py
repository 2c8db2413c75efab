"""TfeSparseApply<Optimizer>Rows (ops.sparse_apply_rows): updates from gradient rows already
summed per id, e.g. one (unique_ids, rows) pair per replica, against the numpy references.

A pair is the CSR batch with one lookup of gain 1 per id, so references.reference_step on those
batches gives the expected tables: the op sums an id's rows in pair order, as the reference sums
lookups in batch order. The rules built from correctly rounded operations agree to the last bit,
the rules with pow to a few ulp (as in test_optimizer_ops.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import ops
from tf_embedding import optimizers as opt

from helpers.references import XLA_TOLERANCE, csr
from helpers.tables import assert_same_training, make_variables, random_table
from helpers.tables import reference_training, train_table

pytestmark = pytest.mark.unit


F = np.float32
VOCAB, DIM = 12, 3

OPTIMIZERS = {
    "sgd": lambda: opt.SGD(),
    "sgd_clip_and_decay": lambda: opt.SGD(clipvalue=0.5, clip_weight_min=-0.4,
                                          clip_weight_max=0.4, weight_decay_factor=0.1),
    "adagrad": lambda: opt.Adagrad(initial_accumulator_value=0.1),
    "adagrad_momentum": lambda: opt.AdagradMomentum(momentum=0.9),
    "adagrad_momentum_nesterov_beta2_exponent": lambda: opt.AdagradMomentum(
        momentum=0.5, use_nesterov=True, beta2=0.9, exponent=3),
    "adam_lazy": lambda: opt.Adam(),
    "adam_non_lazy": lambda: opt.Adam(lazy_adam=False),
    "adam_non_lazy_outside_sqrt": lambda: opt.Adam(lazy_adam=False, sum_inside_sqrt=False,
                                                   epsilon=1e-3),
    "ftrl": lambda: opt.FTRL(),
    "ftrl_l1_l2_beta_multiply_linear": lambda: opt.FTRL(
        l1_regularization_strength=0.05, l2_regularization_strength=0.1, beta=0.2,
        multiply_linear_by_learning_rate=True),
    "ftrl_power": lambda: opt.FTRL(learning_rate_power=-0.3),
    "proximal_adagrad_l1_l2": lambda: opt.ProximalAdagrad(
        initial_accumulator_value=0.5, l1_regularization_strength=0.5,
        l2_regularization_strength=0.1),
    "momentum_nesterov_clip": lambda: opt.Momentum(momentum=0.9, use_nesterov=True,
                                                   clipvalue=0.5),
    "rms_prop_momentum": lambda: opt.RMSProp(rho=0.8, momentum=0.9, epsilon=1e-3),
    "proximal_yogi_l1_l2": lambda: opt.ProximalYogi(
        beta2=0.9, epsilon=0.1, l1_regularization_strength=1.0, l2_regularization_strength=0.1,
        initial_accumulator_value=0.5),
}

# Rules whose pow may differ from numpy's by an ulp or so; the others are bit-exact.
POW_CASES = {"adagrad_momentum", "adagrad_momentum_nesterov_beta2_exponent", "ftrl_power"}

# One pair, then three whose ids overlap (11 in all three, 5 in two).
ONE_PAIR = [[1, 4, 7, 11]]
THREE_PAIRS = [[0, 5, 11], [3, 5, 6, 11], [1, 11]]
LEARNING_RATES = [0.1, 0.05]


def pairs_of(id_lists, seed):
    """(unique_ids int64, rows float32 [U, DIM]) per id list, with random rows."""
    rng = np.random.default_rng(seed)
    return [(np.array(ids, np.int64), rng.normal(size=[len(ids), DIM]).astype(F))
            for ids in id_lists]


def as_batches(pairs):
    """Each pair as the CSR batch it stands for: one lookup of gain 1 per id."""
    return [(*csr([[(int(i), 1.0)] for i in ids]), rows) for ids, rows in pairs]


def run(optimizer, table, pairs_per_step, apply=ops.sparse_apply_rows):
    return train_table(optimizer, table, pairs_per_step, LEARNING_RATES, apply)


def run_reference(optimizer, table, pairs_per_step):
    return reference_training(optimizer, table, [as_batches(pairs) for pairs in pairs_per_step],
                              LEARNING_RATES)


def assert_matches(actual, expected, case):
    assert_same_training(actual, expected, pow_rule=case in POW_CASES)


@pytest.mark.parametrize("id_lists", [ONE_PAIR, THREE_PAIRS], ids=["one_pair", "three_pairs"])
@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_two_steps_match_numpy(case, id_lists):
    table = random_table(VOCAB, DIM, scale=0.5)
    steps = [pairs_of(id_lists, seed) for seed in range(len(LEARNING_RATES))]
    actual = run(OPTIMIZERS[case](), table, steps)
    expected = run_reference(OPTIMIZERS[case](), table, steps)
    assert_matches(actual, expected, case)


@pytest.mark.parametrize("case", ["adagrad", "adam_non_lazy", "ftrl", "adagrad_momentum",
                                  "proximal_adagrad_l1_l2", "momentum_nesterov_clip",
                                  "rms_prop_momentum", "proximal_yogi_l1_l2"])
def test_same_bits_as_the_equivalent_csr_batches(case):
    """What the sharded engine computed before this op: the pairs as CSR batches of gain 1."""
    table = random_table(VOCAB, DIM, seed=1, scale=0.5)
    steps = [pairs_of(THREE_PAIRS, seed) for seed in range(len(LEARNING_RATES))]

    def apply_batches(optimizer, table_variable, slot_variables, pairs, lr):
        ops.sparse_apply(optimizer, table_variable, slot_variables, as_batches(pairs), lr)

    rows = run(OPTIMIZERS[case](), table, steps)
    batches = run(OPTIMIZERS[case](), table, steps, apply=apply_batches)
    for got, want in zip([rows[0], *rows[1]], [batches[0], *batches[1]]):
        np.testing.assert_array_equal(got, want)


def test_in_tf_function():
    table = random_table(VOCAB, DIM, seed=2, scale=0.5)
    steps = [pairs_of(THREE_PAIRS, seed) for seed in range(len(LEARNING_RATES))]

    @tf.function
    def apply(optimizer, table_variable, slot_variables, pairs, lr):
        ops.sparse_apply_rows(optimizer, table_variable, slot_variables, pairs, lr)

    actual = run(opt.Adagrad(), table, steps, apply=apply)
    expected = run_reference(opt.Adagrad(), table, steps)
    assert_matches(actual, expected, "adagrad")


def test_empty_pairs_change_nothing_for_lazy_rules():
    table = random_table(VOCAB, DIM, seed=3, scale=0.5)
    empty = [(np.zeros([0], np.int64), np.zeros([0, DIM], F))] * 2
    for case in ("sgd", "adagrad", "ftrl", "adam_lazy", "proximal_adagrad_l1_l2",
                 "momentum_nesterov_clip", "rms_prop_momentum", "proximal_yogi_l1_l2"):
        actual, _ = run(OPTIMIZERS[case](), table, [empty])
        np.testing.assert_array_equal(actual, table)


# ---------------------------------------------------------------------------------------------
# Validation: every bad input raises InvalidArgumentError naming the table, and changes nothing.

IDS = np.array([1, 4], np.int64)
ROWS = np.ones([2, DIM], F)

BAD_PAIRS = [
    ("not_ascending", [(IDS, ROWS), (np.array([4, 3], np.int64), ROWS)],
     r"batch 1: unique_ids must be strictly ascending, but unique_ids\[1\] = 3 <= "
     r"unique_ids\[0\] = 4"),
    ("duplicate", [(np.array([2, 5, 5], np.int64), np.ones([3, DIM], F))],
     r"batch 0: unique_ids must be strictly ascending, but unique_ids\[2\] = 5 <= "
     r"unique_ids\[1\] = 5"),
    ("negative", [(np.array([-1, 4], np.int64), ROWS)],
     r"batch 0: id -1 at unique_ids\[0\] is negative"),
    ("out_of_range", [(IDS, ROWS), (np.array([0, 5, 12], np.int64), np.ones([3, DIM], F))],
     r"batch 1: id 12 at unique_ids\[2\] is out of range for vocabulary size 12"),
    ("ids_not_vector", [(IDS.reshape([2, 1]), ROWS)],
     r"batch 0: unique_ids must be a vector, got shape \[2,1\]"),
    ("rows_not_matrix", [(IDS, np.ones([2 * DIM], F))],
     r"batch 0: rows must be a matrix, got shape \[6\]"),
    ("rows_count", [(IDS, ROWS), (IDS, np.ones([3, DIM], F))],
     r"batch 1: rows has shape \[3,3\] but must be \[2,3\] \(one row per unique id, of the "
     r"embedding dimension\)"),
    ("rows_dim_across_pairs", [(IDS, ROWS), (IDS, np.ones([2, DIM + 1], F))],
     r"batch 1: rows has shape \[2,4\] but must be \[2,3\]"),
    ("rows_dim_of_table", [(IDS, np.ones([2, DIM + 1], F))],
     r"rows have dimension 4 but the table has shape \[12,3\]"),
]


@pytest.mark.parametrize("pairs,message", [case[1:] for case in BAD_PAIRS],
                         ids=[case[0] for case in BAD_PAIRS])
def test_rejects(pairs, message):
    table = random_table(VOCAB, DIM, seed=4, scale=0.5)
    table_variable, slots = make_variables(opt.Adam(lazy_adam=False), table)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        ops.sparse_apply_rows(opt.Adam(lazy_adam=False), table_variable, slots, pairs, 0.1)
    np.testing.assert_array_equal(table_variable.numpy(), table)


@pytest.mark.parametrize("lr,message", [
    (np.array([0.1, 0.2], F), r"learning_rate must be a scalar, got shape \[2\]"),
    (float("nan"), "learning_rate must be finite and >= 0, got nan"),
])
def test_rejects_bad_learning_rate(lr, message):
    table_variable, slots = make_variables(opt.Adagrad(), random_table(VOCAB, DIM, scale=0.5))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        ops.sparse_apply_rows(opt.Adagrad(), table_variable, slots, [(IDS, ROWS)], lr)


def test_python_side_errors():
    table_variable, slots = make_variables(opt.Adagrad(), random_table(VOCAB, DIM, scale=0.5))
    with pytest.raises(ValueError, match="id_row_pairs must hold at least one"):
        ops.sparse_apply_rows(opt.Adagrad(), table_variable, slots, [], 0.1)
    with pytest.raises(ValueError, match=r"slot_variables lacks the slots \['accumulators'\]"):
        ops.sparse_apply_rows(opt.Adagrad(), table_variable, {}, [(IDS, ROWS)], 0.1)


# Every rule and option meets its XLA kernel in test_optimizer_ops.py; the rows op only reads
# its gradients differently, so a lazy, a non-lazy and a proximal rule cover it.
@pytest.mark.parametrize("case", ["sgd_clip_and_decay", "adam_non_lazy", "proximal_yogi_l1_l2"])
def test_xla_kernel_matches_the_tf_kernel(case):
    table = random_table(VOCAB, DIM, seed=2, scale=0.5)
    # Steps of equal shapes; with tensor learning rates, one XLA compilation per case.
    steps = [pairs_of(THREE_PAIRS, seed) for seed in range(len(LEARNING_RATES))]
    expected = run(OPTIMIZERS[case](), table, steps)

    @tf.function(jit_compile=True)
    def compiled(*args):
        ops.sparse_apply_rows(*args)

    def apply(optimizer, table_variable, slot_variables, pairs, lr):
        compiled(optimizer, table_variable, slot_variables, pairs, tf.constant(lr))

    actual = run(OPTIMIZERS[case](), table, steps, apply=apply)
    for got, want in zip([actual[0], *actual[1]], [expected[0], *expected[1]]):
        np.testing.assert_allclose(got, want, **XLA_TOLERANCE)
