"""Which sharding kind each table gets when the engine is built, from where its blocks live and
how lookups meet them (`TPUEmbedding(table_devices=..., traffic=...)`)."""

from typing import Sequence

from tf_embedding.sharded.sharding.kind import Sharding
from tf_embedding.sharded.sharding.row_wise import RowWise
from tf_embedding.sharded.sharding.row_wise_pooled import RowWisePooled
from tf_embedding.sharded.sharding.table_wise import TableWise
from tf_embedding.sharded.sharding.worker_row_wise import WorkerRowWise
from tf_embedding.sharded.sharding.worker_table_wise import WorkerTableWise
from tf_embedding.sharded.table_state import TableState


def sharding_for(table: TableState, *, pooled: bool,
                 owners: Sequence[int] | None = None) -> Sharding:
    """The table's sharding: on the workers of a MultiWorkerMirroredStrategy cluster, its
    blocks' ranks `owners` (one: the whole table on one worker, pooled there); else one block is table-wise, and several blocks are row-wise, their
    lookups combined on the blocks (`pooled`: traffic "partial") or their rows brought back."""
    if owners is not None:
        if len(owners) == 1 and table.config.quantization_config is None:
            return WorkerTableWise(table, owners)
        # (A quantized table's rows are quantized before they are combined, where the step
        # runs: its rows come back.)
        return WorkerRowWise(table, owners)
    if len(table.layout.rows) == 1:
        return TableWise(table)
    if pooled:
        return RowWisePooled(table)
    return RowWise(table)
