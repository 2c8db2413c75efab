"""TfeSparseApply{Sgd,Adagrad,AdagradMomentum,Adam,Ftrl,ProximalAdagrad,Momentum,RMSProp,
ProximalYogi} against a numpy transcription of the optimizer math (tf_tpu_embedding_api.md §2
and docs/feature_columns.md's rule table, ordering of docs/kernels.md).

The reference (references.py) works in float32 in the order the formulas are written and sums
gradients in batch order, then lookup order, as the kernels do; rules made of correctly rounded
operations therefore agree to the last bit, rules with pow to a few ulp.
"""

import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import ops
from tf_embedding import optimizers as opt

from helpers.references import XLA_TOLERANCE, csr
from helpers.tables import assert_same_training, make_variables, random_table
from helpers.tables import reference_training, train_table
from helpers.processes import last_printed_words

pytestmark = pytest.mark.unit


F = np.float32
VOCAB, DIM = 12, 3


# ---------------------------------------------------------------------------------------------
# Running the op.


def step_batches(step):
    """Two batches per step: duplicates within a row, across rows and across batches, empty
    rows, and a batch with no lookups at all on the last step."""
    rng = np.random.default_rng(step)
    first = csr([[(1, 1.0), (1, 0.5), (7, -2.0)], [], [(7, 1.5)], [(step, 0.25), (11, 1.0)]])
    second = csr([[(1, 2.0)], [(3, -1.0), (step + 4, 0.75)]] if step < 2 else [[], []])
    return [(*batch, rng.normal(size=[len(batch[0]) - 1, DIM]).astype(F))
            for batch in (first, second)]


LEARNING_RATES = [0.1, 0.05, 0.2]

OPTIMIZERS = {
    "sgd": lambda: opt.SGD(),
    "adagrad": lambda: opt.Adagrad(initial_accumulator_value=0.1),
    "adagrad_momentum": lambda: opt.AdagradMomentum(momentum=0.9),
    "adagrad_momentum_nesterov": lambda: opt.AdagradMomentum(momentum=0.5, use_nesterov=True),
    "adagrad_momentum_beta2": lambda: opt.AdagradMomentum(momentum=0.9, beta2=0.99),
    "adagrad_momentum_exponent": lambda: opt.AdagradMomentum(momentum=0.9, exponent=3,
                                                             beta2=0.9, use_nesterov=True),
    "adam_lazy": lambda: opt.Adam(),
    "adam_lazy_outside_sqrt": lambda: opt.Adam(sum_inside_sqrt=False, epsilon=1e-3),
    "adam_non_lazy": lambda: opt.Adam(lazy_adam=False),
    "adam_non_lazy_outside_sqrt": lambda: opt.Adam(lazy_adam=False, sum_inside_sqrt=False),
    "ftrl": lambda: opt.FTRL(),
    "ftrl_l1_l2_beta": lambda: opt.FTRL(l1_regularization_strength=0.05,
                                        l2_regularization_strength=0.1, beta=0.2),
    "ftrl_multiply_linear": lambda: opt.FTRL(multiply_linear_by_learning_rate=True),
    "ftrl_multiply_linear_l1_l2_beta": lambda: opt.FTRL(
        multiply_linear_by_learning_rate=True, l1_regularization_strength=0.05,
        l2_regularization_strength=0.1, beta=0.2),
    "ftrl_power": lambda: opt.FTRL(learning_rate_power=-0.3, l1_regularization_strength=0.01),
    "sgd_clip_gradient": lambda: opt.SGD(clipvalue=0.5),
    "adagrad_clip_gradient_asymmetric": lambda: opt.Adagrad(clipvalue=(-0.1, 1.0)),
    "sgd_clip_weight": lambda: opt.SGD(clip_weight_min=-0.3, clip_weight_max=0.4),
    "adam_clip_weight_min_only": lambda: opt.Adam(clip_weight_min=0.0),
    "sgd_weight_decay": lambda: opt.SGD(weight_decay_factor=0.1),
    "adagrad_weight_decay_times_lr": lambda: opt.Adagrad(
        weight_decay_factor=0.5, multiply_weight_decay_factor_by_learning_rate=True),
    "ftrl_all_common_knobs": lambda: opt.FTRL(
        clipvalue=0.8, clip_weight_min=-0.5, clip_weight_max=0.5, weight_decay_factor=0.05,
        l1_regularization_strength=0.01),
    "adam_non_lazy_all_common_knobs": lambda: opt.Adam(
        lazy_adam=False, clipvalue=(0.1, 0.2), clip_weight_max=0.5, weight_decay_factor=0.5,
        multiply_weight_decay_factor_by_learning_rate=True),
    "proximal_adagrad": lambda: opt.ProximalAdagrad(initial_accumulator_value=0.1),
    "proximal_adagrad_l2": lambda: opt.ProximalAdagrad(l2_regularization_strength=0.5),
    "proximal_adagrad_l1_l2": lambda: opt.ProximalAdagrad(
        initial_accumulator_value=0.5, l1_regularization_strength=0.5,
        l2_regularization_strength=0.1),
    "proximal_adagrad_clip_gradient": lambda: opt.ProximalAdagrad(
        clipvalue=0.3, l1_regularization_strength=0.2),
    "momentum": lambda: opt.Momentum(momentum=0.9),
    "momentum_nesterov": lambda: opt.Momentum(momentum=0.5, use_nesterov=True),
    "momentum_clip_weight_and_decay": lambda: opt.Momentum(
        momentum=0.9, clip_weight_min=-0.3, clip_weight_max=0.4, weight_decay_factor=0.1),
    "rms_prop": lambda: opt.RMSProp(),
    "rms_prop_momentum": lambda: opt.RMSProp(rho=0.8, momentum=0.9, epsilon=1e-3),
    "rms_prop_all_common_knobs": lambda: opt.RMSProp(
        momentum=0.5, clipvalue=(-0.5, 0.25), clip_weight_min=-0.5, clip_weight_max=0.5,
        weight_decay_factor=0.5, multiply_weight_decay_factor_by_learning_rate=True),
    "proximal_yogi": lambda: opt.ProximalYogi(),
    "proximal_yogi_beta1_zero": lambda: opt.ProximalYogi(beta1=0.0, beta2=0.5),
    "proximal_yogi_l2": lambda: opt.ProximalYogi(l2_regularization_strength=0.5,
                                                initial_accumulator_value=0.5),
    # v starts above most g^2, so it also decreases.
    "proximal_yogi_l1_l2": lambda: opt.ProximalYogi(
        beta2=0.9, epsilon=0.1, l1_regularization_strength=1.0, l2_regularization_strength=0.1,
        initial_accumulator_value=0.5),
    "proximal_yogi_clip_gradient": lambda: opt.ProximalYogi(
        clipvalue=0.5, l1_regularization_strength=0.01, clip_weight_max=0.3),
}

# Rules that use pow may differ from numpy's pow by an ulp or so (the kernel's x^-0.5 is a
# correctly rounded double sqrt, numpy's float32 pow need not be); the others are bit-exact.
POW_CASES = {case for case in OPTIMIZERS if case.startswith("adagrad_momentum")} | {"ftrl_power"}


def run_apply(optimizer, table, batches_per_step, learning_rates, apply=ops.sparse_apply):
    return train_table(optimizer, table, batches_per_step, learning_rates, apply)


def assert_matches(actual, expected, case):
    assert_same_training(actual, expected, pow_rule=case in POW_CASES)


@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_three_steps_match_numpy(case):
    table = random_table(VOCAB, DIM, scale=0.5)
    batches = [step_batches(step) for step in range(3)]
    actual = run_apply(OPTIMIZERS[case](), table, batches, LEARNING_RATES)
    expected = reference_training(OPTIMIZERS[case](), table, batches, LEARNING_RATES)
    assert_matches(actual, expected, case)


@pytest.mark.parametrize("case", ["adagrad", "adam_lazy", "ftrl", "adam_non_lazy",
                                  "proximal_adagrad_l1_l2", "momentum_nesterov",
                                  "rms_prop_momentum", "proximal_yogi_l1_l2"])
def test_in_tf_function(case):
    table = random_table(VOCAB, DIM, seed=1, scale=0.5)
    batches = [step_batches(step) for step in range(2)]
    optimizer = OPTIMIZERS[case]()

    @tf.function
    def apply(optimizer, table_variable, slot_variables, batches, lr):
        ops.sparse_apply(optimizer, table_variable, slot_variables, batches, lr)

    actual = run_apply(optimizer, table, batches, LEARNING_RATES, apply=apply)
    expected = reference_training(OPTIMIZERS[case](), table, batches, LEARNING_RATES)
    assert_matches(actual, expected, case)


def test_lookups_and_applies_keep_program_order_in_tf_function():
    optimizer = opt.SGD()
    table_variable, slots = make_variables(optimizer, np.zeros([VOCAB, DIM], F))
    batch = csr([[(5, 1.0)]])

    @tf.function
    def step():
        before = ops.embedding_lookup(table_variable, *batch)
        ops.sparse_apply(optimizer, table_variable, slots, [(*batch, np.ones([1, DIM], F))], 1.0)
        return before, ops.embedding_lookup(table_variable, *batch)

    before, after = step()
    np.testing.assert_array_equal(before, np.zeros([1, DIM]))
    np.testing.assert_array_equal(after, -np.ones([1, DIM]))


def test_lazy_updates_only_touched_rows_and_non_lazy_adam_updates_all():
    table = random_table(VOCAB, DIM, seed=2, scale=0.5)
    batches = [(*csr([[(4, 1.0)], []]), np.ones([2, DIM], F))]
    lazy, _ = run_apply(opt.Adagrad(), table, [batches], [0.1])
    untouched = np.arange(VOCAB) != 4
    np.testing.assert_array_equal(lazy[untouched], table[untouched])
    assert np.all(lazy[4] != table[4])
    # Non-lazy Adam decays the momenta of untouched rows, which keeps moving them.
    optimizer = opt.Adam(lazy_adam=False)
    table_variable, slots = make_variables(optimizer, table)
    slots["momenta"].assign(np.full([VOCAB, DIM], 0.5, F))
    ops.sparse_apply(optimizer, table_variable, slots, batches, 0.1)
    assert np.all(table_variable.numpy() != table)


def test_batch_without_lookups_changes_nothing_for_lazy_rules():
    table = random_table(VOCAB, DIM, seed=3, scale=0.5)
    empty = [(*csr([]), np.zeros([0, DIM], F)), (*csr([[], []]), np.zeros([2, DIM], F))]
    for case in ("sgd", "adagrad", "ftrl", "adam_lazy", "proximal_adagrad_l1_l2", "momentum",
                 "rms_prop_momentum", "proximal_yogi_l1_l2"):
        actual, _ = run_apply(OPTIMIZERS[case](), table, [empty], [0.1])
        np.testing.assert_array_equal(actual, table)


def test_update_copies_a_buffer_someone_else_still_holds():
    table_variable, slots = make_variables(opt.Adagrad(),
                                           random_table(VOCAB, DIM, seed=4, scale=0.5))
    snapshot = table_variable.value()  # may alias the variable's buffer
    before = snapshot.numpy().copy()
    ops.sparse_apply(opt.Adagrad(), table_variable, slots,
                     [(*csr([[(0, 1.0)]]), np.ones([1, DIM], F))], 0.1)
    np.testing.assert_array_equal(snapshot.numpy(), before)
    assert np.all(table_variable.numpy()[0] != before[0])


def test_learning_rate_tensor_and_optimizer_schedule():
    optimizer = opt.SGD(learning_rate=lambda: tf.constant(0.25))
    table_variable, slots = make_variables(optimizer, np.zeros([VOCAB, DIM], F))
    ops.sparse_apply(optimizer, table_variable, slots,
                     [(*csr([[(2, 1.0)]]), np.ones([1, DIM], F))], optimizer.learning_rate_tensor())
    np.testing.assert_array_equal(table_variable.numpy()[2], [-0.25] * DIM)


# ---------------------------------------------------------------------------------------------
# Determinism: bit-identical tables whatever the intra-op thread count.

_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
    from tf_embedding import ops, optimizers as opt

    vocab, dim = 30000, 16
    rng = np.random.default_rng(0)
    def batch(rows):
        counts = rng.integers(0, 20, size=rows)
        row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        ids = np.minimum(rng.zipf(1.05, size=row_splits[-1]) - 1, vocab - 1).astype(np.int64)
        gains = rng.normal(size=row_splits[-1]).astype(np.float32)
        return row_splits, ids, gains, rng.normal(size=[rows, dim]).astype(np.float32)
    batches = [batch(3000), batch(1000), batch(2000)]
    table = rng.normal(size=[vocab, dim]).astype(np.float32)
    digest = hashlib.sha256()
    digest.update(ops.embedding_lookup_dense(table, *batches[0][:3]).numpy().tobytes())
    for part in ops.embedding_gradient(batches):
        digest.update(part.numpy().tobytes())
    for optimizer in (opt.Adagrad(), opt.Adam(lazy_adam=False), opt.FTRL(beta=0.1),
                      opt.AdagradMomentum(momentum=0.9, use_nesterov=True),
                      opt.RMSProp(momentum=0.9),
                      opt.ProximalYogi(l1_regularization_strength=0.01)):
        variable = tf.Variable(table)
        # private: TF's slot protocol makes the optimizer's slots (a fresh process: no helpers).
        slots = optimizer._create_slots(
            variable, lambda name, init: tf.Variable(init(table.shape, tf.float32)))
        for step in range(2):
            ops.sparse_apply(optimizer, variable, slots, batches, 0.1)
        digest.update(variable.numpy().tobytes())
        for name in optimizer.slot_names():
            digest.update(slots[name].numpy().tobytes())
    print(digest.hexdigest())
""")


@pytest.mark.slow
def test_results_are_bit_identical_for_one_and_two_threads():
    digests = last_printed_words(_DETERMINISM_SCRIPT,
                                 [((str(threads),), {}) for threads in (1, 2)])
    assert digests[0] == digests[1]


# ---------------------------------------------------------------------------------------------
# Validation.

GOOD_BATCH = (*csr([[(0, 1.0), (2, 1.0)], [(1, 1.0)]]), np.ones([2, DIM], F))


def test_missing_slot_variable_is_a_value_error():
    table_variable, _ = make_variables(opt.Adagrad(), random_table(VOCAB, DIM, scale=0.5))
    with pytest.raises(ValueError, match=r"slot_variables lacks the slots \['accumulators'\]"):
        ops.sparse_apply(opt.Adagrad(), table_variable, {}, [GOOD_BATCH], 0.1)


def _apply_adam(table=None, momenta=None, velocities=None, batches=(GOOD_BATCH,), lr=0.1):
    optimizer = opt.Adam()
    table_variable, slots = make_variables(optimizer, random_table(VOCAB, DIM, scale=0.5))
    table_variable = table if table is not None else table_variable
    slots["momenta"] = momenta if momenta is not None else slots["momenta"]
    slots["velocities"] = velocities if velocities is not None else slots["velocities"]
    ops.sparse_apply(optimizer, table_variable, slots, list(batches), lr, table_name="video")


BAD_APPLIES = [
    ("lr_not_scalar", dict(lr=np.array([0.1, 0.2], F)),
     r"learning_rate must be a scalar, got shape \[2\]"),
    ("lr_nan", dict(lr=float("nan")), "learning_rate must be finite and >= 0, got nan"),
    ("lr_inf", dict(lr=float("-inf")), "learning_rate must be finite and >= 0, got -inf"),
    ("lr_negative", dict(lr=-0.5), "learning_rate must be finite and >= 0, got -0.5"),
    ("slot_shape", dict(velocities=tf.Variable(np.zeros([VOCAB + 1, DIM], F))),
     r"slot 'velocities' has shape \[13,3\] but the table has shape \[12,3\]"),
    ("slot_dtype", dict(momenta=tf.Variable(np.zeros([VOCAB, DIM], np.int32))),
     "slot 'momenta' variable must hold float32, got int32"),
    ("table_rank", dict(table=tf.Variable(np.zeros([VOCAB], F))),
     r"table variable must be a matrix, got shape \[12\]"),
    ("grads_dim", dict(batches=[(*GOOD_BATCH[:3], np.ones([2, DIM + 1], F))]),
     r"activation_gradients have dimension 4 but the table has shape \[12,3\]"),
    ("grads_rows", dict(batches=[GOOD_BATCH, (*GOOD_BATCH[:3], np.ones([3, DIM], F))]),
     r"batch 1: activation_gradients has shape \[3,3\] but must be \[2,3\]"),
    ("id_out_of_range", dict(batches=[GOOD_BATCH, (GOOD_BATCH[0], np.array([0, 12, 12]),
                                                   *GOOD_BATCH[2:])]),
     r"batch 1: id 12 at ids\[1\] is out of range for vocabulary size 12"),
    ("row_splits", dict(batches=[(np.array([0, 3, 1], np.int64), *GOOD_BATCH[1:])]),
     r"batch 0: row_splits must be non-decreasing"),
]


@pytest.mark.parametrize("changes,message", [case[1:] for case in BAD_APPLIES],
                         ids=[case[0] for case in BAD_APPLIES])
def test_apply_rejects(changes, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        _apply_adam(**changes)


# Under XLA the faults of shapes and dtypes are rejected when the kernel compiles, the value
# faults (a non-finite rate, ids outside the table, row_splits out of order) when the CPU custom
# call runs the TF kernel's checks: every fault with the TF kernel's message.
@pytest.mark.parametrize("changes,message", [case[1:] for case in BAD_APPLIES],
                         ids=[case[0] for case in BAD_APPLIES])
def test_xla_apply_rejects(changes, message):
    optimizer = opt.Adam()
    table, slots = make_variables(optimizer, random_table(VOCAB, DIM, scale=0.5))
    table = changes.get("table", table)
    slots.update({name: changes[name] for name in slots if name in changes})

    @tf.function(jit_compile=True)
    def apply(batches, lr):
        ops.sparse_apply(optimizer, table, slots, batches, lr, table_name="video")

    with pytest.raises(tf.errors.InvalidArgumentError, match="Table 'video': " + message):
        apply(list(changes.get("batches", [GOOD_BATCH])), changes.get("lr", 0.1))


def test_apply_rejects_a_variable_passed_twice():
    table_variable, slots = make_variables(opt.Adagrad(), random_table(VOCAB, DIM, scale=0.5))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Table 'video': slot 'accumulators' is the same variable as "
                             "another input"):
        ops.sparse_apply(opt.Adagrad(), table_variable, {"accumulators": table_variable},
                         [GOOD_BATCH], 0.1)


def test_failed_apply_leaves_variables_untouched():
    table = random_table(VOCAB, DIM, scale=0.5)
    table_variable, slots = make_variables(opt.Adagrad(), table)
    bad = (GOOD_BATCH[0], np.array([0, 1, 99]), *GOOD_BATCH[2:])
    with pytest.raises(tf.errors.InvalidArgumentError):
        ops.sparse_apply(opt.Adagrad(), table_variable, slots, [GOOD_BATCH, bad], 0.1)
    np.testing.assert_array_equal(table_variable.numpy(), table)
    np.testing.assert_array_equal(slots["accumulators"].numpy(), np.full_like(table, 0.1))


@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_xla_kernel_matches_the_tf_kernel(case):
    # Two steps of equal shapes and tensor learning rates: one XLA compilation per case.
    table = random_table(VOCAB, DIM, seed=2, scale=0.5)
    batches = [step_batches(step) for step in range(2)]
    learning_rates = [tf.constant(lr) for lr in LEARNING_RATES[:2]]
    expected = run_apply(OPTIMIZERS[case](), table, batches, learning_rates)

    @tf.function(jit_compile=True)
    def apply(*args):
        ops.sparse_apply(*args)

    actual = run_apply(OPTIMIZERS[case](), table, batches, learning_rates, apply=apply)
    for got, want in zip([actual[0], *actual[1]], [expected[0], *expected[1]]):
        np.testing.assert_allclose(got, want, **XLA_TOLERANCE)
