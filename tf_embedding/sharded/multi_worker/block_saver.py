"""How the workers of a multi-worker `TPUEmbedding` write one checkpoint together, each only its
own blocks, with no gather of a table.

MWMS's rule is that every worker saves, the chief (rank 0) to the real path and the others to
temporary ones, and what the chief writes is the checkpoint. A multi-worker `TPUEmbedding` has a
`BlockWriter` child (`WRITER_NAME`), saved by a registered checkpoint saver (`save_blocks`),
which TF runs on every worker before the ordinary tensors of a save:

1. The workers learn the chief's file prefix (one gather of its bytes).
2. Each worker writes its contiguous blocks as slices of the full shape, under the tables' own
   checkpoint keys (`<engine path>/<variable name>/.ATTRIBUTES/VARIABLE_VALUE`: the writer's
   object path is `<engine path>/WRITER_NAME`),
   to `<chief's prefix>_temp/worker-<rank>` (a shared filesystem, which restoring needs too).
3. After a second gather (every worker has written), the chief returns those prefixes, and
   TF's own merge (`MergeV2Checkpoints`, as for a sharded save) makes them part of its
   checkpoint. The others return nothing; their temporary checkpoints lack the tables.

The result is one checkpoint in the format of a stock `ShardedVariable`'s: each key one
full-shape tensor written as slices, which stock TF, one process and any worker count restore.
A 'mod' block is no slice: its workers exchange rows and write windows of the table
(`strided_windows`). The writer's node carries no tensors: a process that restores without
it (one process, stock TF) ignores it. (It is the engine's child, not the variables': a variable
node with a child is no "simple" variable to TF, which would then not restore it as it is
created but initialise it and assign it afterwards, twice the memory.)
"""

from typing import Any, Mapping

import tensorflow as tf
from tensorflow.python.ops import gen_io_ops
from tensorflow.python.saved_model import registration
from tensorflow.python.trackable import base as trackable_base
from tensorflow.python.trackable import trackable_utils

# The longest chief's file prefix the workers can be told, in bytes.
_MAX_PREFIX_BYTES = 4096
# The writer's name among its variable's children.
WRITER_NAME = "worker_blocks"


class BlockWriter(trackable_base.Trackable):
    """The checkpoint writer of one multi-worker `TPUEmbedding`'s blocks (module docstring)."""

    def __init__(self, engine: trackable_base.Trackable):
        self.engine = engine

    def block_variables(self) -> list[tuple[str, Any]]:
        """(name among the engine's children, variable) of each of the engine's
        `WorkerBlockVariable`s, by name."""
        children = self.engine._trackable_children()  # pylint: disable=protected-access
        return sorted((name, child) for name, child in children.items()
                      if hasattr(child, "saved_slices"))


def _variable_key(writer_path: str, name: str) -> str:
    """The checkpoint key of the engine's child `name`, the engine's writer being at
    `writer_path`."""
    engine_path = writer_path[:-len(WRITER_NAME)].rstrip("/")
    local_name = trackable_utils.escape_local_name(name)
    variable_path = f"{engine_path}/{local_name}" if engine_path else local_name
    return trackable_utils.checkpoint_key(variable_path, trackable_base.VARIABLE_VALUE_KEY)


def save_blocks(trackables: Mapping[str, BlockWriter],
                file_prefix: tf.Tensor) -> list[tf.Tensor]:
    """The registered save function: writes this worker's blocks (module docstring)."""
    paths = sorted(trackables)
    variables = [(path, name, variable) for path in paths
                 for name, variable in trackables[path].block_variables()]
    if not variables:
        return []
    group = variables[0][2].group
    with tf.device(group.device):
        chief_prefix = _chief_string(group, file_prefix)
        names, slices, tensors = [], [], []
        for path, name, variable in variables:
            for spec, value in variable.saved_slices():
                names.append(_variable_key(path, name))
                slices.append(spec)
                tensors.append(value)
        own_prefix = tf.strings.join([chief_prefix, f"_temp/worker-{group.rank}"])
        writes = [tf.no_op()]
        if tensors:
            writes = [gen_io_ops.save_v2(own_prefix, names, slices, tensors)]
        with tf.control_dependencies(writes):
            # Nobody returns before every worker has written its blocks.
            group.all_gather(tf.ones([1], tf.int32), group.exchange_keys()[0])
    if group.rank != 0:
        return []
    # Who writes is known everywhere (`writing_ranks`).
    writers = sorted({rank for _, _, variable in variables
                      for rank in variable.writing_ranks()})
    return [tf.strings.join([chief_prefix, f"_temp/worker-{rank}"]) for rank in writers]


def restore_nothing(trackables: Mapping[str, BlockWriter], merged_prefix: tf.Tensor) -> None:
    """The registered restore function: the blocks restore through their variables."""
    del trackables, merged_prefix


def _chief_string(group: Any, value: tf.Tensor) -> tf.Tensor:
    """The chief's `value` (a scalar string), on every worker: one gather of its bytes."""
    tf.debugging.assert_less_equal(
        tf.strings.length(value), _MAX_PREFIX_BYTES,
        message=f"TPUEmbedding: a multi-worker checkpoint's path must be at most "
                f"{_MAX_PREFIX_BYTES} bytes long")
    length = tf.strings.length(value)[None]
    data = tf.cast(tf.io.decode_raw(value, tf.uint8, fixed_length=_MAX_PREFIX_BYTES),
                   tf.int32)
    gathered = group.all_gather(tf.concat([length, data], axis=0)[None],
                                group.exchange_keys()[0])
    chief_length, chief_bytes = gathered[0, 0], gathered[0, 1:]
    byte_strings = tf.constant([bytes([byte]) for byte in range(256)])
    return tf.strings.reduce_join(tf.gather(byte_strings, chief_bytes[:chief_length]))


# TF looks registered savers up by the writer's class when it saves, so registering once, at
# import, covers every engine.
registration.register_checkpoint_saver(
    package="tf_embedding", name="WorkerBlocks",
    predicate=lambda trackable: isinstance(trackable, BlockWriter),
    save_fn=save_blocks, restore_fn=restore_nothing, strict_predicate_restore=False)

