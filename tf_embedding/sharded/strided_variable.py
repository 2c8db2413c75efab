"""`StridedShardedVariable`: a table whose row `r` lives in block `r % n` ('mod' partitioning).

TF's `ShardedVariable` assumes contiguous blocks wherever it sees the whole table: a checkpoint
stores each block as a slice of the full tensor, reading concatenates the blocks, `assign`
slices. None of that describes a strided layout, so this subclass keeps the container (iterating
yields the blocks, so the engine treats both layouts alike) and replaces every whole-table view:

* checkpoints: the full table, reassembled, as one tensor under the variable's key (the format
  of an unsharded stock variable), and restored by striding it back into the blocks. A 'mod'
  checkpoint therefore restores into any partition strategy and block count, into stock TF's and
  tf_embedding's `TPUEmbeddingForServing`, and takes any of their checkpoints;
* reading: conversion to a tensor, `numpy()`, indexing and the operators see the table in row
  order;
* writing: `assign`, `assign_add`, `assign_sub`, and the scatter ops and `sparse_read` (through
  `_decompose_indices`) map row `r` to block `r % n`, local row `r // n`.
"""

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.distribute import sharded_variable
from tensorflow.python.framework import tensor_conversion_registry
from tensorflow.python.framework import type_spec_registry
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base


def interleave(blocks: Sequence[Any]) -> tf.Tensor:
    """The whole table from its strided blocks: row r is row r // n of block r % n."""
    stride = len(blocks)
    vocabulary_size = sum(int(block.shape[0]) for block in blocks)
    return tf.dynamic_stitch(
        [tf.range(block, vocabulary_size, stride) for block in range(stride)],
        [tf.convert_to_tensor(block) for block in blocks])


def stride(value: Any, num_blocks: int) -> list[tf.Tensor]:
    """Each block's rows of a whole-table `value`: block s gets rows s, s + n, ..."""
    value = tf.convert_to_tensor(value)
    return [value[block::num_blocks] for block in range(num_blocks)]


@type_spec_registry.register("tf_embedding.StridedShardedVariableSpec")
class StridedShardedVariableSpec(sharded_variable.ShardedVariableSpec):
    """Rebuilds a `StridedShardedVariable` (not a contiguous one) from its blocks, e.g. when
    one is passed to a `tf.function`."""

    value_type = property(lambda self: StridedShardedVariable)

    def _from_components(self, variables: Sequence[Any]) -> "StridedShardedVariable":
        return StridedShardedVariable(variables)


class StridedShardedVariable(sharded_variable.ShardedVariable):
    """Blocks `variables` of a table split row by row: block s holds rows s, s + n, s + 2n, ...
    (n = len(variables)), so the first `vocabulary_size % n` blocks have one row more."""

    @property
    def _type_spec(self) -> StridedShardedVariableSpec:
        return StridedShardedVariableSpec(
            *(resource_variable_ops.VariableSpec(v.shape, v.dtype) for v in self._variables))

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        # Defining this (ShardedVariable defines the legacy _gather_saveables_for_checkpoint)
        # makes TF save one whole tensor instead of per-block slices.
        return {trackable_base.VARIABLE_VALUE_KEY: interleave(self._variables)}

    def _restore_from_tensors(self, restored_tensors: dict[str, tf.Tensor]) -> Any:
        return tf.group([
            block.assign(value) for block, value in zip(
                self._variables,
                stride(restored_tensors[trackable_base.VARIABLE_VALUE_KEY],
                       len(self._variables)))])

    def assign(self, value: Any, use_locking: Any = None, name: Any = None,
               read_value: bool = True) -> "StridedShardedVariable":
        for block, part in zip(self._variables, stride(value, len(self._variables))):
            block.assign(part)
        return self

    def assign_add(self, delta: Any, use_locking: Any = False, name: Any = None,
                   read_value: bool = True) -> "StridedShardedVariable":
        for block, part in zip(self._variables, stride(delta, len(self._variables))):
            block.assign_add(part)
        return self

    def assign_sub(self, delta: Any, use_locking: Any = False, name: Any = None,
                   read_value: bool = True) -> "StridedShardedVariable":
        for block, part in zip(self._variables, stride(delta, len(self._variables))):
            block.assign_sub(part)
        return self

    def numpy(self) -> Any:
        return interleave(self._variables).numpy()

    def __getitem__(self, slice_spec: Any) -> tf.Tensor:
        return interleave(self._variables)[slice_spec]

    def _decompose_indices(self, indices: tf.Tensor) -> tuple[list[tf.Tensor], tf.Tensor]:
        """Per block, its local rows of the global 1-D `indices`; and each index's block (the
        contiguous version this replaces would silently use 'div' block boundaries)."""
        if indices.shape.rank != 1:
            raise ValueError("StridedShardedVariable: indices must be a 1-D tensor for sparse "
                             f"operations. Received shape: {indices.shape}")
        num_blocks = len(self._variables)
        blocks = tf.cast(indices % num_blocks, tf.int32)
        return tf.dynamic_partition(indices // num_blocks, blocks, num_blocks), blocks

    def sparse_read(self, indices: Any, name: Any = None) -> tf.Tensor:
        """The rows `indices`, in the order given."""
        indices = tf.convert_to_tensor(indices)
        per_block, blocks = self._decompose_indices(indices)
        positions = tf.dynamic_partition(tf.range(tf.size(indices)), blocks,
                                         len(self._variables))
        return tf.dynamic_stitch(positions, [block.sparse_read(local) for block, local in
                                             zip(self._variables, per_block)])

    def _copy_trackable_to_cpu(self, object_map: dict[Any, Any]) -> None:
        """For async checkpoints: the CPU copy must be strided too."""
        fresh = self not in object_map
        super()._copy_trackable_to_cpu(object_map)
        if fresh:
            object_map[self] = StridedShardedVariable(list(object_map[self]), name=self.name)


def _to_tensor(variable: StridedShardedVariable, dtype: Any = None, name: Any = None,
               as_ref: bool = False) -> tf.Tensor:
    del name
    if dtype is not None and not dtype.is_compatible_with(variable.dtype):
        raise ValueError(f"Incompatible type conversion requested to type {dtype.name!r} for "
                         f"variable of type {variable.dtype.name!r}")
    if as_ref:
        raise NotImplementedError("StridedShardedVariable cannot be used as a reference.")
    return interleave(variable._variables)  # pylint: disable=protected-access


# Priority 99: ahead of ShardedVariable's own conversion (100), which concatenates the blocks.
tensor_conversion_registry.register_tensor_conversion_function(
    StridedShardedVariable, _to_tensor, priority=99)


def _overload_operators() -> None:
    """Arithmetic and comparison operators on the table in row order (ShardedVariable's own
    overloads convert by concatenating the blocks)."""
    for operator in tf.Tensor.OVERLOADABLE_OPERATORS:
        if operator == "__getitem__":
            continue
        tensor_operator = getattr(tf.Tensor, operator)
        setattr(StridedShardedVariable, operator,
                lambda variable, *args, _op=tensor_operator, **kwargs: _op(
                    _to_tensor(variable), *args, **kwargs))


_overload_operators()
