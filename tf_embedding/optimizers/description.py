"""The form of an optimizer's description: everything tf_embedding knows about one embedding
optimizer, stated once (`catalogue.py` holds the descriptions).

From a description come the v2 class (`tf_embedding.optimizers.<name>`, TF's signature and
checks), the v1 parameter class (`tf_embedding.feature_column.<name>Parameters`), the fused op
that applies the rule (`op`, `rows_op`; the rule itself is C++, `cc/core/optimizers.h`), the
slots and their initial values, TF1's slot variable names for checkpoint migration, and what the
Keras translations copy. tests/optimizers/test_optimizer_descriptions.py checks a description
against the op the library registers.
"""

import dataclasses
import inspect
from typing import Any, Callable, Mapping, Optional, Tuple, Union

from tf_embedding.optimizers.accepted import ANY_NUMBER, FLAG, Accepted

# A check of an optimizer's arguments: given all of them by name, raises ValueError.
Check = Callable[[Mapping[str, Any]], None]

REQUIRED = inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class Argument:
    """One optimizer-specific constructor argument (a hyperparameter).

    kernel_type: the fused op has an attr of this name and type (float or bool); None when the
        argument only sets a slot's initial value.
    accepted: the values its math accepts (`accepted.py`); a bool argument takes True or False.
    """

    name: str
    default: Any
    kernel_type: Optional[type] = None
    accepted: Accepted = ANY_NUMBER

    def __post_init__(self) -> None:
        if self.kernel_type is bool:
            object.__setattr__(self, "accepted", FLAG)

    @property
    def annotation(self) -> Any:
        if self.kernel_type is not None:
            return self.kernel_type
        return type(self.default) if self.default is not None else Optional[float]


@dataclasses.dataclass(frozen=True)
class Slot:
    """A slot variable: its name, its initial value (a number, or the argument that holds it),
    and the suffix TF1's optimizers gave it (`<table>/<suffix>`; None where TF1 had none)."""

    name: str
    initial_value: Union[float, str] = 0.0
    v1_suffix: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class V1Form:
    """How TF v1's `tpu_embedding.py` spelled the optimizer: `<name>Parameters`.

    leading: v1's arguments before the common ones, each (v1 name, default, v2 name); the v2
        name is None when it is the same. `learning_rate` comes first.
    trailing: v1's arguments between the common ones and the gradient clip limits.
    accumulates: whether v1 takes `use_gradient_accumulation` (SGD derives it from clipping).
    allows_zero_accumulator: v1 accepts `initial_accumulator_value=0` whatever
        `allow_zero_accumulator` says (FTRL).
    checks: v1's checks beyond the v2 class's.
    """

    class_name: str
    leading: Tuple[Tuple[str, Any, Optional[str]], ...]
    trailing: Tuple[Tuple[str, Any, Optional[str]], ...] = ()
    accumulates: bool = True
    allows_zero_accumulator: bool = False
    checks: Tuple[Check, ...] = ()

    def arguments(self) -> Tuple[Tuple[str, Any, str], ...]:
        """(v1 name, default, v2 name) of every optimizer-specific v1 argument."""
        return tuple((name, default, v2_name or name)
                     for name, default, v2_name in self.leading + self.trailing)


@dataclasses.dataclass(frozen=True)
class OptimizerDescription:
    """One embedding optimizer.

    name: the class name (TF's, for the v2 classes).
    rule: the update, in a line or two (the class docstring).
    op: the registered fused update op taking gradients as CSR batches; `rows_op` takes
        already-summed rows.
    learning_rate: the v2 default.
    arguments: the v2 hyperparameters before the common arguments, in TF's order.
    trailing: v2 hyperparameters after `clipvalue` (FTRL's), in TF's order.
    slots: in the order the op takes them.
    checks: the v2 class's checks of its own arguments, in TF's order.
    public: a class of `tf.tpu.experimental.embedding` (the others are TF v1's).
    keras_class: the Keras optimizer class of the same rule family, if any.
    v1: the v1 parameter class's form.
    stored_first: arguments TF's class stores before the others (attribute order is what
        `vars()` and TF's `__eq__` walk).
    """

    name: str
    rule: str
    op: str
    learning_rate: float
    arguments: Tuple[Argument, ...] = ()
    trailing: Tuple[Argument, ...] = ()
    slots: Tuple[Slot, ...] = ()
    checks: Tuple[Check, ...] = ()
    public: bool = True
    keras_class: Optional[str] = None
    v1: Optional[V1Form] = None
    stored_first: Tuple[str, ...] = ()

    def stored_order(self) -> Tuple[str, ...]:
        """The optimizer-specific arguments in the order the object stores them."""
        names = tuple(argument.name for argument in self.arguments + self.trailing)
        return self.stored_first + tuple(name for name in names if name not in self.stored_first)

    @property
    def rows_op(self) -> str:
        """`op` + "Rows", as cc/ops/sparse_apply_op_names.h names it."""
        return self.op + "Rows"

    @property
    def slot_names(self) -> Tuple[str, ...]:
        return tuple(slot.name for slot in self.slots)

    @property
    def hyperparameters(self) -> Tuple[Tuple[str, type], ...]:
        """The op's optimizer-specific attrs, (name, Python type), in the op's order."""
        return tuple((argument.name, argument.kernel_type)
                     for argument in self.arguments + self.trailing
                     if argument.kernel_type is not None)


# Checks shared by several optimizers, with TF's messages.

def positive_accumulator(arguments: Mapping[str, Any]) -> None:
    """Adagrad/FTRL accumulators start at `initial_accumulator_value`, a divisor under a power:
    positive, or non-negative where `allow_zero_accumulator` is set."""
    value = arguments["initial_accumulator_value"]
    if arguments.get("allow_zero_accumulator", False):
        if value < 0:
            raise ValueError(
                "Argument `initial_accumulator_value` must be a non-negative float when "
                f"`allow_zero_accumulator` is True. Received: {value}")
    elif value <= 0:
        raise ValueError(
            f"Argument `initial_accumulator_value` must be a positive float. "
            f"Received: {value}")


def non_negative(*names: str) -> Check:
    def check(arguments: Mapping[str, Any]) -> None:
        for name in names:
            if arguments[name] < 0.0:
                raise ValueError(f"Argument `{name}` must be >= 0. Received: {arguments[name]}.")
    return check


def in_unit_interval(*names: str) -> Check:
    """Decay rates: in [0, 1)."""
    def check(arguments: Mapping[str, Any]) -> None:
        for name in names:
            value = arguments[name]
            if value < 0. or value >= 1.:
                raise ValueError(f"Argument `{name}` must be >= 0 and < 1. Received: {value}.")
    return check


def positive_epsilon(arguments: Mapping[str, Any]) -> None:
    if arguments["epsilon"] <= 0.:
        raise ValueError(f"epsilon must be positive; got {arguments['epsilon']}.")
