"""What every embedding optimizer shares: `_Optimizer`, the base class of the optimizer classes
that `tf_embedding.optimizers` makes from their descriptions (`catalogue.py`).

An optimizer runs the fused CPU update op its description names instead of TPU load/retrieve
ops and configuration protos. Its public contract, which the ops, the engines, the feature
columns and the Keras translations use: `description` (the class's `OptimizerDescription`: op,
slots, hyperparameters), `slot_names()`, `kernel_attrs()` (the op's attrs) and
`learning_rate_tensor()` (its `learning_rate` input). The private slot protocol
(`_slot_names`, `_slot_initializers`, `_create_slots`) is TensorFlow's, kept beside it so that
embedding classes and `slot_variable_creation_fn` callbacks written for stock TF work unchanged.
Common arguments, validation and equality are those of TF 2.21's `tf.tpu.experimental.embedding`
`_Optimizer`.
"""


import abc
import math
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, Union

import tensorflow as tf
from tensorflow.python.ops import init_ops_v2

from tf_embedding.optimizers import accepted
from tf_embedding.optimizers import serialization
from tf_embedding.optimizers.description import OptimizerDescription

LearningRate = Union[float, Callable[[], Any]]
ClipValueType = Union[Tuple[Optional[float], Optional[float]], float]
SlotVariableCreationFn = Callable[[Any, List[str], List[init_ops_v2.Initializer]],
                                  Dict[str, tf.Variable]]
# Attrs of a fused update op: floats (limits, factors, hyperparameters) and bools (switches).
_KernelAttrs = Dict[str, Union[float, bool]]


def _constant_slot_initializer(value: float = 0.0) -> init_ops_v2.Constant:
    """The slot initializer TF uses; `support_partition` lets sharded slots initialise per shard."""
    return init_ops_v2.Constant(value, support_partition=True)


def _limit(value: Optional[float], unbounded: float) -> float:
    """A clipping limit as a kernel attr: None means unbounded in that direction."""
    return unbounded if value is None else float(value)


class _Optimizer(metaclass=abc.ABCMeta):
    """Parameters shared by every embedding optimizer (TF's `_Optimizer(_WithSlotVariables)`).

    Subclasses set `description`; the slots, the op's attrs and the optimizer-specific
    arguments follow from it.
    """

    # The optimizer's description (catalogue.py): its fused op, slots and hyperparameters.
    description: ClassVar[OptimizerDescription]

    def __init__(
        self,
        learning_rate: LearningRate,
        use_gradient_accumulation: bool,
        clip_weight_min: Optional[float],
        clip_weight_max: Optional[float],
        weight_decay_factor: Optional[float],
        multiply_weight_decay_factor_by_learning_rate: Optional[bool],
        clipvalue: Optional[ClipValueType] = None,
        slot_variable_creation_fn: Optional[SlotVariableCreationFn] = None,
        low_dimensional_packing_status: bool = False,
    ):
        """Validates and stores the common arguments in TF's order.

        Attribute order matters: `__eq__` and `__hash__` walk `__dict__` in insertion order, as
        TF's do.
        """
        if slot_variable_creation_fn is not None and not callable(slot_variable_creation_fn):
            raise ValueError(
                "Argument `slot_variable_creation_fn` must be either None or a "
                f"callable. Received: {slot_variable_creation_fn}")
        self.slot_variable_creation_fn = slot_variable_creation_fn
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        if not use_gradient_accumulation and clipvalue is not None:
            raise ValueError(
                "When `use_gradient_accumulation` is False, gradient clipping "
                "cannot be used and `clipvalue` should be left as None. "
                f"Received value {clipvalue} for argument `clipvalue`.")
        if clipvalue is None:
            clipvalue = (None, None)
        elif not isinstance(clipvalue, tuple):
            clipvalue = (-1.0 * clipvalue, clipvalue)
        self.clip_gradient_min, self.clip_gradient_max = clipvalue
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = (
            multiply_weight_decay_factor_by_learning_rate)
        self.low_dimensional_packing_status = low_dimensional_packing_status

    def slot_names(self) -> List[str]:
        """Names of the slot variables, in the order the fused update op takes them."""
        return list(self.description.slot_names)

    def _slot_names(self) -> List[str]:
        """`slot_names()` under the name of TF's slot protocol."""
        return self.slot_names()

    def slot_initializers(self) -> List[init_ops_v2.Initializer]:
        """Initializers of the slot variables, parallel to `slot_names()`: each slot's initial
        value, a number or the argument that holds it."""
        return [_constant_slot_initializer(getattr(self, slot.initial_value)
                                           if isinstance(slot.initial_value, str)
                                           else slot.initial_value)
                for slot in self.description.slots]

    def _slot_initializers(self) -> List[init_ops_v2.Initializer]:
        """`slot_initializers()` under the name of TF's slot protocol."""
        return self.slot_initializers()

    def _create_slots(
        self,
        table: Any,
        variable_creator: Callable[[str, init_ops_v2.Initializer], tf.Variable],
        initializer_wrapper: Optional[
            Callable[[str, init_ops_v2.Initializer], init_ops_v2.Initializer]] = None,
    ) -> Dict[str, tf.Variable]:
        """Creates the slot variables of `table` (the table variable), keyed by slot name.

        `variable_creator(slot_name, initializer)` makes each slot unless the user supplied
        `slot_variable_creation_fn(table, slot_names, initializers)`, which then makes them all.
        `initializer_wrapper(slot_name, initializer)` may replace each initializer first.
        """
        names = self.slot_names()
        initializers = self.slot_initializers()
        if initializer_wrapper is not None:
            initializers = [initializer_wrapper(name, initializer)
                            for name, initializer in zip(names, initializers)]
        if self.slot_variable_creation_fn is not None:
            return self.slot_variable_creation_fn(table, names, initializers)
        return {name: variable_creator(name, initializer)
                for name, initializer in zip(names, initializers)}

    def learning_rate_tensor(self) -> tf.Tensor:
        """The current learning rate as a float32 scalar; a callable is evaluated on each call,
        so schedules advance with whatever step counter they read. TypeError when it gives no
        real number (its value is the apply kernels' check: finite and >= 0)."""
        return accepted.learning_rate_value(type(self).__name__, self.learning_rate)

    def kernel_attrs(self) -> _KernelAttrs:
        """Attrs of the fused `description.op` (without `table_name`)."""
        attrs: _KernelAttrs = {
            "clip_gradient_min": _limit(self.clip_gradient_min, -math.inf),
            "clip_gradient_max": _limit(self.clip_gradient_max, math.inf),
            "clip_weight_min": _limit(self.clip_weight_min, -math.inf),
            "clip_weight_max": _limit(self.clip_weight_max, math.inf),
            "weight_decay_factor": float(self.weight_decay_factor or 0.0),
            "multiply_weight_decay_factor_by_learning_rate": bool(
                self.multiply_weight_decay_factor_by_learning_rate),
        }
        for name, attr_type in self.description.hyperparameters:
            attrs[name] = attr_type(getattr(self, name))
        return attrs

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, self.__class__):
            return all(attr1 == attr2
                       for attr1, attr2 in zip(self.__dict__.items(), other.__dict__.items()))
        return False

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.items()))

    def get_config(self) -> Dict[str, Any]:
        """Every constructor argument as a plain value (`optimizers.serialization`).

        Raises:
          ValueError: a callable learning rate or `slot_variable_creation_fn`, which no config
            can hold.
        """
        return serialization.get_config(self)

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "_Optimizer":
        """The optimizer `get_config` described."""
        return cls(**serialization.arguments_from_config(config))
