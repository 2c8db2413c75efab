"""Typed wrappers of the op library's dynamic-table ops: the key index of a table whose rows go
to keys as they arrive (cc/core/dynamic_index.h), made, read, saved and restored."""

from typing import Any, NamedTuple, Sequence

import tensorflow as tf

from tf_embedding import _loader


class DynamicLookup(NamedTuple):
    """A dynamic table's index read for one batch (`dynamic_lookup`)."""

    rows: tf.Tensor  # int64 [n]: each key's table row, -1 for a key with none
    admitted_rows: tf.Tensor  # int64 [a]: rows of the keys admitted in this step
    admitted_pool_rows: tf.Tensor  # int64 [a]: the pool rows their values start as


class DynamicIndexState(NamedTuple):
    """A dynamic table's index, whole (`dynamic_index_export`): [n, 3] int64 records (key,
    count, last step) of each table row (key -1: free) and of the candidates, and the stats
    [step, occupied, candidates, admitted, evicted, refused]."""

    row_records: tf.Tensor
    candidate_records: tf.Tensor
    stats: tf.Tensor


def dynamic_index(table_name: str, block_rows: Sequence[int], strided: bool, admit_after: int,
                  evict_after_steps: int, evict_every_steps: int, refuse_when_full: bool,
                  candidate_capacity: int, pool_rows: int, shared_name: str) -> tf.Tensor:
    """The resource handle of a dynamic table's key index (`TfeDynamicIndex`), made empty on
    its first run; `shared_name` must be unique in the process."""
    return _loader.load_ops().tfe_dynamic_index(
        block_rows=list(block_rows), strided=strided, admit_after=admit_after,
        evict_after_steps=evict_after_steps, evict_every_steps=evict_every_steps,
        refuse_when_full=refuse_when_full, candidate_capacity=candidate_capacity,
        pool_rows=pool_rows, table_name=table_name, shared_name=shared_name)


def dynamic_lookup(index: tf.Tensor, keys: tf.Tensor, training: Any,
                   table_name: str) -> DynamicLookup:
    """Each key's table row (-1: none); with `training`, the step's counting, admission and
    eviction first (`TfeDynamicLookup`)."""
    return DynamicLookup(*_loader.load_ops().tfe_dynamic_lookup(
        index=index, keys=keys, training=training, table_name=table_name))


def drop_missing_lookups(row_splits: tf.Tensor, rows: tf.Tensor, gains: tf.Tensor,
                         table_name: str) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(row_splits, rows, gains) of a CSR batch whose ids are `rows` (-1: a key without a row)
    with those lookups dropped (`TfeDropMissingLookups`)."""
    return tuple(_loader.load_ops().tfe_drop_missing_lookups(
        row_splits=row_splits, rows=rows, gains=gains, table_name=table_name))


def dynamic_index_export(index: tf.Tensor) -> DynamicIndexState:
    """The index's state (`TfeDynamicIndexExport`)."""
    return DynamicIndexState(*_loader.load_ops().tfe_dynamic_index_export(index=index))


def dynamic_index_stats(index: tf.Tensor) -> tf.Tensor:
    """The index's stats alone, as `dynamic_index_export` gives them (`TfeDynamicIndexStats`:
    no copy of its records)."""
    return _loader.load_ops().tfe_dynamic_index_stats(index=index)


def dynamic_index_import(index: tf.Tensor, state: DynamicIndexState,
                         table_name: str) -> tf.Operation:
    """Replaces the index's state with `state`, exported from an index of the same layout
    (`TfeDynamicIndexImport`); an invalid state fails and changes nothing."""
    return _loader.load_ops().tfe_dynamic_index_import(
        index=index, row_records=state.row_records, candidate_records=state.candidate_records,
        stats=state.stats, table_name=table_name)


def dynamic_index_import_placed(index: tf.Tensor, state: DynamicIndexState,
                                table_name: str) -> tuple[tf.Tensor, tf.Tensor]:
    """`dynamic_index_import` of a state exported by an index of the same capacity and any
    block layout (`TfeDynamicIndexImportPlaced`): its keys placed for this index's layout
    first. Returns every admitted key's (saved rows, new rows), for the caller to move the
    table's rows (none when the layouts agree); a block too small for its keys fails naming
    the table, the block and both counts, and changes nothing."""
    return tuple(_loader.load_ops().tfe_dynamic_index_import_placed(
        index=index, row_records=state.row_records, candidate_records=state.candidate_records,
        stats=state.stats, table_name=table_name))
