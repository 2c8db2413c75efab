"""A plain-Python replay of a dynamic table's key index (cc/core/dynamic_index.h), written from
its rules with dicts and sorting, as the independent reference of the index op's tests; and the
Zipf-like key streams the dynamic tables' tests train on (`zipf_key_samples`)."""

import dataclasses

import numpy as np

MASK64 = (1 << 64) - 1
MAX_COUNT = (1 << 32) - 1


def mix_key(key: int) -> int:
    """splitmix64's finalizer."""
    key &= MASK64
    key ^= key >> 30
    key = (key * 0xBF58476D1CE4E5B9) & MASK64
    key ^= key >> 27
    key = (key * 0x94D049BB133111EB) & MASK64
    key ^= key >> 31
    return key


def zipf_key_samples(rng: np.random.Generator, keys: np.ndarray, rows: int) -> list:
    """`rows` samples of 0 to 3 keys each, drawn Zipf-like (exponent 1.3) from `keys` (rank i:
    keys[i], the last one taking the tail), so that blocks fill, keys return and keys age out."""
    return [[int(keys[min(int(rng.zipf(1.3)) - 1, len(keys) - 1)])
             for _ in range(rng.integers(0, 4))] for _ in range(rows)]


@dataclasses.dataclass
class Options:
    block_rows: list
    strided: bool = False
    admit_after: int = 1
    evict_after_steps: int = 0
    evict_every_steps: int = 1
    refuse_when_full: bool = False
    candidate_capacity: int = 0
    pool_rows: int = 1


class IndexModel:
    def __init__(self, options: Options):
        self.o = options
        self.blocks = len(options.block_rows)
        self.admitted = [{} for _ in range(self.blocks)]  # key -> [slot, count, last_seen]
        self.candidates = [{} for _ in range(self.blocks)]  # key -> [count, last_seen]
        self.candidate_room = -(-options.candidate_capacity // self.blocks)
        self.step = self.admitted_total = self.evicted = self.refused = 0

    def block_of(self, key: int) -> int:
        return (mix_key(key) >> 32) % self.blocks

    def table_row(self, block: int, slot: int) -> int:
        if self.o.strided:
            return slot * self.blocks + block
        return sum(self.o.block_rows[:block]) + slot

    def lookup(self, keys, training: bool):
        admitted_rows, pool_rows = [], []
        if training:
            self.step += 1
            t = self.step
            if self.o.evict_after_steps and t % self.o.evict_every_steps == 0:
                for b in range(self.blocks):
                    for table, is_admitted in ((self.admitted[b], True),
                                               (self.candidates[b], False)):
                        old = [k for k, v in table.items() if t - v[-1] >= self.o.evict_after_steps]
                        for k in old:
                            del table[k]
                        if is_admitted:
                            self.evicted += len(old)
            unique, counts = np.unique(np.asarray(keys, np.int64), return_counts=True)
            for b in range(self.blocks):
                mine = [(int(k), int(c)) for k, c in zip(unique, counts) if self.block_of(int(k)) == b]
                admitted, candidates = self.admitted[b], self.candidates[b]
                seen = {k for k, _ in mine if k in admitted}
                for k, c in mine:
                    if k in admitted:
                        admitted[k][1] = min(MAX_COUNT, admitted[k][1] + c)
                        admitted[k][2] = t
                for k, c in mine:
                    if k in seen:
                        continue
                    total = min(MAX_COUNT, candidates.get(k, [0, 0])[0] + c)
                    if total >= self.o.admit_after:
                        free = set(range(self.o.block_rows[b])) - {v[0] for v in admitted.values()}
                        if not free and not self.o.refuse_when_full:
                            old = [(v[2], kk) for kk, v in admitted.items() if v[2] < t - 1]
                            if old:
                                victim = min(old)[1]
                                free = {admitted.pop(victim)[0]}
                                self.evicted += 1
                        if free:
                            slot = min(free)
                            candidates.pop(k, None)
                            admitted[k] = [slot, total, t]
                            self.admitted_total += 1
                            admitted_rows.append(self.table_row(b, slot))
                            pool_rows.append(mix_key(k) % self.o.pool_rows)
                            continue
                        self.refused += 1
                    if k in candidates:
                        candidates[k] = [total, t]
                    elif self.candidate_room > 0:
                        if len(candidates) >= self.candidate_room:
                            del candidates[min((v[1], kk) for kk, v in candidates.items())[1]]
                        candidates[k] = [total, t]
        rows = []
        for k in keys:
            entry = self.admitted[self.block_of(int(k))].get(int(k))
            rows.append(-1 if entry is None else self.table_row(self.block_of(int(k)), entry[0]))
        return rows, admitted_rows, pool_rows

    def state(self):
        """(row records [C, 3], candidate records [n, 3], stats [6]) as the export op writes."""
        rows = np.zeros([sum(self.o.block_rows), 3], np.int64)
        rows[:, 0] = -1
        candidates = []
        for b in range(self.blocks):
            for k, (slot, count, last) in self.admitted[b].items():
                rows[self.table_row(b, slot)] = (k, count, last)
            candidates += sorted(((k, c, last) for k, (c, last) in self.candidates[b].items()),
                                 key=lambda r: (r[2], r[0]))
        stats = [self.step, sum(map(len, self.admitted)), sum(map(len, self.candidates)),
                 self.admitted_total, self.evicted, self.refused]
        return rows, np.array(candidates, np.int64).reshape([-1, 3]), np.array(stats, np.int64)
