"""The unit of work a sharding hands a block transport: a `DeviceCall` runs `body` on a block's
device with `inputs`, and returns the tensors to bring back to where the step runs.

`Narrow(ids)`: int64 ids known to be below 2^31 (block-local ids of a block of fewer rows),
which a transport that sends them may carry as int32, half the bytes, and which arrive as int64
for the kernels. A transport that does not send them uses the ids as they are (`tensor_of`).
"""

import dataclasses
from typing import Callable, Sequence

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Narrow:
    """int64 `ids` whose values are known to lie in [0, 2^31): sent as int32."""

    ids: tf.Tensor


Input = tf.Tensor | Narrow


def tensor_of(value: Input) -> tf.Tensor:
    """The tensor an input stands for, where it is used without being sent."""
    return value.ids if isinstance(value, Narrow) else value


@dataclasses.dataclass(frozen=True)
class DeviceCall:
    """Work on `device`: `body` receives `inputs` as tensors there and returns the tensors to
    bring back to where the step runs (none for an update)."""

    device: str | None  # None: the default device (one process without a strategy)
    inputs: Sequence[Input]
    body: Callable[[list[tf.Tensor]], list[tf.Tensor]]


def narrowed(local_ids: tf.Tensor, block_rows: int) -> Input:
    """A block's local ids as they may travel: `Narrow` if the block has at most 2^31 rows (the
    ids were checked against the vocabulary when converted)."""
    return Narrow(local_ids) if block_rows <= 2**31 else local_ids
