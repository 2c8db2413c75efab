"""Rows of a table's initial value, computed without the rest of the table.

A process that holds one block of a table (a multi-worker worker, or one device's block) needs
only that block's initial rows, and a table larger than one machine cannot be computed whole.
`initial_rows(initializer, shape, dtype, start, stop)` gives rows `[start, stop)` of
`initializer(shape, dtype)`, bit for bit, for the initializers whose value is a function of the
row:

* constants: Keras' (Keras 3 and tf_keras) and TF's `Zeros`, `Ones`, `Constant` of a scalar, and
  `tf_embedding.RowIdInitializer`;
* seeded random ones, whose draw is TF's counter-based stateless random ops (Philox): Keras'
  `RandomUniform`, `RandomNormal`, `TruncatedNormal` and the `VarianceScaling` family (`Glorot*`,
  `He*`, `Lecun*`) with an integer seed (Keras 3 gives an unseeded initializer an integer seed
  when it is made), and TF's (`tf.initializers`) with a `seed`. The initializer runs with the
  table's shape, so its own arithmetic (a variance scaling's fan, say) is the whole table's,
  while its random op is asked for the rows' counters only: Philox draws element `e` of a
  table from counter `e / group` (4 elements per counter for 16- and 32-bit floats, 2 for
  float64; a truncated normal reserves 256 counters a group, for its rejections), so the rows
  start at a counter offset.

Others give None: TF's unseeded random initializers draw from stateful ops (`tf.random.uniform`),
which cannot start in the middle; `independent_rows` draws those whose value does not depend on
the shape (uniform, normal, truncated normal) for the block alone, a different but equally
distributed draw. For anything else (an array constant, `Orthogonal`, a function) the caller
computes the whole value.
"""

import contextlib
import threading
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_stateless_random_ops_v2
from tensorflow.python.ops import init_ops_v2

from tf_embedding.config import RowIdInitializer

# Philox, and the automatic choice, which is Philox on CPUs and GPUs: the algorithms whose
# counters are handled here.
_PHILOX_ALGORITHMS = (1, 3)
# A truncated normal output group may consume up to this many samples (kReservedSamplesPerOutput
# in TF's random_op_cpu.h); a group therefore starts 256 * group / 4 counters further on.
_RESERVED_SAMPLES_PER_OUTPUT = 256
_PHILOX_OUTPUTS_PER_COUNTER = 4

# The stateless draws an initializer may make, by their op function's name: whether a group of
# outputs consumes a reserved run of samples (True) or one counter (False).
_DRAWS = {
    "stateless_random_uniform_v2": False,
    "stateless_random_normal_v2": False,
    "stateless_truncated_normal_v2": True,
}

_CONSTANT_CLASSES = ("Zeros", "Ones", "Constant")
_DISTRIBUTION_CLASSES = ("RandomUniform", "RandomNormal", "TruncatedNormal")
_SCALING_CLASSES = ("VarianceScaling",)

_window_lock = threading.Lock()


def initial_rows(initializer: Callable[..., Any], shape: tuple[int, int], dtype: tf.DType,
                 start: int, stop: int) -> tf.Tensor | None:
    """Rows `[start, stop)` of `initializer(shape, dtype)` without computing the others, or
    None where that is not possible (the module docstring)."""
    rows, dim = stop - start, int(shape[1])
    if not has_row_values(initializer):
        return None
    if isinstance(initializer, RowIdInitializer):
        return RowIdInitializer(initializer.offset + start)((rows, dim), dtype)
    if _family(initializer) == "constant":
        return initializer((rows, dim), dtype=dtype)
    with _counter_window(tuple(int(size) for size in shape), start * dim, rows * dim):
        value = initializer(shape, dtype=dtype)
    if tuple(value.shape) != (rows, dim):
        raise AssertionError(f"initial_rows: {type(initializer).__name__} gave shape "
                             f"{tuple(value.shape)} for rows [{start}, {stop}) of {shape}")
    return value


def independent_rows(initializer: Callable[..., Any], dtype: tf.DType, rows: int,
                     dim: int) -> tf.Tensor | None:
    """A fresh draw of `rows` rows for an initializer whose distribution does not depend on the
    table's shape (`has_shape_free_distribution`), or None."""
    if not has_shape_free_distribution(initializer):
        return None
    return initializer((rows, dim), dtype=dtype)


def has_shape_free_distribution(initializer: Callable[..., Any]) -> bool:
    """Whether `initializer` draws from a distribution that does not depend on the table's
    shape (uniform, normal, truncated normal), so a block may draw its rows alone."""
    return _family(initializer) == "distribution"


def has_row_values(initializer: Callable[..., Any]) -> bool:
    """Whether `initial_rows` gives `initializer`'s rows (else it gives None)."""
    family = _family(initializer)
    return (isinstance(initializer, RowIdInitializer)
            or (family == "constant" and np.ndim(getattr(initializer, "value", 0)) == 0)
            or (family in ("distribution", "scaling") and _draws_statelessly(initializer)
                and tf.executing_eagerly()))


def _family(initializer: Any) -> str | None:
    """'constant', 'distribution' or 'scaling' for Keras' and TF's initializer classes (by
    their class and its bases within the same library), else None."""
    for cls in type(initializer).__mro__:
        if not _is_known_library(cls):
            continue
        if cls.__name__ in _CONSTANT_CLASSES:
            return "constant"
        if cls.__name__ in _DISTRIBUTION_CLASSES:
            return "distribution"
        if cls.__name__ in _SCALING_CLASSES:
            return "scaling"
    return None


def _is_known_library(cls: type) -> bool:
    """Whether `cls` is one of Keras 3's, tf_keras' or TF's own initializer classes."""
    module = cls.__module__
    return (module == init_ops_v2.__name__
            or module.startswith("keras.src.initializers")
            or module.startswith("tf_keras.src.initializers"))


def _draws_statelessly(initializer: Any) -> bool:
    """Whether a random initializer draws from the stateless ops: Keras 3 and tf_keras always do
    (unseeded ones with a seed fixed when they are made), TF's only with a seed; Keras 3
    initializers seeded by a `SeedGenerator` draw a new seed per call and do not count."""
    module = type(initializer).__module__
    seed = getattr(initializer, "seed", None)
    if module.startswith("keras.src"):
        return isinstance(seed, int)
    if module.startswith("tf_keras.src"):
        return "tf_keras.src.initializers.initializers_v1" not in module
    return seed is not None


@contextlib.contextmanager
def _counter_window(shape: tuple[int, ...], first_element: int,
                    elements: int) -> Iterator[None]:
    """While active, a stateless draw of exactly `shape` returns only its flat elements
    `[first_element, first_element + elements)`, shaped `[elements / shape[1], shape[1]]`."""
    with _window_lock:
        originals = {name: getattr(gen_stateless_random_ops_v2, name) for name in _DRAWS}
        try:
            for name, original in originals.items():
                setattr(gen_stateless_random_ops_v2, name,
                        _windowed(original, _DRAWS[name], shape, first_element, elements))
            yield
        finally:
            for name, original in originals.items():
                setattr(gen_stateless_random_ops_v2, name, original)


def _windowed(draw: Callable[..., tf.Tensor], reserves_samples: bool, shape: tuple[int, ...],
              first_element: int, elements: int) -> Callable[..., tf.Tensor]:
    """`draw` (a stateless V2 random op) made to return the window of a `shape` draw."""

    def windowed_draw(shape_arg: Any, key: tf.Tensor, counter: tf.Tensor, alg: tf.Tensor,
                      dtype: tf.DType = tf.float32, name: str | None = None) -> tf.Tensor:
        if tuple(int(size) for size in tf.get_static_value(shape_arg)) != shape:
            return draw(shape_arg, key=key, counter=counter, alg=alg, dtype=dtype, name=name)
        if int(alg) not in _PHILOX_ALGORITHMS:
            raise ValueError(f"initial_rows: stateless random algorithm {int(alg)} is not "
                             "Philox, whose counters it knows")
        group = 2 if tf.as_dtype(dtype).size == 8 else _PHILOX_OUTPUTS_PER_COUNTER
        counters_per_group = (group * _RESERVED_SAMPLES_PER_OUTPUT // _PHILOX_OUTPUTS_PER_COUNTER
                              if reserves_samples else 1)
        first_group, lead = divmod(first_element, group)
        flat = draw([lead + elements], key=key,
                    counter=_advanced(counter, first_group * counters_per_group), alg=alg,
                    dtype=dtype, name=name)
        return tf.reshape(flat[lead:], [elements // shape[1], shape[1]])

    return windowed_draw


def _advanced(counter: tf.Tensor, count: int) -> tf.Tensor:
    """A Philox counter (two uint64 words, the low one first) advanced by `count`, as Philox's
    own `Skip` does: a 128-bit addition."""
    low, high = (int(word) for word in counter.numpy())
    value = (high << 64) + low + count
    return tf.constant([value & (2**64 - 1), (value >> 64) & (2**64 - 1)], tf.uint64)
