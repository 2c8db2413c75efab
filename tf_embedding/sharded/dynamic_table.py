"""A dynamic table's key index and initializer pool (`TableConfig(dynamic=...)`), and how its
batches' keys become table rows (docs/dynamic_vocabulary.md).

Before a sharding arranges a batch, `DynamicTable.remap` reads the index with the batch's keys;
in a training batch the index first counts, admits and evicts, and the rows it gave to keys
admitted now are reset (the parameters to the pool row the key hashes to, each slot to its
initial row) before anything reads them. Lookups of keys without a row are dropped from the
batch: they read a zero row and get no gradient, while the combiner's denominators, fixed at
conversion, still count them. Under a strategy of several replicas, the replicas' training
batches meet in one merge_call and the index reads them as one (the step's global batch,
counted once).
"""

import contextlib
import functools
import itertools
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops
from tensorflow.python.saved_model import save_context
from tensorflow.python.trackable import autotrackable
from tensorflow.python.trackable import base as trackable_base

from tf_embedding import dynamic_index_ops, dynamic_vocabulary, ops
from tf_embedding.serving_keys import KeyIndex, ServingKeyIndex
from tf_embedding.sharded import dynamic_relayout, parameter_server
from tf_embedding.sharded.layout import ShardLayout
from tf_embedding.sharded.multi_worker.group import WorkerGroup

NOT_COMPILABLE = (
    "inside jit_compile=True its key index cannot run: XLA has no kernel for it (a stateful "
    "lookup whose outputs' sizes depend on the keys). Compile the step without jit_compile, or "
    "use a fixed table.")
# What each resource's name adds to the table's, so two embeddings never share an index.
_INSTANCES = itertools.count()


def home_device(layout: ShardLayout) -> str:
    """Where a table's index and pool live: with its first block (on a parameter-server
    cluster, that block's PS task, which every worker's steps reach), else the CPU."""
    return layout.devices[0] or "/CPU:0"


class DynamicIndex(tf.saved_model.experimental.TrackableResource):
    """A table's key index, a resource that checkpoints save and restore whole: its rows' keys,
    counts and last steps, its candidates and its statistics. A checkpoint of another capacity
    fails to restore, naming the table, and changes nothing; one of another block layout
    restores while the table is built (`moving_rows`, `dynamic_relayout`), else fails so."""

    def __init__(self, table_name: str, layout: ShardLayout,
                 options: dynamic_vocabulary.DynamicVocabulary, device: str):
        self._table_name = table_name
        self._layout = layout
        self._options = options
        self._shared_name = f"tf_embedding_dynamic_index_{next(_INSTANCES)}_{table_name}"
        # How a restore moves the table's rows, while it may (`moving_rows`).
        self._move_rows: Callable[[tf.Tensor, tf.Tensor], list[Any]] | None = None
        super().__init__(device=device)
        with tf.init_scope():  # made now, so every traced function captures this one resource
            self.resource_handle  # pylint: disable=pointless-statement

    def _create_resource(self) -> tf.Tensor:
        options = self._options
        capacity = self._layout.offsets[-1]
        return dynamic_index_ops.dynamic_index(
            self._table_name, self._layout.rows, self._layout.strided, options.admit_after,
            options.evict_after_steps or 0, options.evict_every_steps, options.refuse_when_full,
            options.candidates(capacity), options.pool_size(capacity), self._shared_name)

    def _destroy_resource(self) -> None:
        gen_resource_variable_ops.destroy_resource_op(self.resource_handle,
                                                      ignore_lookup_error=True)

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        return dynamic_index_ops.dynamic_index_export(self.resource_handle)._asdict()

    @contextlib.contextmanager
    def moving_rows(self, move: Callable[[tf.Tensor, tf.Tensor], list[Any]]) -> Iterator[None]:
        """Within: a restored index of another block layout is placed for this one, and
        `move(saved_rows, new_rows)` (giving its ops) moves the table's rows (parameters and
        slots, holding the checkpoint's rows) with their keys."""
        self._move_rows = move
        try:
            yield
        finally:
            self._move_rows = None

    def _restore_from_tensors(self, restored_tensors: Mapping[str, tf.Tensor]) -> Any:
        state = dynamic_index_ops.DynamicIndexState(**restored_tensors)
        if self._move_rows is None:
            return dynamic_index_ops.dynamic_index_import(self.resource_handle, state,
                                                          self._table_name)
        saved_rows, new_rows = dynamic_index_ops.dynamic_index_import_placed(
            self.resource_handle, state, self._table_name)
        return self._move_rows(saved_rows, new_rows)


class DynamicTable(autotrackable.AutoTrackable):
    """One dynamic table's index and initializer pool (both in its checkpoint), and the
    initial rows of its optimizer's slots. A SavedModel holds instead its keys as stock ops
    serve them (`serving_keys`), so it loads where the op library is not installed."""

    def __init__(self, config: Any, layout: ShardLayout, workers: WorkerGroup | None = None):
        """`workers`: the MultiWorkerMirroredStrategy group whose every worker keeps a copy of
        the index (None: one process or a parameter-server cluster, one index)."""
        options = config.dynamic
        self.name = config.name
        # Made now: a SavedModel's trace may come in a function that makes no variables.
        self._serving_keys = self._no_dependency(ServingKeyIndex(config))
        self._capacity = layout.offsets[-1]
        self._workers = workers
        self._home = home_device(layout) if workers is None else workers.device
        self.index = DynamicIndex(config.name, layout, options, self._home)
        pool_rows = options.pool_size(self._capacity)
        # New rows start as rows of this value: a key's row depends on the key alone, not on
        # the order keys arrive in or the table's blocks. With the index; a ResourceVariable,
        # which a strategy's variable creator neither mirrors nor places.
        with tf.device(self._home):
            self.pool = resource_variable_ops.ResourceVariable(
                initial_value=lambda: _pool_value(config, pool_rows, workers),
                trainable=False, name=f"{config.name}/dynamic_pool")
        optimizer = config.optimizer
        self._slot_rows = self._no_dependency({} if optimizer is None else {
            name: tf.constant(initializer((1, config.dim), dtype=tf.float32))
            for name, initializer in zip(optimizer.slot_names(), optimizer.slot_initializers())})

    def serving_keys(self) -> KeyIndex:
        """What stock lookups read the keys' rows from: while a SavedModel is being saved, the
        keys now in a stock hash table (`snapshot_keys`); elsewhere the index itself, read as
        an evaluation reads it (current at every run, counting nothing)."""
        if save_context.in_save_context():
            return self.snapshot_keys()
        return _EvaluationKeys(self)

    def snapshot_keys(self) -> ServingKeyIndex:
        """The index's keys now, in a stock hash table (one per table, refilled on each
        call), which a SavedModel holds."""
        with tf.init_scope():
            self._serving_keys.load(
                dynamic_index_ops.dynamic_index_export(self.index.resource_handle).row_records)
        return self._serving_keys

    def _trackable_children(self, save_type=trackable_base.SaveType.CHECKPOINT, **kwargs):
        if save_type == trackable_base.SaveType.SAVEDMODEL:
            return {"serving_keys": self.snapshot_keys()}
        # In a checkpoint too, so that what collects a model's lookup tables by its checkpoint
        # graph (Keras' model.export) finds them: empty until an export fills them, then the
        # keys as last exported (the index is what a restore continues from).
        return {**super()._trackable_children(save_type, **kwargs),
                "serving_keys": self._serving_keys}

    def remap(self, table: Any, batch: ops.CsrBatch, training: Any) -> ops.CsrBatch:
        """`batch` (table `table`'s keys, a `TableState`) with each lookup's key replaced by
        its row and the lookups of keys without one dropped; a training batch counts, admits
        and evicts first, and resets the rows it gave to new keys. In the replica context of
        several replicas, a batch that may be a training one is remapped with the other
        replicas' in one merge_call, so the step's counts are the global batch's."""
        context = tf.distribute.get_replica_context()
        training = tf.convert_to_tensor(training, tf.bool)
        if self._workers is not None and _may_train(training):
            return self._remap_workers(table, batch, training)
        if (tf.distribute.has_strategy() and context is not None
                and context.num_replicas_in_sync > 1 and _may_train(training)):
            return context.merge_call(functools.partial(self._remap_replicas, table),
                                      args=(batch, training))
        return self._remap_together(table, [batch], training)[0]

    def _remap_replicas(self, table: Any, strategy: tf.distribute.Strategy,
                        batch: ops.CsrBatch, training: tf.Tensor) -> ops.CsrBatch:
        """The merge_call of `remap`: every replica's batch remapped together (per replica,
        its own)."""
        fields = [strategy.experimental_local_results(field) for field in batch]
        batches = [ops.CsrBatch(*replica_fields) for replica_fields in zip(*fields)]
        training = strategy.experimental_local_results(training)[0]
        return distribute_utils.regroup(tuple(self._remap_together(table, batches, training)))

    def _remap_workers(self, table: Any, batch: ops.CsrBatch,
                       training: tf.Tensor) -> ops.CsrBatch:
        """`remap` on a MultiWorkerMirroredStrategy worker: every worker's keys, gathered in
        rank order, are one batch that every worker's copy of the index reads alike (so the
        copies stay equal, and equal one process's on the global batch); each worker resets
        the new rows of its own block and keeps its own keys' rows. A collective."""
        workers = self._workers
        exchange = workers.exchange_keys()
        with tf.device(workers.device):
            count = tf.size(batch.ids, out_type=tf.int64)
            counts = workers.all_gather(tf.reshape(count, [1]), exchange[0])
            longest = tf.reduce_max(counts)
            gathered = tf.reshape(
                workers.all_gather(tf.pad(batch.ids, [[0, longest - count]]), exchange[1]),
                [workers.size, longest])
            keys = tf.boolean_mask(gathered,
                                   tf.range(longest)[None, :] < counts[:, None])
            lookup = dynamic_index_ops.dynamic_lookup(self.index.resource_handle, keys,
                                                      training, self.name)
            with tf.control_dependencies(self._reset_own_block(table, lookup)):
                start = tf.reduce_sum(counts[:workers.rank])
                rows = tf.identity(lookup.rows[start:start + count])
        return _kept_lookups(batch, rows, self.name)

    def _reset_own_block(self, table: Any, lookup: dynamic_index_ops.DynamicLookup
                         ) -> list[Any]:
        """The ops that reset the rows given to keys in this lookup in this worker's block of
        the table (`multi_worker/block_variable.py`), if it owns one."""
        parameters = table.variables["parameters"]
        if not parameters.owns_block:
            return []
        blocks, local_rows = table.layout.block_and_local_ids(lookup.admitted_rows)
        own = tf.equal(blocks, parameters.block_index)
        return self._reset_block(
            parameters.block, {slot: table.variables[slot].block for slot in self._slot_rows},
            tf.boolean_mask(local_rows, own), self.pool,
            tf.boolean_mask(lookup.admitted_pool_rows, own))

    def _remap_together(self, table: Any, batches: Sequence[ops.CsrBatch],
                        training: tf.Tensor) -> list[ops.CsrBatch]:
        """`batches` remapped by one read of the index: their lookups, in order, are one
        batch's (the index's rules depend on a batch's multiset of keys only)."""
        keys = batches[0].ids if len(batches) == 1 else tf.concat(
            [batch.ids for batch in batches], axis=0)
        lookup = dynamic_index_ops.dynamic_lookup(self.index.resource_handle, keys, training,
                                                  self.name)
        # A forward-only lookup admits no key: no row to reset (and on MultiWorkerMirroredStrategy
        # workers, whose training lookups take `_remap_workers`, no other worker's block).
        resets = self._reset(table, lookup) if _may_train(training) else []
        with tf.control_dependencies(resets):
            rows = tf.identity(lookup.rows)
        parts = [rows] if len(batches) == 1 else tf.split(
            rows, [tf.size(batch.ids) for batch in batches], num=len(batches))
        return [_kept_lookups(batch, batch_rows, self.name)
                for batch, batch_rows in zip(batches, parts)]

    def _reset(self, table: Any, lookup: dynamic_index_ops.DynamicLookup) -> list[Any]:
        """The ops that reset the rows given to keys in this lookup, block by block."""
        layout = table.layout
        blocks, local_rows = layout.block_and_local_ids(lookup.admitted_rows)
        count = len(layout.rows)
        block_rows = tf.dynamic_partition(local_rows, blocks, count)
        block_pool_rows = tf.dynamic_partition(lookup.admitted_pool_rows, blocks, count)
        resets = []
        for block, device in enumerate(layout.devices):
            rows = block_rows[block]
            source, source_rows = self.pool, block_pool_rows[block]
            if device is not None and device != self._home:
                # Another task's block: only the admitted keys' pool rows travel.
                with tf.device(self._home):
                    source = self.pool.sparse_read(source_rows)
                source_rows = tf.range(tf.size(rows, out_type=tf.int64))
            with tf.device(device):
                resets.extend(self._reset_block(
                    list(table.variables["parameters"])[block],
                    {slot: list(table.variables[slot])[block] for slot in self._slot_rows},
                    rows, source, source_rows))
        return resets

    def _reset_block(self, parameters: tf.Variable, slots: Mapping[str, tf.Variable],
                     rows: tf.Tensor, source: Any, source_rows: tf.Tensor) -> list[Any]:
        """The ops that reset `rows` of one block: its parameters to rows `source_rows` of
        `source` (the pool, or the rows of it read), each slot to its initial row."""
        resets = [ops.reset_rows(parameters, rows, tf.convert_to_tensor(source), source_rows,
                                 self.name)]
        resets.extend(ops.reset_rows(slots[slot], rows, initial_row, tf.zeros_like(rows),
                                     self.name)
                      for slot, initial_row in self._slot_rows.items())
        return resets

    def packed_index(self) -> np.ndarray:
        """The index's state as one int64 [2 + capacity + candidates, 3] array (Keras' files
        hold arrays): the statistics (2 rows), the row records, the candidate records."""
        state = dynamic_index_ops.dynamic_index_export(self.index.resource_handle)
        return np.concatenate([state.stats.numpy().reshape(2, 3), state.row_records.numpy(),
                               state.candidate_records.numpy()])

    def unpack_index(self, packed: np.ndarray) -> None:
        """Restores the index from `packed_index()`'s array; an array of another capacity or
        block layout fails naming the table, and changes nothing."""
        capacity = self._capacity
        packed = np.asarray(packed, np.int64)
        if packed.ndim != 2 or packed.shape[1] != 3 or packed.shape[0] < 2 + capacity:
            raise ValueError(f"Table {self.name}: a stored dynamic index of shape "
                             f"{packed.shape} does not fit its capacity of {capacity} rows.")
        dynamic_index_ops.dynamic_index_import(
            self.index.resource_handle, dynamic_index_ops.DynamicIndexState(
                packed[2:2 + capacity], packed[2 + capacity:], packed[:2].reshape(6)),
            self.name)

    def statistics(self) -> dict[str, int]:
        """The index's counts now: step, occupied, candidates, admitted, evicted, refused."""
        stats = dynamic_index_ops.dynamic_index_stats(self.index.resource_handle)
        return dict(zip(STATISTICS, (int(value) for value in stats.numpy())))


def _pool_value(config: Any, pool_rows: int, workers: WorkerGroup | None) -> tf.Tensor:
    """A dynamic table's initializer pool: a draw of its initializer, on a
    MultiWorkerMirroredStrategy cluster rank 0's (gathered once, at build), so that every
    worker's new rows start alike whatever the initializer's seed on each worker."""
    value = config.initializer((pool_rows, config.dim), dtype=tf.float32)
    if workers is None or workers.size == 1:
        return value
    return workers.all_gather(value, workers.exchange_keys()[0])[:pool_rows]


class _EvaluationKeys:
    """A `KeyIndex` reading a dynamic table's index as an evaluation does."""

    def __init__(self, table: DynamicTable):
        self._table = table

    def rows(self, keys: tf.Tensor, feature_path: str) -> tf.Tensor:
        del feature_path  # the index names the table in its errors
        return dynamic_index_ops.dynamic_lookup(self._table.index.resource_handle,
                                                tf.cast(keys, tf.int64), False,
                                                self._table.name).rows


def _kept_lookups(batch: ops.CsrBatch, rows: tf.Tensor, table_name: str) -> ops.CsrBatch:
    """`batch` with each lookup's key replaced by its row (`rows`, -1: none) and the lookups
    of keys without a row dropped."""
    row_splits, kept_rows, gains = dynamic_index_ops.drop_missing_lookups(
        batch.row_splits, rows, batch.gains, table_name)
    return batch._replace(row_splits=row_splits, ids=kept_rows, gains=gains)


STATISTICS = ("step", "occupied", "candidates", "admitted", "evicted", "refused")


def create_dynamic_tables(embedding: Any, table_configs: Any, layout_of: Any,
                          variables: Mapping[str, Mapping[str, Any]], *,
                          parameter_servers: bool, workers: WorkerGroup | None
                          ) -> dict[str, DynamicTable]:
    """Each dynamic table's `DynamicTable` (by table name), tracked by `embedding` as
    `<table>.dynamic` (a fixed table adds nothing to the checkpoint). `layout_of(config)`: the
    table's `ShardLayout`; `variables`: each table's variables by slot, made (and restored, if
    the restore was deferred) first; `workers`: the MultiWorkerMirroredStrategy group, if any.
    A deferred restore of an index of another block layout moves the rows with their keys.

    Raises:
      ValueError: a dynamic table where this version cannot keep its rows' keys and gradients
        together (several parameter-server workers), naming it.
    """
    dynamic = {}
    ps_workers = parameter_server.worker_count() if parameter_servers else 1
    for config in table_configs:
        if dynamic_vocabulary.dynamic_of(config) is None:
            continue
        if ps_workers > 1:
            raise dynamic_vocabulary.dynamic_table_error(
                config.name,
                f"this parameter-server cluster has {ps_workers} workers, whose steps run "
                "asynchronously: a row one worker's step evicts and gives to a new key could "
                "still receive another worker's pending gradient. This version trains a "
                "dynamic table with one worker (its index on the PS task of the table's first "
                "block). Use a fixed table here.")
        layout = layout_of(config)
        table = DynamicTable(config, layout, workers)
        move = (functools.partial(dynamic_relayout.move_rows, variables[config.name], layout,
                                  table_name=config.name) if workers is None
                else functools.partial(dynamic_relayout.move_worker_rows,
                                       variables[config.name], workers, table_name=config.name))
        with table.index.moving_rows(move):  # tracking it restores it, if the restore was deferred
            embedding._track_trackable(  # pylint: disable=protected-access
                table, name=dynamic_vocabulary.tracking_name(config.name))
        dynamic[config.name] = table
    return dynamic


def check_replica_enqueue(dynamic_tables: Mapping[str, DynamicTable], training: tf.Tensor
                          ) -> None:
    """For an enqueue in cross-replica context that feeds one replica of several (`device=`):
    raises ValueError naming a dynamic table unless the batch is forward-only, since the index
    counts each training step's global batch once."""
    if _may_train(training):
        raise dynamic_vocabulary.dynamic_table_error(
            next(iter(dynamic_tables)),
            "its index counts each training step's global batch once, so a training enqueue "
            "must feed every replica in one call: pass per-replica features without device=, "
            "or call enqueue inside strategy.run (or pass training=False).")


def _may_train(training: tf.Tensor) -> bool:
    """Whether a batch of this `training` (a bool tensor) may be a training one."""
    static = tf.get_static_value(training)
    return static is None or bool(static)
