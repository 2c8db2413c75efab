"""The values an optimizer argument's math accepts: one `Accepted` per argument, declared beside
it in the optimizer's description (`catalogue.py`, `classes.py` for the common arguments).

Stock TF accepts values that can only give NaN or ascent (`Adam(learning_rate=-0.1)`,
`AdagradMomentum(beta2=2.0)`, `SGD(clipvalue=-1.0)`, `SGD("0.1")`); tf_embedding refuses them
when the optimizer is made: types before TF's own checks (which would fail on them with a bare
comparison error), ranges after them, so TF's messages and order are kept for every value TF
refuses itself. A learning rate given as a callable or tensor is only known at the step: the
apply kernels refuse a non-finite or negative one there (`CheckLearningRate`, cc/core), and
`learning_rate_value` a value that is no number at trace time. docs/checks.md lists the
ranges (a test checks the table against these declarations).
"""

import dataclasses
import math
import numbers
from typing import Any, Optional

import numpy as np
import tensorflow as tf


def _is_number(value: Any) -> bool:
    return (isinstance(value, numbers.Real)
            and not isinstance(value, (bool, np.bool_)))


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The accepted values of one argument.

    kind: "number" (a real number, not a bool), "flag" (True or False) or "learning_rate" (a
        number, or a callable or tensor checked at the step).
    low, high: the bounds of a number; `low_open` / `high_open` exclude them.
    finite: whether +-inf is refused (clipping limits accept it: unbounded).
    optional: whether None is accepted (the argument's "not set").
    why: what a refused value would do, for the message.
    """

    kind: str = "number"
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    finite: bool = True
    optional: bool = False
    why: str = ""

    def describe(self) -> str:
        """The accepted values in words, as messages and docs/checks.md say them."""
        if self.kind == "flag":
            words = "True or False (or 0 or 1)"
        else:
            words = "a finite number" if self.finite else "a number (inf allowed)"
            words += self._interval()
            if self.kind == "learning_rate":
                words += ", or a callable returning one at each step"
        return ("None or " + words) if self.optional else words

    def _interval(self) -> str:
        has_low, has_high = self.low != -math.inf, self.high != math.inf
        if has_low and has_high:
            return (f" in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        if has_low:
            return f" {'>' if self.low_open else '>='} {self.low:g}"
        if has_high:
            return f" {'<' if self.high_open else '<='} {self.high:g}"
        return ", not NaN" if not self.finite else ""

    def check_type(self, owner: str, name: str, value: Any) -> None:
        """Raises TypeError naming `owner`'s argument `name` unless `value` has an accepted
        type."""
        if value is None and self.optional:
            return
        if self.kind == "flag":
            # 0 and 1 as TF's tests pass them; any other value is a mistake, not a switch.
            accepted = isinstance(value, (bool, np.bool_)) or (
                isinstance(value, int) and value in (0, 1))
        elif self.kind == "learning_rate":
            accepted = _is_number(value) or callable(value) or tf.is_tensor(value)
        else:
            accepted = _is_number(value)
        if not accepted:
            raise TypeError(f"{owner}: argument `{name}` is {value!r} "
                            f"({type(value).__name__}); it must be {self.describe()}.")

    def check_range(self, owner: str, name: str, value: Any) -> None:
        """Raises ValueError naming `owner`'s argument `name` when the number `value` is
        outside the accepted values (callables, tensors and None pass: see the module)."""
        if not _is_number(value) or self.kind == "flag":
            return
        number = float(value)
        inside = not math.isnan(number) and (math.isfinite(number) or not self.finite)
        inside = inside and (number > self.low if self.low_open else number >= self.low)
        inside = inside and (number < self.high if self.high_open else number <= self.high)
        if not inside:
            why = f" ({self.why})" if self.why else ""
            raise ValueError(f"{owner}: argument `{name}` is {value!r}; it must be "
                             f"{self.describe()}{why}.")


NON_NEGATIVE_RATE = Accepted(kind="learning_rate", low=0.0,
                             why="a negative rate ascends the loss, NaN or inf poisons the rows")
FLAG = Accepted(kind="flag")
OPTIONAL_FLAG = Accepted(kind="flag", optional=True)
ANY_NUMBER = Accepted()
CLIP_LIMIT = Accepted(finite=False, optional=True, why="a NaN limit makes every value NaN")
WEIGHT_DECAY = Accepted(low=0.0, optional=True, why="a negative decay grows the weights")
POSITIVE = Accepted(low=0.0, low_open=True, why="it divides, or is a power's base")
NON_NEGATIVE = Accepted(low=0.0, why="a negative strength or value drives the update the wrong "
                                     "way")
MOMENTUM_FACTOR = Accepted(low=0.0, high=1.0,
                           why="momentum above 1 makes the steps grow without bound")
DECAY_RATE = Accepted(low=0.0, high=1.0, high_open=True,
                      why="a moving average's weight of the past")
ACCUMULATOR_DECAY = Accepted(low=0.0, high=1.0, why="1 accumulates as Adagrad; above 1 the "
                                                    "accumulator's weight 1 - beta2 is negative")
NON_POSITIVE_POWER = Accepted(high=0.0, why="FTRL's rate is accumulator^-power: a positive "
                                            "power makes steps grow with the accumulated "
                                            "gradients")


def check_clipvalue(owner: str, clipvalue: Optional[Any]) -> None:
    """`clipvalue` as TF reads it: None, a limit L for (-L, L), or a (min, max) tuple. L must
    be >= 0 and min <= max: otherwise every gradient is clipped to the wrong side."""
    if clipvalue is None:
        return
    if isinstance(clipvalue, tuple):
        if len(clipvalue) != 2:
            raise ValueError(f"{owner}: argument `clipvalue` is {clipvalue!r}; it must be a "
                             "limit L (for (-L, L)) or a (min, max) tuple.")
        for limit in clipvalue:
            CLIP_LIMIT.check_type(owner, "clipvalue", limit)
            CLIP_LIMIT.check_range(owner, "clipvalue", limit)
        low, high = clipvalue
        if low is not None and high is not None and low > high:
            raise ValueError(f"{owner}: argument `clipvalue` is {clipvalue!r}; its min must be "
                             "<= its max (else every gradient is clipped to the wrong side).")
        return
    limit = Accepted(low=0.0, finite=False,
                     why="(-L, L) with a negative L clips every gradient to the wrong side")
    limit.check_type(owner, "clipvalue", clipvalue)
    limit.check_range(owner, "clipvalue", clipvalue)


def check_weight_clips(owner: str, clip_weight_min: Optional[float],
                       clip_weight_max: Optional[float]) -> None:
    """Both weight clips set: min <= max, or every weight would be set outside the other."""
    if (clip_weight_min is not None and clip_weight_max is not None
            and clip_weight_min > clip_weight_max):
        raise ValueError(f"{owner}: argument `clip_weight_min` ({clip_weight_min!r}) must be <= "
                         f"`clip_weight_max` ({clip_weight_max!r}).")


def learning_rate_value(owner: str, learning_rate: Any) -> tf.Tensor:
    """The learning rate as a float32 scalar: a callable is called (each step), and what it
    returns must be a real number or a real tensor (a TypeError naming `owner` at trace time).
    Whether its value is finite and >= 0 is the apply kernels' check, at the step."""
    value = learning_rate() if callable(learning_rate) else learning_rate
    if value is None or isinstance(value, (str, bytes, bool)):
        raise TypeError(f"{owner}: the learning rate gave {value!r}; it must give a real number "
                        "or a float tensor.")
    try:
        tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{owner}: the learning rate gave {value!r}, which is not a number: "
                        f"{error}") from error
    if not (tensor.dtype.is_floating or tensor.dtype.is_integer) or tensor.shape.rank not in (
            None, 0):
        raise TypeError(f"{owner}: the learning rate gave {value!r}; it must give a real "
                        "scalar.")
    return tf.cast(tensor, tf.float32)
