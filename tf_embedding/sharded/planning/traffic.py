"""The bytes a synchronous multi-worker step moves, per sharding kind: one definition of the
formulas that docs/scale.md states, the planner weighs (`planner`) and tools/traffic_table.py
tabulates.

Payload only (what the collectives carry; the all-to-alls' padding to a step's capacity and
TCP/IP headers come on top), for one table of `TableLoad` on N workers, uniform ids: a worker
has R output rows of the table, L lookups (h per row) and U = V (1 - e^(-L/V)) distinct ids of
a vocabulary V; d is the dimension. Ids travel as int64 (8 bytes), rows and gradients as float32
(4d bytes), a lookup as its block-local id, output row and gain (16 bytes).

* **Row-wise** (one block per worker): to each other owner its share of the unique ids, back
  their rows, its lookups, and the activation-gradient rows of the samples with a lookup in its
  block (a row with h ids reaches a given other block with probability 1 - (1 - 1/N)^h):
  (N-1)/N (8U + 4dU + 16L) + (N-1)(1 - (1 - 1/N)^h) 4dR sent, as much received. Bounded as N
  grows: the last term tends to 4dL.
* **Table-wise** (the whole table on one worker, which pools each sample): every other worker
  sends the owner its lookups twice (forward and update) and the gradient rows of its samples,
  32L + 4dR, and receives its samples' pooled rows, 4dR; the owner receives N-1 times the one
  and sends N-1 times the other. The owner's bytes grow with N: it pays for tables of many ids
  per sample (rows back would carry a row per distinct id) on clusters of few workers.
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class TableLoad:
    """One table's lookups per worker and step."""

    vocabulary_size: int
    dim: int
    rows: float  # output rows per worker (samples x features of the table)
    ids_per_row: float  # lookups per output row (h)

    @property
    def lookups(self) -> float:
        return self.rows * self.ids_per_row

    @property
    def unique_ids(self) -> float:
        """Expected distinct ids among a worker's lookups of uniform ids."""
        return self.vocabulary_size * -math.expm1(-self.lookups / self.vocabulary_size)


@dataclasses.dataclass(frozen=True)
class WorkerBytes:
    """Bytes per step: what each worker sends and receives for one table, and the busiest
    worker's sent + received."""

    sent: float
    received: float
    busiest: float


def row_wise(load: TableLoad, workers: int) -> WorkerBytes:
    """A table with one block per worker (`WorkerRowWise`)."""
    if workers <= 1:
        return WorkerBytes(0.0, 0.0, 0.0)
    others = (workers - 1) / workers
    reach = -math.expm1(load.ids_per_row * math.log1p(-1 / workers))  # 1 - (1 - 1/N)^h
    sent = (others * (8 * load.unique_ids + 4 * load.dim * load.unique_ids + 16 * load.lookups)
            + (workers - 1) * reach * 4 * load.dim * load.rows)
    return WorkerBytes(sent, sent, 2 * sent)


def table_wise(load: TableLoad, workers: int) -> WorkerBytes:
    """A table wholly on one worker (`WorkerTableWise`): a non-owner's bytes, and the owner's
    as the busiest."""
    if workers <= 1:
        return WorkerBytes(0.0, 0.0, 0.0)
    to_owner = 32 * load.lookups + 4 * load.dim * load.rows
    back = 4 * load.dim * load.rows
    return WorkerBytes(to_owner, back, (workers - 1) * (to_owner + back))
