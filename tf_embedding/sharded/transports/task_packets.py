"""`TaskPackets`, the block transport of ParameterServerStrategy: the tensors of a step between
the worker running it and each parameter-server task, one packet per task and direction.

TensorFlow partitions a function by device and sends each tensor that crosses a task boundary
with its own Send/Recv pair, one remote call each. A step that sent every table's ids, gains and
gradients to every block separately paid a call per tensor, per table and per block; here the
step's calls to the blocks of one task (`DeviceCall`) are gathered into one packet, the blocks'
work runs on the task from the unpacked tensors, and its results travel back in one packet too:
one transfer per task each way, whatever the number of tables and blocks.

* A packet is one int32 tensor of 64-byte rows: a header with the first dimension of each
  tensor (int64, two words each), then every tensor's words (float32 bit for bit, int64 as two
  words), each part starting on a row of its own, so that the receiver's parts are slices of
  the packet, not copies. Bits cross unchanged, so a step gives the same results packed or not.
* `Narrow(ids)` (`device_calls`) travel as int32, half the bytes, and arrive as int64.
* A tensor already sent to a task earlier in the same traced function (a pooled block's lookups,
  which its update reads again) is not sent again: `TaskPackets` remembers what each
  graph sent where.
"""

import math
import weakref
from typing import Any, Callable, Hashable, Sequence, TypeVar

import tensorflow as tf

from tf_embedding.sharded.transports.block_calls import BlockCalls
from tf_embedding.sharded.transports.device_calls import DeviceCall, Input, Narrow, tensor_of

T = TypeVar("T")
_WORD = tf.int32
_WORDS_PER_ELEMENT = {tf.int32: 1, tf.float32: 1, tf.int64: 2}
# Words per packet row: 64 bytes, the alignment at which TF slices a tensor's first dimension
# without copying it (EIGEN_MAX_ALIGN_BYTES).
_ALIGN = 16


def _name(tensor: tf.Tensor) -> str:
    """A tensor's name for a message (an eager tensor has none)."""
    try:
        return tensor.name
    except AttributeError:
        return f"of shape {tensor.shape}"


def _inner_shape(tensor: tf.Tensor) -> tuple[int, ...]:
    """The static shape after the first dimension (a scalar: ())."""
    shape = tensor.shape
    if shape.rank is None or not shape[1:].is_fully_defined():
        raise ValueError(f"A tensor sent to a parameter-server task needs a known rank and "
                         f"known dimensions after the first: {_name(tensor)} has {shape}.")
    return tuple(shape.as_list()[1:])


def _words(tensor: tf.Tensor) -> tf.Tensor:
    """`tensor`'s elements as int32 words, flat, bit for bit."""
    if tensor.dtype not in _WORDS_PER_ELEMENT:
        raise TypeError(f"Cannot pack {tensor.dtype.name} tensor {_name(tensor)}: packets carry "
                        "int32, int64 and float32.")
    words = tensor if tensor.dtype == _WORD else tf.bitcast(tensor, _WORD)
    return tf.reshape(words, [-1])


def _aligned(words: tf.Tensor) -> list[tf.Tensor]:
    """Flat `words` followed by zeros up to a whole number of `_ALIGN`-word rows."""
    return [words, tf.zeros(tf.math.floormod(-tf.size(words), _ALIGN), _WORD)]


def pack(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """One int32 packet [rows, _ALIGN] of `tensors` (each with static dimensions after its
    first): a header of their first dimensions, then each tensor's words, every part starting
    on a row of its own (`unpack` then slices without copying)."""
    for tensor in tensors:
        _inner_shape(tensor)
    leading = tf.stack([tf.shape(tensor, out_type=tf.int64)[0] if tensor.shape.rank
                        else tf.constant(1, tf.int64) for tensor in tensors])
    parts = [part for tensor in [leading, *tensors] for part in _aligned(_words(tensor))]
    return tf.reshape(tf.concat(parts, axis=0), [-1, _ALIGN])


# What `unpack` needs to know of each tensor: its dtype and its shape after the first dimension
# (None: a scalar).
Spec = tuple[tf.DType, tuple[int, ...] | None]


def spec_of(tensor: tf.Tensor) -> Spec:
    return tensor.dtype, (_inner_shape(tensor) if tensor.shape.rank else None)


def _rows(words: Any) -> Any:
    """The packet rows that hold `words` words."""
    return (words + _ALIGN - 1) // _ALIGN


def unpack(packet: tf.Tensor, specs: Sequence[Spec]) -> list[tf.Tensor]:
    """The tensors `pack` put in `packet`, given each one's `spec_of`. Every part is a slice of
    the packet at a multiple of 64 bytes, which TF makes without copying."""
    count = len(specs)
    header_rows = _rows(2 * count)
    header = tf.reshape(packet[:header_rows], [-1])[:2 * count]
    leading = tf.bitcast(tf.reshape(header, [count, 2]), tf.int64)
    words = leading * tf.constant([_WORDS_PER_ELEMENT[dtype] * math.prod(inner or ())
                                   for dtype, inner in specs], tf.int64)
    parts = tf.split(packet, tf.concat([[header_rows], _rows(words)], axis=0), num=count + 1)
    tensors = []
    for part, size, (dtype, inner) in zip(parts[1:], tf.unstack(words, num=count), specs):
        flat = tf.reshape(part, [-1])[:size]
        shape = [] if inner is None else [-1, *inner]
        if dtype == tf.int64:
            tensors.append(tf.reshape(tf.bitcast(tf.reshape(flat, [-1, 2]), tf.int64), shape))
        else:
            tensors.append(tf.reshape(flat if dtype == _WORD else tf.bitcast(flat, dtype),
                                      shape))
    return tensors


class TaskPackets(BlockCalls):
    """Runs a step's `DeviceCall`s with one packet per device and direction, remembering per
    traced graph what was sent where."""

    def __init__(self) -> None:
        # Graphs die with their functions; so does what they remembered.
        self._graphs: "weakref.WeakKeyDictionary[Any, dict[Hashable, Any]]" = (
            weakref.WeakKeyDictionary())

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, made once per traced graph and `key`."""
        memo = self._graphs.setdefault(tf.compat.v1.get_default_graph(), {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def run(self, calls: Sequence[DeviceCall]) -> list[list[tf.Tensor]]:
        """Each call's body run on its device; returns each call's outputs where the step runs.

        Per device, the inputs not yet sent there in this graph travel in one packet, and the
        outputs of all its calls come back in one.
        """
        by_device: dict[str | None, list[int]] = {}
        for index, call in enumerate(calls):
            by_device.setdefault(call.device, []).append(index)
        results: list[list[tf.Tensor]] = [[] for _ in calls]
        for device, indices in by_device.items():
            received = iter(self._send(device, [value for index in indices
                                                for value in calls[index].inputs]))
            outputs: list[tf.Tensor] = []
            with tf.device(device):
                for index in indices:
                    call = calls[index]
                    results[index] = call.body([next(received) for _ in call.inputs])
                    outputs += results[index]
                packet = pack(outputs) if outputs else None
            if packet is not None:
                returned = iter(unpack(packet, [spec_of(output) for output in outputs]))
                for index in indices:
                    results[index] = [next(returned) for _ in results[index]]
        return results

    def _send(self, device: str | None, values: Sequence[Input]) -> list[tf.Tensor]:
        """`values` as tensors on `device`: the ones not sent there yet in this graph go in one
        packet, unpacked there."""
        memo = self._graphs.setdefault(tf.compat.v1.get_default_graph(), {})
        new: dict[Any, Input] = {}
        for value in values:
            key = ("sent", device, tensor_of(value).ref())
            if key not in memo:
                new.setdefault(key, value)
        if new:
            wire = [tf.cast(value.ids, tf.int32) if isinstance(value, Narrow) else value
                    for value in new.values()]
            packet = pack(wire)
            with tf.device(device):
                for (key, value), arrived in zip(
                        new.items(), unpack(packet, [spec_of(tensor) for tensor in wire])):
                    memo[key] = (tf.cast(arrived, tf.int64) if isinstance(value, Narrow)
                                 else arrived)
        return [memo[("sent", device, tensor_of(value).ref())] for value in values]
