"""(Not in TF.) `DynamicVocabulary`: a table whose rows are given to ids as they arrive.

```python
table = tf_embedding.TableConfig(
    vocabulary_size=1_000_000,  # the capacity: rows the table holds
    dim=64, name="user",
    dynamic=tf_embedding.DynamicVocabulary(admit_after=2, evict_after_steps=10_000))
```

Ids are any int64 >= 0. A key is admitted in the training step in which its count of training
lookups (the step's whole batch, every feature of the table) reaches `admit_after`; its row
starts as a row of the table's initializer chosen by a hash of the key (one of `pool_rows`
rows), so it depends on the key alone, and trains in that step. A key not admitted (or evicted,
or never seen) reads a zero row and gets no gradient; it still counts in a mean or sqrtn
combiner's denominator, as a zero row of a fixed table would. Keys not looked up for
`evict_after_steps` training steps are evicted (checked every `evict_every_steps` steps); when a
block of the table is full the least recently used key gives way (never one looked up in this
or the previous step, whose gradients may be pending: then the new key is refused), or, with
`refuse_when_full`, the new key is refused and counted. Optimizer slots start at their initial values with their
row. Evaluation lookups (`training=False`) count, admit and evict nothing. docs/dynamic_vocabulary.md
has the whole contract.
"""

import dataclasses
from typing import Any

import numpy as np

from tf_embedding import argument_checks as checks

OWNER = "DynamicVocabulary"
# The conversion's vocabulary size for a dynamic table (cc/core/csr_batch.h: ids only checked
# to be non-negative).
ANY_KEY = -1
# Rows of the initializer pool when `pool_rows` is not given (never more than the capacity).
DEFAULT_POOL_ROWS = 65_536
# The index's mixer of keys (cc/core/dynamic_index.h's MixKey, splitmix64's finalizer), as
# (shift, multiplier) steps: x ^= x >> shift, then x *= multiplier (none after the last).
KEY_MIXER = ((30, 0xbf58476d1ce4e5b9), (27, 0x94d049bb133111eb), (31, None))


def key_blocks(keys: np.ndarray, blocks: int) -> np.ndarray:
    """The block of each key of a dynamic table split into `blocks` (the index's rule:
    `MixKey(key) >> 32`, modulo the blocks)."""
    x = np.asarray(keys).astype(np.uint64)
    for shift, multiplier in KEY_MIXER:
        x ^= x >> np.uint64(shift)
        if multiplier is not None:
            x *= np.uint64(multiplier)
    return ((x >> np.uint64(32)) % np.uint64(blocks)).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class DynamicVocabulary:
    """A table's admission and eviction rules (`TableConfig(dynamic=...)`).

    Attributes:
      admit_after: training lookups a key needs before it gets a row (1: at its first).
      evict_after_steps: evict keys not looked up for this many training steps, at least 2
        (None: never by age; a full block still gives its least recently used row to a new
        key).
      evict_every_steps: how often (in training steps) the age check runs.
      refuse_when_full: when a block is full, refuse new keys (counted as `refused`) instead of
        evicting its least recently used one.
      candidate_capacity: keys counted before admission, over the whole table (None: the
        table's capacity); only used with `admit_after` > 1.
      pool_rows: rows of the initializer value new rows start from (None: the capacity, at
        most 65,536).
    """

    admit_after: int = 1
    evict_after_steps: int | None = None
    evict_every_steps: int = 1
    refuse_when_full: bool = False
    candidate_capacity: int | None = None
    pool_rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("admit_after", "evict_every_steps"):
            checks.check_integer(OWNER, name, getattr(self, name), low=1)
        # A key looked up in the previous step keeps its row: that step's gradients may still be
        # applied after the next step's lookup (a pipelined enqueue).
        checks.check_integer(OWNER, "evict_after_steps", self.evict_after_steps, low=2,
                             optional=True)
        for name in ("candidate_capacity", "pool_rows"):
            checks.check_integer(OWNER, name, getattr(self, name), low=1, optional=True)
        checks.check_flag(OWNER, "refuse_when_full", self.refuse_when_full)

    def candidates(self, capacity: int) -> int:
        """Keys counted before admission for a table of `capacity` rows (0: none needed)."""
        if self.admit_after == 1:
            return 0
        return capacity if self.candidate_capacity is None else self.candidate_capacity

    def pool_size(self, capacity: int) -> int:
        """Rows of the initializer pool of a table of `capacity` rows."""
        if self.pool_rows is not None:
            return self.pool_rows
        return min(capacity, DEFAULT_POOL_ROWS)


def tracking_name(table_name: str) -> str:
    """The name under which an embedding tracks a dynamic table's index in its checkpoints
    (training's and the serving embedding's alike)."""
    return f"{table_name}.dynamic"


def dynamic_of(table: Any) -> DynamicVocabulary | None:
    """A table config's `DynamicVocabulary`; None for a fixed table (stock TF's configs have no
    such attribute)."""
    return getattr(table, "dynamic", None)


def conversion_vocabulary_size(table: Any) -> int:
    """The vocabulary size a table's features are converted with: a fixed table's, or for a
    dynamic table, whose ids are keys (any int64 >= 0), ANY_KEY."""
    return table.vocabulary_size if dynamic_of(table) is None else ANY_KEY


def dynamic_table_error(table_name: str, problem: str) -> ValueError:
    """The error of a dynamic table where it cannot go, in one wording; `problem` says why."""
    return ValueError(f"Table {table_name} is dynamic (TableConfig(dynamic=...)): {problem}")
