"""Keras optimizer translation: mapping, rejected settings, and the update math against Keras."""

import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_embedding import optimizers
from tf_embedding.optimizers.keras_translation import embedding_optimizer

from helpers.references import reference_update

pytestmark = pytest.mark.unit


def translate_optimizer(optimizer):
    """The mid-level classes' translation: Keras' own rule."""
    return embedding_optimizer(optimizer, rule="keras")


FLAVOURS = {"keras": keras.optimizers, "tf_keras": tf_keras.optimizers,
            "legacy": tf_keras.optimizers.legacy}
SCHEDULES = {"keras": keras.optimizers.schedules, "tf_keras": tf_keras.optimizers.schedules,
             "legacy": tf_keras.optimizers.schedules}


def _keras_optimizer(flavour, kind, **kwargs):
    """A Keras optimizer; "schedule" as learning rate means an exponential decay per step.

    tf_keras optimizers run without XLA to keep the tests fast; the math is the same.
    """
    if kwargs.get("learning_rate") == "schedule":
        kwargs["learning_rate"] = SCHEDULES[flavour].ExponentialDecay(
            0.2, decay_steps=1, decay_rate=0.7)
    if flavour == "tf_keras":
        kwargs.setdefault("jit_compile", False)
    return getattr(FLAVOURS[flavour], kind)(**kwargs)


# ---------------------------------------------------------------------------------------------
# Pass-through and names

def test_none_and_embedding_optimizers_pass_through():
    assert translate_optimizer(None) is None
    for optimizer in (optimizers.SGD(0.5), optimizers.AdagradMomentum(), optimizers.FTRL()):
        assert translate_optimizer(optimizer) is optimizer


@pytest.mark.parametrize("name,cls", [("sgd", optimizers.SGD), ("adagrad", optimizers.Adagrad),
                                      ("adam", optimizers.Adam), ("ftrl", optimizers.FTRL)])
def test_names_give_default_optimizers(name, cls):
    optimizer = translate_optimizer(name)
    assert type(optimizer) is cls
    assert optimizer == cls()


@pytest.mark.parametrize("name", ["SGD", "rmsprop", "", "adagrad_momentum"])
def test_unknown_names(name):
    with pytest.raises(ValueError, match=re.escape(f"Unknown optimizer name {name!r}")):
        translate_optimizer(name)


class _MyAdam(keras.optimizers.Adam):
    pass


@pytest.mark.parametrize("make", [
    lambda: keras.optimizers.RMSprop(),
    lambda: keras.optimizers.AdamW(),
    lambda: keras.optimizers.Lion(),
    lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),
    lambda: _MyAdam(),
    lambda: tf_keras.optimizers.RMSprop(),
    lambda: tf_keras.optimizers.AdamW(),
    lambda: tf_keras.optimizers.legacy.RMSprop(),
    lambda: object(),
    lambda: 0.1,
])
def test_unsupported_classes_are_named(make):
    optimizer = make()
    cls = type(optimizer)
    with pytest.raises(ValueError, match=re.escape(
            f"{cls.__module__}.{cls.__qualname__} is an unsupported optimizer class")):
        translate_optimizer(optimizer)


# ---------------------------------------------------------------------------------------------
# Rejected settings

REJECTED = [
    ("keras", "SGD", dict(momentum=0.9), "momentum"),
    ("keras", "SGD", dict(momentum=0.5, nesterov=True), "momentum"),
    ("keras", "Adam", dict(amsgrad=True), "amsgrad"),
    ("keras", "Adam", dict(weight_decay=0.01), "weight_decay"),
    ("keras", "Ftrl", dict(l2_shrinkage_regularization_strength=0.1),
     "l2_shrinkage_regularization_strength"),
    ("keras", "Adam", dict(clipnorm=1.0), "clipnorm"),
    ("keras", "Adagrad", dict(global_clipnorm=1.0), "global_clipnorm"),
    ("keras", "SGD", dict(use_ema=True), "use_ema"),
    ("keras", "SGD", dict(loss_scale_factor=128.0), "loss_scale_factor"),
    ("keras", "Ftrl", dict(gradient_accumulation_steps=2), "gradient_accumulation_steps"),
    ("tf_keras", "SGD", dict(momentum=0.5), "momentum"),
    ("tf_keras", "Adam", dict(amsgrad=True), "amsgrad"),
    ("tf_keras", "Adam", dict(adaptive_epsilon=True), "adaptive_epsilon"),
    ("tf_keras", "Adam", dict(weight_decay=0.1), "weight_decay"),
    ("tf_keras", "Ftrl", dict(l2_shrinkage_regularization_strength=0.1),
     "l2_shrinkage_regularization_strength"),
    ("tf_keras", "Adagrad", dict(clipnorm=1.0), "clipnorm"),
    ("tf_keras", "SGD", dict(global_clipnorm=1.0), "global_clipnorm"),
    ("tf_keras", "SGD", dict(use_ema=True), "use_ema"),
    ("legacy", "SGD", dict(momentum=0.5), "momentum"),
    ("legacy", "Adam", dict(amsgrad=True), "amsgrad"),
    ("legacy", "Adagrad", dict(), "epsilon"),
    ("legacy", "Adagrad", dict(epsilon=0.0), "epsilon"),
    ("legacy", "Ftrl", dict(l2_shrinkage_regularization_strength=0.1),
     "l2_shrinkage_regularization_strength"),
    ("legacy", "SGD", dict(clipnorm=1.0), "clipnorm"),
    ("legacy", "Adam", dict(clipnorm=0.0), "clipnorm"),
    ("legacy", "SGD", dict(global_clipnorm=1.0), "global_clipnorm"),
    ("legacy", "SGD", dict(gradient_transformers=[lambda grads_and_vars: grads_and_vars]),
     "gradient_transformers"),
]


@pytest.mark.parametrize("flavour,kind,kwargs,setting", REJECTED)
def test_rejected_settings_are_named(flavour, kind, kwargs, setting):
    optimizer = _keras_optimizer(flavour, kind, **kwargs)
    with pytest.raises(ValueError, match=re.escape("into an embedding optimizer: `" + setting)):
        translate_optimizer(optimizer)


@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_settings_keras_ignores_are_ignored(flavour):
    """Keras 3 and tf_keras skip clipping settings <= 0 and a zero weight decay."""
    for kwargs in (dict(clipnorm=0.0), dict(global_clipnorm=-1.0), dict(clipvalue=0.0),
                   dict(clipvalue=-2.0), dict(weight_decay=0.0)):
        optimizer = translate_optimizer(_keras_optimizer(flavour, "SGD", **kwargs))
        assert optimizer.clip_gradient_min is None and optimizer.clip_gradient_max is None
        assert optimizer.weight_decay_factor is None


# ---------------------------------------------------------------------------------------------
# Mapping

@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_sgd_mapping(flavour):
    optimizer = translate_optimizer(_keras_optimizer(flavour, "SGD", learning_rate=0.3,
                                                     clipvalue=0.5))
    assert type(optimizer) is optimizers.SGD
    assert (optimizer.clip_gradient_min, optimizer.clip_gradient_max) == (-0.5, 0.5)
    assert float(optimizer.learning_rate_tensor()) == pytest.approx(0.3)


@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_adagrad_folds_epsilon_into_accumulator(flavour):
    optimizer = translate_optimizer(_keras_optimizer(
        flavour, "Adagrad", initial_accumulator_value=0.25, epsilon=0.5, weight_decay=0.1))
    assert type(optimizer) is optimizers.Adagrad
    assert optimizer.initial_accumulator_value == 0.75
    assert optimizer.weight_decay_factor == 0.1
    assert optimizer.multiply_weight_decay_factor_by_learning_rate is True


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_adam_mapping(flavour):
    keras_optimizer = _keras_optimizer(flavour, "Adam", learning_rate=0.01, beta_1=0.8,
                                       beta_2=0.9, epsilon=1e-3)
    optimizer = translate_optimizer(keras_optimizer)
    assert type(optimizer) is optimizers.Adam
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.8, 0.9, 1e-3)
    assert optimizer.lazy_adam is False and optimizer.sum_inside_sqrt is False
    # The bias correction of Keras step t = iterations + 1 is folded into the learning rate.
    for iterations in (0, 1, 9):
        keras_optimizer.iterations.assign(iterations)
        step = iterations + 1
        expected = 0.01 * math.sqrt(1 - 0.9 ** step) / (1 - 0.8 ** step)
        assert float(optimizer.learning_rate_tensor()) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_ftrl_mapping(flavour):
    optimizer = translate_optimizer(_keras_optimizer(
        flavour, "Ftrl", learning_rate_power=-0.25, initial_accumulator_value=0.0,
        l1_regularization_strength=0.1, l2_regularization_strength=0.2, beta=0.3))
    assert type(optimizer) is optimizers.FTRL
    assert (optimizer.learning_rate_power, optimizer.initial_accumulator_value,
            optimizer.l1_regularization_strength, optimizer.l2_regularization_strength,
            optimizer.beta) == (-0.25, 0.0, 0.1, 0.2, 0.3)
    assert optimizer.allow_zero_accumulator is True
    assert optimizer.multiply_linear_by_learning_rate is False
    assert translate_optimizer(_keras_optimizer(flavour, "Ftrl")).allow_zero_accumulator is False


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_learning_rate_follows_keras(flavour):
    keras_optimizer = _keras_optimizer(flavour, "SGD", learning_rate=0.1)
    optimizer = translate_optimizer(keras_optimizer)
    traced = tf.function(optimizer.learning_rate_tensor)
    assert float(traced()) == pytest.approx(0.1)
    keras_optimizer.learning_rate = 0.5
    assert float(optimizer.learning_rate_tensor()) == pytest.approx(0.5)
    assert float(traced()) == pytest.approx(0.5)


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_schedule_is_evaluated_at_iterations(flavour):
    keras_optimizer = _keras_optimizer(flavour, "SGD", learning_rate="schedule")
    optimizer = translate_optimizer(keras_optimizer)
    traced = tf.function(optimizer.learning_rate_tensor)
    for iterations in (0, 3):
        keras_optimizer.iterations.assign(iterations)
        assert float(traced()) == pytest.approx(0.2 * 0.7 ** iterations, rel=1e-6)


def test_keras3_callable_learning_rate():
    optimizer = translate_optimizer(keras.optimizers.SGD(learning_rate=lambda: 0.125))
    assert float(optimizer.learning_rate_tensor()) == 0.125


def test_unused_legacy_optimizer_in_tf_function():
    """A legacy optimizer creates its step counter on first read, possibly while tracing."""
    keras_optimizer = tf_keras.optimizers.legacy.Adam(learning_rate=0.1, decay=0.5)
    optimizer = translate_optimizer(keras_optimizer)
    expected = 0.1 * math.sqrt(1 - 0.999) / (1 - 0.9)
    assert float(tf.function(optimizer.learning_rate_tensor)()) == pytest.approx(expected, rel=1e-5)


def test_legacy_decay_is_honoured():
    keras_optimizer = tf_keras.optimizers.legacy.SGD(learning_rate=0.2, decay=0.5)
    optimizer = translate_optimizer(keras_optimizer)
    keras_optimizer.iterations.assign(4)
    assert float(optimizer.learning_rate_tensor()) == pytest.approx(0.2 / (1 + 0.5 * 4))


def test_legacy_adagrad_with_zero_backend_epsilon():
    previous = tf_keras.backend.epsilon()
    tf_keras.backend.set_epsilon(0.0)
    try:
        keras_optimizer = tf_keras.optimizers.legacy.Adagrad(
            learning_rate=0.1, initial_accumulator_value=0.3, epsilon=0.0)
    finally:
        tf_keras.backend.set_epsilon(previous)
    optimizer = translate_optimizer(keras_optimizer)
    assert type(optimizer) is optimizers.Adagrad
    assert optimizer.initial_accumulator_value == 0.3


# ---------------------------------------------------------------------------------------------
# Update math: the numpy rules of the embedding optimizers (reference §2, references.py), driven
# by the translated optimizer, against what Keras does to a dense variable.

MATH_CASES = [
    ("SGD", dict(learning_rate=0.1)),
    ("SGD", dict(learning_rate="schedule", clipvalue=0.3, weight_decay=0.2)),
    ("Adagrad", dict(learning_rate=0.1)),
    ("Adagrad", dict(learning_rate="schedule", initial_accumulator_value=0.0, epsilon=1e-3,
                     clipvalue=0.4, weight_decay=0.05)),
    ("Adam", dict(learning_rate=0.01)),
    ("Adam", dict(learning_rate="schedule", beta_1=0.5, beta_2=0.8, epsilon=1e-3,
                  clipvalue=0.3)),
    ("Ftrl", dict(learning_rate=0.1)),
    ("Ftrl", dict(learning_rate="schedule", learning_rate_power=-0.3,
                  initial_accumulator_value=0.0, l1_regularization_strength=0.01,
                  l2_regularization_strength=0.02, beta=0.5, clipvalue=0.6,
                  weight_decay=0.1)),
    ("Ftrl", dict(learning_rate=0.2, learning_rate_power=0.0, beta=0.1,
                  l1_regularization_strength=0.3)),
]
LEGACY_MATH_CASES = [
    ("SGD", dict(learning_rate=0.1, decay=0.5, clipvalue=0.3)),
    ("Adam", dict(learning_rate=0.02, decay=0.3)),
    ("Adam", dict(learning_rate="schedule", beta_1=0.5, clipvalue=0.2)),
    ("Ftrl", dict(learning_rate=0.1)),
    ("Ftrl", dict(learning_rate="schedule", learning_rate_power=-0.3,
                  initial_accumulator_value=0.0, l1_regularization_strength=0.01,
                  l2_regularization_strength=0.02, beta=0.5, clipvalue=0.6)),
]
ALL_MATH_CASES = ([("keras", kind, kwargs) for kind, kwargs in MATH_CASES]
                  + [("tf_keras", kind, kwargs) for kind, kwargs in MATH_CASES]
                  + [("legacy", kind, kwargs) for kind, kwargs in LEGACY_MATH_CASES])

VOCABULARY, DIM, STEPS = 5, 3, 4


def _rows_for_step(step, every_row):
    """Looked-up rows. Where Keras updates only rows with a gradient the rows stay the same, since
    Keras FTRL rewrites rows without gradient and Keras weight decay decays them, which lazy
    embedding updates do not do. Keras Adam updates every row, so rows vary and all are compared.
    """
    return sorted({step % VOCABULARY, 3}) if every_row else [0, 3]


@pytest.mark.parametrize("flavour,kind,kwargs", ALL_MATH_CASES)
def test_translated_update_matches_keras(flavour, kind, kwargs):
    keras_optimizer = _keras_optimizer(flavour, kind, **kwargs)
    optimizer = translate_optimizer(keras_optimizer)
    keras_updates_every_row = kind == "Adam"
    rng = np.random.default_rng(7)
    initial = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    variable = tf.Variable(initial)
    table = initial.astype(np.float64)
    # private: TF's slot protocol (_slot_initializers) gives the slots' initial values.
    slots = {name: initializer((VOCABULARY, DIM), dtype=tf.float64).numpy()
             for name, initializer in zip(optimizer.slot_names(),
                                          optimizer._slot_initializers())}
    compared = set(range(VOCABULARY)) if keras_updates_every_row else set()
    for step in range(STEPS):
        looked_up = _rows_for_step(step, keras_updates_every_row)
        compared.update(looked_up)
        gradient = np.zeros((VOCABULARY, DIM), np.float32)
        gradient[looked_up] = rng.normal(size=(len(looked_up), DIM))
        # The embedding update runs in the backward pass, before Keras's own step.
        lr = float(optimizer.learning_rate_tensor())
        rows = looked_up if getattr(optimizer, "lazy_adam", True) else range(VOCABULARY)
        # On float64 arrays, so the reference's own rounding is negligible next to Keras's.
        reference_update(optimizer, table, [slots[name] for name in optimizer.slot_names()],
                         [(row, gradient[row].astype(np.float64)) for row in rows], lr)
        keras_optimizer.apply_gradients([(tf.constant(gradient), variable)])
    compared = sorted(compared)
    assert int(keras_optimizer.iterations.numpy()) == STEPS
    assert not np.allclose(table[compared], initial[compared])
    np.testing.assert_allclose(variable.numpy()[compared], table[compared], rtol=2e-5, atol=2e-6)
