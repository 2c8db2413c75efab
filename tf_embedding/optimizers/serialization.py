"""Embedding optimizers as plain, JSON-ready dicts and back (Keras configs, `get_config`).

An optimizer's config is its class name and every constructor argument, read from the
signature its description gives the class (`classes.signature`), so no class lists its
arguments twice. `clipvalue` is stored as the `[min, max]` pair the object keeps.
"""

import inspect
from typing import Any


def constructor_arguments(optimizer: Any, cls: type) -> dict[str, Any]:
    """{argument of `cls`'s constructor: its value in `optimizer`} (our object or stock TF's
    of the same class, which keep every argument under its name; clipping as
    `clip_gradient_min` / `_max`)."""
    arguments = {}
    for argument in list(inspect.signature(cls.__init__).parameters)[1:]:
        if argument == "clipvalue":
            bounds = (optimizer.clip_gradient_min, optimizer.clip_gradient_max)
            arguments[argument] = None if bounds == (None, None) else bounds
        else:
            arguments[argument] = getattr(optimizer, argument)
    return arguments


def _plain_number(name: str, value: Any) -> Any:
    """`value` as a JSON scalar, or a ValueError naming the argument."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()  # a numpy scalar
    what = "a Python callable" if callable(value) else f"a {type(value).__name__}"
    raise ValueError(f"the optimizer's `{name}` is {what} ({value!r}), which a config cannot "
                     "hold; give a number (a Keras optimizer with a learning-rate schedule "
                     "saves its schedule)")


def get_config(optimizer: Any) -> dict[str, Any]:
    """{argument: plain value} of an embedding optimizer (`_Optimizer.get_config`).

    Raises:
      ValueError: an argument a config cannot hold (a callable learning rate or
        `slot_variable_creation_fn`), naming it.
    """
    config = {}
    for name, value in constructor_arguments(optimizer, type(optimizer)).items():
        if name == "clipvalue" and value is not None:
            value = [_plain_number("clipvalue", bound) for bound in value]
        else:
            value = _plain_number(name, value)
        config[name] = value
    return config


def arguments_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments `get_config` described (`clipvalue` a tuple again)."""
    arguments = dict(config)
    if isinstance(arguments.get("clipvalue"), list):
        arguments["clipvalue"] = tuple(arguments["clipvalue"])
    return arguments
