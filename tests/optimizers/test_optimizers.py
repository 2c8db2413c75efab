"""Embedding optimizers against stock TF 2.21: arguments, validation, equality, slots, attrs."""

import inspect
import math
import re

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import optimizers

from helpers.errors import error_of

pytestmark = pytest.mark.unit

stock = tf.tpu.experimental.embedding

NAMES = ["SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL"]
SLOTTED = ["Adagrad", "AdagradMomentum", "Adam", "FTRL"]


def _pair(name):
    return getattr(optimizers, name), getattr(stock, name)


# ---------------------------------------------------------------------------------------------
# Signatures, attributes

@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_tf(name):
    ours, theirs = _pair(name)
    ours_params = [(p.name, p.default, p.kind) for p in
                   inspect.signature(ours).parameters.values()]
    theirs_params = [(p.name, p.default, p.kind) for p in
                     inspect.signature(theirs).parameters.values()]
    assert ours_params == theirs_params


def _kwargs_for(name):
    """Non-default arguments accepted by `name`, to compare stored attributes."""
    common = dict(learning_rate=0.5, clip_weight_min=-2.0, clip_weight_max=3.0,
                  weight_decay_factor=0.01,
                  multiply_weight_decay_factor_by_learning_rate=True, clipvalue=(-1.0, None),
                  low_dimensional_packing_status=True)
    extra = {
        "SGD": dict(),
        "Adagrad": dict(initial_accumulator_value=0.3, slot_variable_creation_fn=print),
        "AdagradMomentum": dict(momentum=0.9, use_nesterov=True, exponent=4, beta2=0.99,
                                epsilon=1e-3, slot_variable_creation_fn=print),
        "Adam": dict(beta_1=0.8, beta_2=0.99, epsilon=1e-3, lazy_adam=False,
                     sum_inside_sqrt=False, slot_variable_creation_fn=print),
        "FTRL": dict(learning_rate_power=-0.7, l1_regularization_strength=0.1,
                     l2_regularization_strength=0.2, beta=0.3, initial_accumulator_value=0.4,
                     multiply_linear_by_learning_rate=True, allow_zero_accumulator=True,
                     slot_variable_creation_fn=print),
    }[name]
    return {**common, **extra}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("defaults", [True, False])
def test_attributes_match_tf(name, defaults):
    ours, theirs = _pair(name)
    kwargs = {} if defaults else _kwargs_for(name)
    assert list(vars(ours(**kwargs)).items()) == list(vars(theirs(**kwargs)).items())


@pytest.mark.parametrize("clipvalue,expected", [
    (None, (None, None)), (2.0, (-2.0, 2.0)), (3, (-3.0, 3)), ((None, 1.5), (None, 1.5)),
    ((-1.0, None), (-1.0, None)), ((-0.5, 2.0), (-0.5, 2.0)), (0.0, (-0.0, 0.0))])
@pytest.mark.parametrize("name", NAMES)
def test_clipvalue(name, clipvalue, expected):
    ours, theirs = _pair(name)
    optimizer, stock_optimizer = ours(clipvalue=clipvalue), theirs(clipvalue=clipvalue)
    assert (optimizer.clip_gradient_min, optimizer.clip_gradient_max) == expected
    assert (stock_optimizer.clip_gradient_min, stock_optimizer.clip_gradient_max) == expected


# ---------------------------------------------------------------------------------------------
# Validation

COMMON_ERRORS = [
    dict(use_gradient_accumulation=False, clipvalue=1.0),
    dict(use_gradient_accumulation=False, clipvalue=(None, 1.0)),
    dict(clipvalue=[1.0, 2.0]),
]
SLOT_FN_ERRORS = [dict(slot_variable_creation_fn="not callable"),
                  # The slot function check comes first.
                  dict(slot_variable_creation_fn=1, use_gradient_accumulation=False,
                       clipvalue=1.0)]
SPECIFIC_ERRORS = {
    "Adagrad": [dict(initial_accumulator_value=0.0), dict(initial_accumulator_value=-1),
                dict(initial_accumulator_value=0, slot_variable_creation_fn=2)],
    "AdagradMomentum": [dict(epsilon=0.0), dict(epsilon=-1.0), dict(exponent=0),
                        dict(exponent=-2.0), dict(epsilon=0.0, exponent=0)],
    "Adam": [dict(beta_1=1.0), dict(beta_1=-0.1), dict(beta_1=1.5, beta_2=1.5),
             dict(epsilon=0.0), dict(epsilon=-1e-3), dict(beta_1=1.0, epsilon=0.0)],
    "FTRL": [dict(initial_accumulator_value=0.0), dict(initial_accumulator_value=-0.1)],
}
MATCHING_ERRORS = (
    [(name, kwargs) for name in NAMES for kwargs in COMMON_ERRORS]
    + [(name, kwargs) for name in SLOTTED for kwargs in SLOT_FN_ERRORS]
    + [(name, kwargs) for name, cases in SPECIFIC_ERRORS.items() for kwargs in cases])


@pytest.mark.parametrize("name,kwargs", MATCHING_ERRORS)
def test_errors_match_tf(name, kwargs):
    ours, theirs = _pair(name)
    expected = error_of(theirs, **kwargs)
    assert expected is not None
    assert error_of(ours, **kwargs) == expected


@pytest.mark.parametrize("name,kwargs,error,message", [
    ("Adagrad", dict(slot_variable_creation_fn="x"), ValueError,
     "Argument `slot_variable_creation_fn` must be either None or a callable. Received: x"),
    ("SGD", dict(use_gradient_accumulation=False, clipvalue=1.0), ValueError,
     "When `use_gradient_accumulation` is False, gradient clipping cannot be used and "
     "`clipvalue` should be left as None. Received value 1.0 for argument `clipvalue`."),
    ("SGD", dict(clipvalue=[1.0, 2.0]), TypeError,
     "can't multiply sequence by non-int of type 'float'"),
    ("Adagrad", dict(initial_accumulator_value=0.0), ValueError,
     "Argument `initial_accumulator_value` must be a positive float. Received: 0.0"),
    ("AdagradMomentum", dict(epsilon=0), ValueError, "Adagrad momentum: epsilon must be positive"),
    ("AdagradMomentum", dict(exponent=0), ValueError,
     "Adagrad momentum: Precondition exponent must >0"),
    ("Adam", dict(beta_1=1.0), ValueError,
     "Argument `beta_1` must be >= 0 and < 1. Received: 1.0."),
    ("Adam", dict(epsilon=0.0), ValueError, "epsilon must be positive; got 0.0."),
    ("FTRL", dict(initial_accumulator_value=-1), ValueError,
     "Argument `initial_accumulator_value` must be a positive float. Received: -1"),
])
def test_error_messages(name, kwargs, error, message):
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        getattr(optimizers, name)(**kwargs)


def test_adam_beta_2_message_prints_beta_2():
    """TF 2.21 prints beta_1's value here (a bug, fixed)."""
    with pytest.raises(ValueError, match=re.escape(
            "Argument `beta_2` must be >= 0 and < 1. Received: 1.0.")):
        optimizers.Adam(beta_1=0.5, beta_2=1.0)
    with pytest.raises(ValueError, match=re.escape("Received: 0.5.")):
        stock.Adam(beta_1=0.5, beta_2=1.0)


def test_adam_non_lazy_needs_gradient_accumulation():
    """TF 2.21's message tells the user to set the flag to False, the opposite of the fix."""
    with pytest.raises(ValueError, match=re.escape(
            "When disabling lazy Adam (`lazy_adam=False`), gradient accumulation must be used. "
            "Set `use_gradient_accumulation` to True.")):
        optimizers.Adam(lazy_adam=False, use_gradient_accumulation=False)
    optimizers.Adam(lazy_adam=True, use_gradient_accumulation=False)


def test_ftrl_zero_accumulator_allowed_with_allow_zero_accumulator():
    """TF 2.21 rejects 0 even with allow_zero_accumulator=True, contrary to its docstring."""
    optimizer = optimizers.FTRL(initial_accumulator_value=0.0, allow_zero_accumulator=True)
    assert optimizer.initial_accumulator_value == 0.0
    # private: TF's slot protocol (_slot_initializers) gives the slots' initial values.
    np.testing.assert_array_equal(
        optimizer._slot_initializers()[0]((2, 2), dtype=tf.float32).numpy(), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="must be a positive float"):
        stock.FTRL(initial_accumulator_value=0.0, allow_zero_accumulator=True)
    with pytest.raises(ValueError, match=re.escape(
            "Argument `initial_accumulator_value` must be a non-negative float when "
            "`allow_zero_accumulator` is True. Received: -0.5")):
        optimizers.FTRL(initial_accumulator_value=-0.5, allow_zero_accumulator=True)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("status", [False, True, 0, 1])
def test_low_dimensional_packing_status_accepted(name, status):
    assert getattr(optimizers, name)(
        low_dimensional_packing_status=status).low_dimensional_packing_status == status


@pytest.mark.parametrize("name", NAMES)
def test_gradient_accumulation_off_is_accepted(name):
    assert not getattr(optimizers, name)(use_gradient_accumulation=False).use_gradient_accumulation


def test_values_tf_leaves_unvalidated_are_refused():
    # TF validates neither FTRL's powers/strengths nor AdagradMomentum's momentum/beta2; each
    # of these gives NaN or ascent (tests/optimizers/test_misuse.py has every argument).
    for make in (lambda: optimizers.FTRL(learning_rate_power=1.0),
                 lambda: optimizers.FTRL(l1_regularization_strength=-1.0),
                 lambda: optimizers.FTRL(l2_regularization_strength=-1.0),
                 lambda: optimizers.AdagradMomentum(momentum=-1.0),
                 lambda: optimizers.AdagradMomentum(beta2=5.0)):
        with pytest.raises(ValueError, match="must be a finite number"):
            make()


# ---------------------------------------------------------------------------------------------
# Equality and hashing

@pytest.mark.parametrize("name", NAMES)
def test_equal_arguments_are_equal_and_hash_equal(name):
    cls = getattr(optimizers, name)
    kwargs = _kwargs_for(name)
    assert cls(**kwargs) == cls(**kwargs)
    assert hash(cls(**kwargs)) == hash(cls(**kwargs))
    assert cls() == cls()
    assert cls(learning_rate=0.25) != cls(learning_rate=0.5)
    assert cls(clipvalue=1.0) != cls()
    assert cls() != "optimizer"
    assert len({cls(), cls(), cls(learning_rate=0.25)}) == 2


def test_equality_follows_tf():
    cases = [
        (lambda m: m.SGD(0.1), lambda m: m.SGD(0.1)),
        (lambda m: m.SGD(1), lambda m: m.SGD(1.0)),
        (lambda m: m.SGD(0.1), lambda m: m.Adagrad(0.1)),
        (lambda m: m.Adagrad(0.1), lambda m: m.SGD(0.1)),
        (lambda m: m.Adam(), lambda m: m.Adam(lazy_adam=False)),
        (lambda m: m.FTRL(), lambda m: m.FTRL()),
    ]
    for first, second in cases:
        assert (first(optimizers) == second(optimizers)) == (first(stock) == second(stock))


def test_callable_learning_rates_compare_by_identity():
    schedule = lambda: 0.1  # noqa: E731
    assert optimizers.SGD(schedule) == optimizers.SGD(schedule)
    assert optimizers.SGD(schedule) != optimizers.SGD(lambda: 0.1)


# ---------------------------------------------------------------------------------------------
# Slots
# private: these tests are about TF's slot protocol (_slot_names, _slot_initializers,
# _create_slots), which embedding classes and slot_variable_creation_fn callbacks call.

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("defaults", [True, False])
def test_slots_match_tf(name, defaults):
    ours, theirs = _pair(name)
    kwargs = {} if defaults else _kwargs_for(name)
    optimizer, stock_optimizer = ours(**kwargs), theirs(**kwargs)
    assert optimizer.slot_names() == stock_optimizer._slot_names()
    initializers = optimizer._slot_initializers()
    stock_initializers = stock_optimizer._slot_initializers()
    assert len(initializers) == len(optimizer.slot_names())
    for initializer, stock_initializer in zip(initializers, stock_initializers):
        assert initializer.get_config() == stock_initializer.get_config()
        np.testing.assert_array_equal(initializer((3, 2), dtype=tf.float32).numpy(),
                                      stock_initializer((3, 2), dtype=tf.float32).numpy())


@pytest.mark.parametrize("name,slots", [
    ("SGD", {}),
    ("Adagrad", {"accumulators": 0.1}),
    ("AdagradMomentum", {"accumulators": 0.0, "momenta": 0.0}),
    ("Adam", {"momenta": 0.0, "velocities": 0.0}),
    ("FTRL", {"accumulators": 0.1, "linears": 0.0}),
    # The TPU optimizers only v1 named (no stock counterpart): v1's slots and initial values.
    ("ProximalAdagrad", {"accumulators": 0.1}),
    ("Momentum", {"momenta": 0.0}),
    ("RMSProp", {"ms": 0.0, "mom": 0.0}),
    ("ProximalYogi", {"v": 1e-6, "m": 0.0}),
])
def test_slot_names_and_initial_values(name, slots):
    optimizer = getattr(optimizers, name)()
    assert optimizer.slot_names() == list(slots)
    for initializer, value in zip(optimizer._slot_initializers(), slots.values()):
        np.testing.assert_allclose(initializer((2, 3), dtype=tf.float32).numpy(),
                                   np.full((2, 3), value, np.float32))


@pytest.mark.parametrize("name", SLOTTED)
def test_create_slots_with_variable_creator(name):
    optimizer = getattr(optimizers, name)()
    table = tf.Variable(tf.zeros((4, 2)), name="table")
    calls = []

    def creator(slot_name, initializer):
        calls.append(slot_name)
        return tf.Variable(initializer((4, 2), dtype=tf.float32), name=slot_name)

    slots = optimizer._create_slots(table, creator)
    assert list(slots) == optimizer.slot_names() == calls
    for slot_name, initializer in zip(optimizer.slot_names(), optimizer._slot_initializers()):
        np.testing.assert_array_equal(slots[slot_name].numpy(),
                                      initializer((4, 2), dtype=tf.float32).numpy())


@pytest.mark.parametrize("name", SLOTTED)
def test_create_slots_with_slot_variable_creation_fn(name):
    table = tf.Variable(tf.ones((3, 2)), name="table")
    received = []

    def slot_fn(table_variable, slot_names, initializers):
        received.append((table_variable, list(slot_names), list(initializers)))
        return {slot_name: tf.Variable(initializer(table_variable.shape, dtype=tf.float32))
                for slot_name, initializer in zip(slot_names, initializers)}

    def never_called(slot_name, initializer):
        raise AssertionError("variable_creator must not be used")

    optimizer = getattr(optimizers, name)(slot_variable_creation_fn=slot_fn)
    slots = optimizer._create_slots(table, never_called)
    assert len(received) == 1
    table_variable, slot_names, initializers = received[0]
    assert table_variable is table
    assert slot_names == optimizer.slot_names() == list(slots)
    assert [i.get_config() for i in initializers] == [
        i.get_config() for i in optimizer._slot_initializers()]


def test_create_slots_matches_tf_with_wrapper():
    """TF's call convention, including initializer_wrapper, on both implementations."""

    def run(optimizer):
        created = {}

        def creator(slot_name, initializer):
            created[slot_name] = initializer((2, 2), dtype=tf.float32).numpy()
            return slot_name

        def wrapper(slot_name, initializer):
            return lambda shape, dtype: initializer(shape, dtype=dtype) + len(slot_name)

        return optimizer._create_slots("table", creator, wrapper), created

    ours, theirs = run(optimizers.FTRL(initial_accumulator_value=0.5)), run(
        stock.FTRL(initial_accumulator_value=0.5))
    assert ours[0] == theirs[0] == {"accumulators": "accumulators", "linears": "linears"}
    assert ours[1].keys() == theirs[1].keys()
    for slot_name in ours[1]:
        np.testing.assert_array_equal(ours[1][slot_name], theirs[1][slot_name])
    np.testing.assert_array_equal(ours[1]["accumulators"], np.full((2, 2), 12.5))


def test_sgd_create_slots_is_empty():
    assert optimizers.SGD()._create_slots(tf.Variable([[1.0]]), None) == {}


# ---------------------------------------------------------------------------------------------
# Learning rate and kernel attrs

def test_get_learning_rate_float_and_callable():
    rate = optimizers.Adagrad(learning_rate=0.25).learning_rate_tensor()
    assert rate.dtype == tf.float32 and rate.shape == () and float(rate) == 0.25

    calls = []

    def schedule():
        calls.append(None)
        return 0.5 * len(calls)

    optimizer = optimizers.SGD(learning_rate=schedule)
    assert float(optimizer.learning_rate_tensor()) == 0.5
    assert float(optimizer.learning_rate_tensor()) == 1.0

    variable = tf.Variable(0.125, dtype=tf.float64)
    optimizer = optimizers.Adam(learning_rate=lambda: variable)
    assert optimizer.learning_rate_tensor().dtype == tf.float32
    traced = tf.function(optimizer.learning_rate_tensor)
    assert float(traced()) == 0.125
    variable.assign(2.0)
    assert float(traced()) == 2.0


COMMON_ATTRS = ["clip_gradient_min", "clip_gradient_max", "clip_weight_min", "clip_weight_max",
                "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate"]
SPECIFIC_ATTRS = {
    "SGD": [], "Adagrad": [],
    "AdagradMomentum": ["momentum", "use_nesterov", "exponent", "beta2", "epsilon"],
    "Adam": ["beta_1", "beta_2", "epsilon", "lazy_adam", "sum_inside_sqrt"],
    "FTRL": ["learning_rate_power", "l1_regularization_strength",
             "l2_regularization_strength", "beta", "multiply_linear_by_learning_rate",
             "allow_zero_accumulator"],
}
OP_NAMES = {"SGD": "TfeSparseApplySgd", "Adagrad": "TfeSparseApplyAdagrad",
            "AdagradMomentum": "TfeSparseApplyAdagradMomentum", "Adam": "TfeSparseApplyAdam",
            "FTRL": "TfeSparseApplyFtrl"}


@pytest.mark.parametrize("name", NAMES)
def test_kernel_attrs_defaults(name):
    optimizer = getattr(optimizers, name)()
    attrs = optimizer.kernel_attrs()
    assert list(attrs) == COMMON_ATTRS + SPECIFIC_ATTRS[name]
    assert attrs["clip_gradient_min"] == -math.inf and attrs["clip_gradient_max"] == math.inf
    assert attrs["clip_weight_min"] == -math.inf and attrs["clip_weight_max"] == math.inf
    assert attrs["weight_decay_factor"] == 0.0
    assert attrs["multiply_weight_decay_factor_by_learning_rate"] is False
    for attr in SPECIFIC_ATTRS[name]:
        stored = getattr(optimizer, attr)
        assert attrs[attr] == stored
        assert type(attrs[attr]) is (bool if isinstance(stored, bool) else float)
    # The op is named by the class's description now (was `_op_name`, the name's suffix).
    assert type(optimizer).description.op == OP_NAMES[name]


@pytest.mark.parametrize("name", NAMES)
def test_kernel_attrs_set(name):
    optimizer = getattr(optimizers, name)(**_kwargs_for(name))
    attrs = optimizer.kernel_attrs()
    assert attrs["clip_gradient_min"] == -1.0 and attrs["clip_gradient_max"] == math.inf
    assert attrs["clip_weight_min"] == -2.0 and attrs["clip_weight_max"] == 3.0
    assert attrs["weight_decay_factor"] == 0.01
    assert attrs["multiply_weight_decay_factor_by_learning_rate"] is True
    for attr in SPECIFIC_ATTRS[name]:
        assert attrs[attr] == getattr(optimizer, attr)
    assert all(isinstance(value, (bool, float)) for value in attrs.values())


def test_kernel_attrs_types():
    attrs = optimizers.AdagradMomentum(exponent=4, beta2=1, clipvalue=2).kernel_attrs()
    assert type(attrs["exponent"]) is float and type(attrs["beta2"]) is float
    assert attrs["clip_gradient_min"] == -2.0 and type(attrs["clip_gradient_max"]) is float
    assert optimizers.SGD(clipvalue=(None, 0.5)).kernel_attrs()["clip_gradient_min"] == -math.inf
    # A weight decay factor of 0 and None both mean no decay.
    assert optimizers.SGD(weight_decay_factor=0).kernel_attrs()["weight_decay_factor"] == 0.0


# ---------------------------------------------------------------------------------------------
# The TPU optimizers only TF v1 named: not public names (tf_embedding mirrors TF's namespace),
# validated like their v2 siblings.

V1_ONLY = ["ProximalAdagrad", "Momentum", "RMSProp", "ProximalYogi"]


@pytest.mark.parametrize("name", V1_ONLY)
def test_v1_only_optimizers_are_not_public(name):
    import tf_embedding  # pylint: disable=import-outside-toplevel
    assert not hasattr(stock, name)
    assert name not in tf_embedding.__all__


@pytest.mark.parametrize("make,message", [
    (lambda: optimizers.ProximalAdagrad(initial_accumulator_value=0.0),
     "Argument `initial_accumulator_value` must be a positive float. Received: 0.0"),
    (lambda: optimizers.ProximalAdagrad(l1_regularization_strength=-1.0),
     "Argument `l1_regularization_strength` must be >= 0. Received: -1.0."),
    (lambda: optimizers.ProximalAdagrad(l2_regularization_strength=-0.5),
     "Argument `l2_regularization_strength` must be >= 0. Received: -0.5."),
    (lambda: optimizers.ProximalYogi(beta1=1.0),
     "Argument `beta1` must be >= 0 and < 1. Received: 1.0."),
    (lambda: optimizers.ProximalYogi(beta2=-0.1),
     "Argument `beta2` must be >= 0 and < 1. Received: -0.1."),
    (lambda: optimizers.ProximalYogi(epsilon=0.0), "epsilon must be positive; got 0.0."),
    (lambda: optimizers.ProximalYogi(initial_accumulator_value=-1.0),
     "Argument `initial_accumulator_value` must be >= 0. Received: -1.0."),
    (lambda: optimizers.Momentum(use_gradient_accumulation=False, clipvalue=1.0),
     "When `use_gradient_accumulation` is False, gradient clipping cannot be used"),
])
def test_v1_only_optimizer_validation(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_v1_only_optimizer_kernel_attrs():
    attrs = optimizers.ProximalYogi(beta1=0, l1_regularization_strength=1, clipvalue=2,
                                    initial_accumulator_value=0.5).kernel_attrs()
    assert attrs["beta1"] == 0.0 and type(attrs["beta1"]) is float
    assert attrs["l1_regularization_strength"] == 1.0 and attrs["clip_gradient_min"] == -2.0
    assert "initial_accumulator_value" not in attrs  # a slot initial value, not an attr
    assert optimizers.Momentum(momentum=0.9, use_nesterov=1).kernel_attrs()["use_nesterov"] is True
    assert optimizers.RMSProp(rho=0.5).kernel_attrs()["rho"] == 0.5
