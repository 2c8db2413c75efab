"""The v2 optimizer classes (`tf_embedding.optimizers.Adagrad`, ...), made from their
descriptions.

Each class has TF 2.21's signature for it: learning_rate, the optimizer's own arguments, the
common arguments (`slot_variable_creation_fn` only for optimizers with slots), `clipvalue`, the
description's trailing arguments, `low_dimensional_packing_status`. Positional calls, keyword
calls, `inspect.signature`, equality and pickling behave as for hand-written classes.
"""

import inspect
from typing import Any, Dict, List, Optional

from tf_embedding.optimizers import accepted
from tf_embedding.optimizers.base import (ClipValueType, LearningRate, SlotVariableCreationFn,
                                          _Optimizer)
from tf_embedding.optimizers.description import Argument, OptimizerDescription

_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD

# TF's common arguments between an optimizer's own and `slot_variable_creation_fn`.
_COMMON = (("use_gradient_accumulation", True, bool),
           ("clip_weight_min", None, Optional[float]),
           ("clip_weight_max", None, Optional[float]),
           ("weight_decay_factor", None, Optional[float]),
           ("multiply_weight_decay_factor_by_learning_rate", None, Optional[bool]))


# The values the common arguments' math accepts (`clipvalue`: `accepted.check_clipvalue`).
_COMMON_ACCEPTED = {"learning_rate": accepted.NON_NEGATIVE_RATE,
                    "use_gradient_accumulation": accepted.FLAG,
                    "clip_weight_min": accepted.CLIP_LIMIT,
                    "clip_weight_max": accepted.CLIP_LIMIT,
                    "weight_decay_factor": accepted.WEIGHT_DECAY,
                    "multiply_weight_decay_factor_by_learning_rate": accepted.OPTIONAL_FLAG,
                    "low_dimensional_packing_status": accepted.FLAG}


def accepted_values(description: OptimizerDescription) -> Dict[str, accepted.Accepted]:
    """{argument: its accepted values} for every numeric or bool argument of the class."""
    own = {argument.name: argument.accepted
           for argument in description.arguments + description.trailing}
    return {**_COMMON_ACCEPTED, **own}


def _check_types(description: OptimizerDescription, values: Dict[str, Any]) -> None:
    for name, accepts in accepted_values(description).items():
        accepts.check_type(description.name, name, values[name])


def _check_ranges(description: OptimizerDescription, values: Dict[str, Any]) -> None:
    for name, accepts in accepted_values(description).items():
        accepts.check_range(description.name, name, values[name])
    accepted.check_clipvalue(description.name, values["clipvalue"])
    accepted.check_weight_clips(description.name, values["clip_weight_min"],
                                values["clip_weight_max"])


def _parameter(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, _KEYWORD, default=default, annotation=annotation)


def _own(arguments: tuple[Argument, ...]) -> List[inspect.Parameter]:
    return [_parameter(argument.name, argument.default, argument.annotation)
            for argument in arguments]


def signature(description: OptimizerDescription) -> inspect.Signature:
    """The constructor's signature (with `self`)."""
    parameters = [inspect.Parameter("self", _KEYWORD),
                  _parameter("learning_rate", description.learning_rate, LearningRate)]
    parameters += _own(description.arguments)
    parameters += [_parameter(*common) for common in _COMMON]
    if description.slots:
        parameters.append(_parameter("slot_variable_creation_fn", None,
                                     Optional[SlotVariableCreationFn]))
    parameters.append(_parameter("clipvalue", None, Optional[ClipValueType]))
    parameters += _own(description.trailing)
    parameters.append(_parameter("low_dimensional_packing_status", False, bool))
    return inspect.Signature(parameters)


def make_class(description: OptimizerDescription) -> type:
    """The `_Optimizer` subclass named `description.name` that applies `description`'s rule."""
    constructor_signature = signature(description)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = constructor_signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        values: Dict[str, Any] = dict(bound.arguments)
        # Types first (TF's checks compare the values), TF's checks, then the ranges.
        _check_types(description, values)
        _Optimizer.__init__(
            self, values["learning_rate"], values["use_gradient_accumulation"],
            values["clip_weight_min"], values["clip_weight_max"], values["weight_decay_factor"],
            values["multiply_weight_decay_factor_by_learning_rate"], values["clipvalue"],
            values.get("slot_variable_creation_fn"), values["low_dimensional_packing_status"])
        for check in description.checks:
            check(values)
        _check_ranges(description, values)
        for name in description.stored_order():
            setattr(self, name, values[name])

    __init__.__signature__ = constructor_signature  # type: ignore[attr-defined]
    origin = ("`tf.tpu.experimental.embedding." + description.name + "`" if description.public
              else "TF v1's `" + description.v1.class_name + "Parameters`")
    __init__.__doc__ = f"Arguments as in {origin}."
    __init__.__qualname__ = f"{description.name}.__init__"
    return type(description.name, (_Optimizer,), {
        "__init__": __init__, "__doc__": description.rule, "description": description,
        "__module__": "tf_embedding.optimizers", "__qualname__": description.name})
