"""Optimizer arguments that stock TF accepts but whose math can only give NaN or ascent are
refused where they are given, naming the class, the argument and the value
(tf_embedding/optimizers/accepted.py); learning-rate callables are checked at the step.

The first cases are the ones found by trying the API as a new user (each trained to NaN or
ascent before); the battery then refuses one value per bound of every declared argument of
every optimizer class, and a table in docs/checks.md lists the same ranges."""

import math
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_embedding
from tf_embedding import optimizers
from tf_embedding.optimizers.accepted import Accepted
from tf_embedding.optimizers.classes import accepted_values

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("make, error, words", [
    (lambda: optimizers.Adam(learning_rate=-0.1), ValueError, ["Adam", "`learning_rate`", "-0.1"]),
    (lambda: optimizers.AdagradMomentum(0.1, beta2=2.0), ValueError,
     ["AdagradMomentum", "`beta2`", "2.0", "[0, 1]"]),
    (lambda: optimizers.SGD(0.1, clipvalue=-1.0), ValueError, ["SGD", "`clipvalue`", "-1.0"]),
    (lambda: optimizers.FTRL(0.1, learning_rate_power=0.5), ValueError,
     ["FTRL", "`learning_rate_power`", "0.5", "<= 0"]),
    (lambda: optimizers.SGD(0.1, weight_decay_factor=-1.0), ValueError,
     ["SGD", "`weight_decay_factor`", "-1.0", ">= 0"]),
    (lambda: optimizers.SGD("0.1"), TypeError, ["SGD", "`learning_rate`", "'0.1'", "str"]),
    (lambda: optimizers.Adagrad(float("nan")), ValueError, ["Adagrad", "`learning_rate`", "nan"]),
    (lambda: optimizers.SGD(0.1, clipvalue=(1.0, -1.0)), ValueError,
     ["SGD", "`clipvalue`", "(1.0, -1.0)", "min must be <= its max"]),
    (lambda: optimizers.SGD(0.1, clip_weight_min=1.0, clip_weight_max=-1.0), ValueError,
     ["SGD", "`clip_weight_min`", "`clip_weight_max`"]),
    (lambda: optimizers.Adam(0.1, lazy_adam="no"), TypeError, ["Adam", "`lazy_adam`", "'no'"]),
])
def test_values_that_train_to_nan_or_ascent_are_refused(make, error, words):
    with pytest.raises(error) as raised:
        make()
    for word in words:
        assert word in str(raised.value)


def _refused_values(accepts: Accepted) -> list[tuple[object, type]]:
    """One value per bound the declaration states, and a value of a wrong type."""
    if accepts.kind == "flag":
        return [("yes", TypeError), (2, TypeError)]
    values: list[tuple[object, type]] = [("0.5", TypeError), (float("nan"), ValueError)]
    if accepts.finite:
        values.append((math.inf, ValueError))
    if accepts.low != -math.inf:
        values.append((accepts.low if accepts.low_open else accepts.low - 1.0, ValueError))
    if accepts.high != math.inf:
        values.append((accepts.high if accepts.high_open else accepts.high + 1.0, ValueError))
    return values


BATTERY = [(name, argument, value, error)
           for name, cls in optimizers.CLASSES.items()
           for argument, accepts in accepted_values(cls.description).items()
           for value, error in _refused_values(accepts)]


@pytest.mark.parametrize("name, argument, value, error", BATTERY)
def test_every_declared_argument_refuses_values_outside_its_range(name, argument, value, error):
    cls = optimizers.CLASSES[name]
    with pytest.raises((TypeError, ValueError)) as raised:
        cls(**{argument: value})
    message = str(raised.value)
    # TF's own checks come first, with TF's messages (Adagrad's accumulator, Adam's betas):
    # those name the argument; tf_embedding's name the class, the argument and the value.
    assert argument in message
    if raised.type is error and message.startswith(name + ":"):
        assert repr(value) in message


def test_the_battery_covers_every_argument_of_every_class():
    covered = {(name, argument) for name, argument, _, _ in BATTERY}
    for name, cls in optimizers.CLASSES.items():
        numeric = {argument.name for argument in cls.description.arguments
                   + cls.description.trailing}
        assert {(name, argument) for argument in numeric} <= covered


@pytest.mark.parametrize("name", sorted(optimizers.CLASSES))
def test_values_at_the_edges_of_the_ranges_are_accepted(name):
    cls = optimizers.CLASSES[name]
    for argument, accepts in accepted_values(cls.description).items():
        if accepts.kind == "flag":
            cls(**{argument: True})
        elif accepts.low != -math.inf and not accepts.low_open and argument not in (
                "initial_accumulator_value",):  # TF refuses a zero accumulator itself
            cls(**{argument: accepts.low})


def test_zero_learning_rate_and_schedules_are_accepted():
    optimizers.SGD(0.0)
    optimizers.Adagrad(np.float32(0.1))
    optimizers.Adam(lambda: 0.01)
    optimizers.FTRL(tf.Variable(0.1))


def _train_one_step(learning_rate) -> None:
    table = tf_embedding.TableConfig(8, 2, name="video", combiner="sum")
    embedding = tf_embedding.TPUEmbedding({"watched": tf_embedding.FeatureConfig(table)},
                                          optimizers.SGD(learning_rate))
    embedding.build([tf.TensorShape([2, 1])])

    @tf.function
    def step():
        embedding.enqueue({"watched": tf.constant([[1], [2]], tf.int64)}, training=True)
        activations = embedding.dequeue()
        embedding.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))

    step()


@pytest.mark.parametrize("value, message", [
    (-0.1, "Table 'video': learning_rate must be finite and >= 0, got -0.1"),
    (float("nan"), "Table 'video': learning_rate must be finite and >= 0, got nan"),
])
def test_a_callable_learning_rate_is_checked_at_the_step(value, message):
    rate = tf.Variable(value)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        _train_one_step(lambda: rate)


@pytest.mark.parametrize("gives", [None, "0.1", [0.1, 0.2]])
def test_a_callable_learning_rate_that_gives_no_number_fails_at_trace_time(gives):
    with pytest.raises(TypeError, match=r"SGD: the learning rate gave"):
        _train_one_step(lambda: gives)


def test_docs_list_every_range():
    """docs/checks.md's table of ranges names every declared range of every public
    optimizer argument, in the words the messages use."""
    text = (ROOT / "docs" / "checks.md").read_text()
    section = text[text.index("## Optimizer arguments"):]
    section = section[:section.index("\n## ", 1)]
    switches = section[section.index("The switches"):section.index("take True or False")]
    common = set(accepted_values(optimizers.SGD.description))
    for name, cls in optimizers.CLASSES.items():
        for argument, accepts in accepted_values(cls.description).items():
            if accepts.kind == "flag":
                assert f"`{argument}`" in switches, argument
                continue
            who = "every optimizer" if argument in common else name
            row = f"| {who} | `{argument}` | {accepts.describe()} |"
            assert row in section, row
