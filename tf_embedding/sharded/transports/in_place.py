"""`InPlace`: the block transport of one machine's devices (the default strategy,
MirroredStrategy): each `DeviceCall` runs on its block's device, its inputs used as they are (no
packets, no narrowing: TF moves a tensor between one process's devices itself)."""

from typing import Callable, Hashable, Sequence, TypeVar

import tensorflow as tf

from tf_embedding.sharded.transports.block_calls import BlockCalls
from tf_embedding.sharded.transports.device_calls import DeviceCall, tensor_of

T = TypeVar("T")


def run_in_place(calls: Sequence[DeviceCall]) -> list[list[tf.Tensor]]:
    """Each call's body on its device, with its inputs as they are."""
    results = []
    for call in calls:
        with tf.device(call.device):
            results.append(call.body([tensor_of(value) for value in call.inputs]))
    return results


class InPlace(BlockCalls):
    """Runs a step's calls where their blocks live."""

    def run(self, calls: Sequence[DeviceCall]) -> list[list[tf.Tensor]]:
        return run_in_place(calls)

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`: nothing is sent, so nothing needs remembering."""
        del key
        return make()
