"""The checks stock TF lacks of the configs' and embedding classes' arguments, each rule defined
once here and called where the argument is given (the constructor), after TF's own checks.

Every message has the optimizers' form (`optimizers/accepted.py`, whose `Accepted` the number and
flag rules reuse): "<Class>: argument `<name>` is <value!r>; it must be <accepted>." A value of a
wrong type is a TypeError (its type named too), a value outside the accepted ones a ValueError.
What TF refuses itself keeps TF's message; numpy integers stay refused where TF's `isinstance(.,
int)` refuses them and accepted where TF accepts them. docs/checks.md lists the checks.
"""

import inspect
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from tf_embedding.optimizers.accepted import ANY_NUMBER, FLAG


def refuse(owner: str, name: str, value: Any, accepted: str, error: type = ValueError,
           why: str = "", at: str = "") -> None:
    """Raises `error` in the one message form; a TypeError also names the value's type, `at`
    where in the argument the value is (a feature's path, a table)."""
    kind = f" ({type(value).__name__})" if error is TypeError else ""
    at = f" at {at}" if at else ""
    why = f" ({why})" if why else ""
    raise error(f"{owner}: argument `{name}`{at} is {value!r}{kind}; it must be "
                f"{accepted}{why}.")


def check_flag(owner: str, name: str, value: Any) -> None:
    """True or False (or 0 or 1, as TF's tests pass them): "yes" or "no" would both switch on."""
    FLAG.check_type(owner, name, value)


def check_number(owner: str, name: str, value: Any) -> None:
    """A finite real number, not a bool."""
    ANY_NUMBER.check_type(owner, name, value)
    ANY_NUMBER.check_range(owner, name, value)


def check_integer(owner: str, name: str, value: Any, low: int, optional: bool = False) -> None:
    """An integer (numpy's too) >= `low`, not a bool; None too when `optional`."""
    if value is None and optional:
        return
    accepted = f"{'None or ' if optional else ''}an int >= {low}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        refuse(owner, name, value, accepted, TypeError)
    if value < low:
        refuse(owner, name, value, accepted)


def check_name(owner: str, name: str, value: Any) -> None:
    """None or a non-empty string (a table's name names its variables and checkpoint keys, a
    feature's its messages)."""
    if value is None:
        return
    if not isinstance(value, str):
        refuse(owner, name, value, "None or a non-empty string", TypeError)
    if not value:
        refuse(owner, name, value, "None or a non-empty string")


def check_optimizer(owner: str, name: str, optimizer: Any, refuse_numbers: bool = False) -> None:
    """Not a class (`SGD` for `SGD(0.1)` passes the slot protocol's duck typing and fails at
    build), nor with `refuse_numbers` a number (`0.1` is a learning rate; the embedding objects
    refuse numbers themselves, with TF's message). Which instances and names an embedding
    object takes is its own check. A ValueError, TF's type for an unsupported optimizer."""
    if isinstance(optimizer, type):
        refuse(owner, name, optimizer, "an optimizer instance such as "
               f"{optimizer.__name__}(learning_rate=0.1), not the class")
    if refuse_numbers and isinstance(optimizer, (numbers.Number, np.bool_)):
        refuse(owner, name, optimizer, "None, an optimizer instance or an optimizer's name "
               "(a learning rate is the optimizer's argument)")


def check_initializer(owner: str, name: str, initializer: Any) -> None:
    """Callable as `initializer(shape, dtype=dtype)`, as tables and slots are made; a class
    (`tf.keras.initializers.Zeros` for `Zeros()`) or a function of the shape only fails at
    build."""
    accepted = "a callable taking (shape, dtype=...), such as tf.keras.initializers.Zeros()"
    if isinstance(initializer, type):
        refuse(owner, name, initializer, accepted + ", not a class", TypeError)
    try:
        signature = inspect.signature(initializer)
    except (TypeError, ValueError):  # a builtin without a signature: called as given
        return
    try:
        signature.bind((1, 1), dtype=tf.float32)
    except TypeError as error:
        refuse(owner, name, initializer, accepted, TypeError, why=str(error))


def check_mapping(owner: str, name: str, value: Any, accepted: str) -> None:
    """None or a mapping."""
    if value is not None and not isinstance(value, Mapping):
        refuse(owner, name, value, accepted, TypeError)


def check_devices(owner: str, name: str, devices: Any, at: str = "") -> None:
    """A sequence of device strings (or None, the default device), each one TF can parse: a
    single string would be read as one device per character."""
    accepted = "a sequence of device strings, one per block, such as ['/cpu:0', '/cpu:1']"
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        refuse(owner, name, devices, accepted, TypeError, at=at)
    for device in devices:
        if device is None:
            continue
        if not isinstance(device, str):
            refuse(owner, name, device, accepted, TypeError, at=at)
        try:
            tf.DeviceSpec.from_string(device)
        except ValueError as error:
            refuse(owner, name, device, accepted, why=str(error), at=at)


def check_directory(owner: str, name: str, directory: Any) -> None:
    """None, or a path (str or os.PathLike) where this process can make or write a directory:
    otherwise the step that first writes there fails."""
    if directory is None:
        return
    accepted = "None or a directory this process can create or write"
    if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
        refuse(owner, name, directory, accepted, TypeError)
    path = os.path.abspath(os.fspath(directory))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        refuse(owner, name, directory, accepted, why=f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        refuse(owner, name, directory, accepted, why=f"{existing} is not writable")


def check_feature_config(owner: str, feature_config: Any, feature_classes: tuple[type, ...],
                         what: str, allow_empty: bool = True,
                         name: str = "feature_config") -> None:
    """A nested structure of FeatureConfigs (instances of `feature_classes`, which `what`
    names), at least one unless `allow_empty`: anything else fails with an AttributeError of its
    first use, an empty one at build (a queue of no tensors)."""
    accepted = f"a {what} or a nested structure (dict, list, tuple) of them"
    flat = nest.flatten_with_joined_string_paths(feature_config)
    if not flat and not allow_empty:
        refuse(owner, name, feature_config, accepted + ", at least one")
    for path, feature in flat:
        if not isinstance(feature, feature_classes):
            refuse(owner, name, feature, accepted, TypeError, at=repr(path) if path else "")

