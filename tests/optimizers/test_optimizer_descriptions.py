"""Each optimizer's `description` against the op it names, as the op library registers it.

The Python side (tf_embedding/optimizers/catalogue.py) and the C++ side (cc/ops/optimizer_ops.cc)
each state an optimizer once; this test is what keeps the two statements the same, for both of its
ops (gradients as CSR batches, and as summed rows): the op exists and its wrapper is in the library,
its slot inputs are the optimizer's slots in order, its attrs are the optimizer's kernel attrs with
the same types, and every default agrees.
"""

import inspect
import math

import numpy as np
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_def_registry

from tf_embedding import _loader
from tf_embedding.optimizers import base as optimizer_base
from tf_embedding.optimizers.description import OptimizerDescription

pytestmark = pytest.mark.unit


def _package_subclasses(base):
    """Every subclass of `base`, at any depth, that a tf_embedding module defines."""
    found = set()
    pending = [base]
    while pending:
        for cls in pending.pop().__subclasses__():
            if cls not in found and cls.__module__.startswith("tf_embedding."):
                found.add(cls)
                pending.append(cls)
    return found


# Every optimizer class of the package, whichever module defines it, so a new one is covered
# without editing this test.
OPTIMIZER_CLASSES = sorted(_package_subclasses(optimizer_base._Optimizer),
                           key=lambda cls: cls.__name__)
# Each of an optimizer's ops (the description's property naming it) and its inputs after the
# slots; before them comes the table. Attrs that are not the optimizer's are N and table_name.
OPS = {"op": ["row_splits", "ids", "gains", "activation_gradients", "learning_rate"],
       "rows_op": ["unique_ids", "rows", "learning_rate"]}
LEADING_INPUTS = ["table"]
NON_OPTIMIZER_ATTRS = ["N", "table_name"]
ATTR_TYPES = {"float": float, "bool": bool}
CASES = [(cls, op) for cls in OPTIMIZER_CLASSES for op in OPS]
CASE_IDS = [f"{cls.__name__}.{op}" for cls, op in CASES]


def _op_name(cls, op):
    return getattr(cls.description, op)


def _op_def(cls, op):
    _loader.load_ops()  # registers the library's ops
    op_def = op_def_registry.get(_op_name(cls, op))
    assert op_def is not None, f"{cls.__name__}: no op {_op_name(cls, op)!r} is registered"
    return op_def


def _optimizer_attrs(op_def):
    return [attr for attr in op_def.attr if attr.name not in NON_OPTIMIZER_ATTRS]


def _default(attr):
    value = attr.default_value
    return value.f if attr.type == "float" else value.b


def _as_attr(value, attr):
    """`value` as the op receives it: float attrs are float32."""
    return np.float32(value) if attr.type == "float" else bool(value)


def test_every_optimizer_class_is_covered():
    assert {cls.__name__ for cls in OPTIMIZER_CLASSES} == {
        "SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL", "ProximalAdagrad", "Momentum",
        "RMSProp", "ProximalYogi"}


@pytest.mark.parametrize("cls", OPTIMIZER_CLASSES, ids=lambda cls: cls.__name__)
def test_every_optimizer_class_states_its_own_description(cls):
    # Not one inherited from another optimizer, which would apply that optimizer's rule.
    assert isinstance(vars(cls).get("description"), OptimizerDescription), cls.__name__


@pytest.mark.parametrize("cls,op", CASES, ids=CASE_IDS)
def test_the_op_exists_and_the_library_has_its_wrapper(cls, op):
    op_def = _op_def(cls, op)
    assert op_def.name == _op_name(cls, op)
    assert callable(getattr(_loader.load_ops(), _op_name(cls, op)))
    assert op_def.is_stateful


@pytest.mark.parametrize("cls,op", CASES, ids=CASE_IDS)
def test_slot_inputs_are_the_slot_names_in_order(cls, op):
    inputs = _op_def(cls, op).input_arg
    slots = cls().slot_names()
    assert [arg.name for arg in inputs] == LEADING_INPUTS + slots + OPS[op]
    for arg in inputs[len(LEADING_INPUTS):len(LEADING_INPUTS) + len(slots)]:
        assert arg.type == types_pb2.DT_RESOURCE, arg.name
    # private: TF's slot protocol (_slot_initializers) follows the description too.
    assert len(cls()._slot_initializers()) == len(slots)


@pytest.mark.parametrize("cls,op", CASES, ids=CASE_IDS)
def test_attrs_are_the_kernel_attrs_with_their_types(cls, op):
    op_attrs = _optimizer_attrs(_op_def(cls, op))
    kernel_attrs = cls().kernel_attrs()
    # Same names in the same order: the common attrs, then the description's hyperparameters.
    assert [attr.name for attr in op_attrs] == list(kernel_attrs)
    hyperparameters = cls.description.hyperparameters
    assert [attr.name for attr in op_attrs[len(op_attrs) - len(hyperparameters):]] == [
        name for name, _ in hyperparameters]
    for attr in op_attrs:
        assert attr.type in ATTR_TYPES, attr.name
        assert type(kernel_attrs[attr.name]) is ATTR_TYPES[attr.type], attr.name
    for name, attr_type in hyperparameters:
        op_attr = next(attr for attr in op_attrs if attr.name == name)
        assert attr_type is ATTR_TYPES[op_attr.type], name


@pytest.mark.parametrize("cls,op", CASES, ids=CASE_IDS)
def test_defaults_agree(cls, op):
    op_attrs = _optimizer_attrs(_op_def(cls, op))
    # A default-constructed optimizer passes the op's own defaults ...
    kernel_attrs = cls().kernel_attrs()
    for attr in op_attrs:
        assert attr.HasField("default_value"), attr.name
        assert _as_attr(kernel_attrs[attr.name], attr) == _default(attr), attr.name
    # ... and where the class's signature (TF's) has an argument of the attr's name, its default
    # is the op's default (None is the op's "off": an unbounded clip, no decay).
    parameters = inspect.signature(cls).parameters
    assert {name for name, _ in cls.description.hyperparameters} <= set(parameters)
    for attr in op_attrs:
        if attr.name not in parameters:
            continue
        default = parameters[attr.name].default
        assert default is not inspect.Parameter.empty, attr.name
        if default is None:
            assert _default(attr) in (-math.inf, math.inf, 0.0, False), attr.name
        else:
            assert type(default) in (bool, int, float), attr.name
            assert _as_attr(default, attr) == _default(attr), attr.name
