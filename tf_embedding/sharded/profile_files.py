"""Lookup-statistics files (`profile_data_directory`): what they hold, their names, merging.

One JSON file per table and configuration. Its name hashes the table's parameters (name,
vocabulary size, dim, combiner, its features' count and sequence lengths) and the global ones
(partition strategy, block devices, replicas), as TPUEstimator's profile files do, so models of
the same configuration share a file: each adds its samples to the totals already there.

Plain Python and numpy: `tf-embedding stats` reads the files without TensorFlow's ops.
"""

import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import re
from typing import Any

import numpy as np

# Every 33rd training batch of each replica, from the first, is profiled: about 3% of the
# inputs, as on a TPU, and a short run still leaves a sample.
SAMPLE_EVERY = 33
_FORMAT = "tf_embedding.lookup_profile.v1"


@dataclasses.dataclass
class TableProfile:
    """Totals over the sampled batches of one table in one configuration."""

    parameters: dict[str, Any]
    batches: int = 0
    examples: int = 0
    lookups: int = 0
    unique: int = 0  # distinct ids per batch, summed over batches
    max_shard_load: float = 0.0  # busiest block's lookups over the mean block's, summed
    shard_lookups: list[int] = dataclasses.field(default_factory=list)  # per block, summed

    @property
    def table(self) -> str:
        return self.parameters["table"]

    @property
    def file_name(self) -> str:
        key = json.dumps(self.parameters, sort_keys=True).encode()
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", self.table)
        return f"{safe}-{hashlib.sha256(key).hexdigest()[:16]}.json"

    def add_batch(self, examples: int, ids: np.ndarray, blocks: np.ndarray,
                  num_blocks: int) -> None:
        """Adds one batch: its example count, its lookups' ids and each lookup's block."""
        per_block = np.bincount(blocks, minlength=num_blocks)
        if not self.shard_lookups:
            self.shard_lookups = [0] * num_blocks
        self.batches += 1
        self.examples += int(examples)
        self.lookups += len(ids)
        self.unique += len(np.unique(ids))
        if len(ids):
            self.max_shard_load += float(per_block.max() / (len(ids) / num_blocks))
        self.shard_lookups = [int(total + count)
                              for total, count in zip(self.shard_lookups, per_block)]

    def merged(self, other: "TableProfile") -> "TableProfile":
        """The totals of both (same parameters)."""
        if other.parameters != self.parameters:
            raise ValueError(f"Lookup profiles of table {self.table} with different "
                             f"parameters cannot be merged: {self.parameters} vs "
                             f"{other.parameters}.")
        return TableProfile(
            self.parameters, self.batches + other.batches, self.examples + other.examples,
            self.lookups + other.lookups, self.unique + other.unique,
            self.max_shard_load + other.max_shard_load,
            [a + b for a, b in itertools.zip_longest(self.shard_lookups, other.shard_lookups,
                                                     fillvalue=0)])

    def to_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str) -> "TableProfile":
        if data.get("format") != _FORMAT:
            raise ValueError(f"{source} is not a tf_embedding lookup profile "
                             f"(format {data.get('format')!r}, expected {_FORMAT!r}).")
        return cls(**{field.name: data[field.name] for field in dataclasses.fields(cls)})


def add_to_file(directory: str, profile: TableProfile) -> TableProfile:
    """Adds `profile`'s totals to its file in `directory` (created if needed); returns the
    file's new totals. A lock on the directory serialises models (and replicas) writing to it
    at once."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, profile.file_name)
    lock = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        total = profile
        if os.path.exists(path):
            total = read_file(path).merged(profile)
        # Written aside and renamed, so a reader never sees half a file.
        with open(path + ".tmp", "w") as file:
            json.dump(total.to_json(), file, indent=1)
        os.replace(path + ".tmp", path)
    finally:
        os.close(lock)  # releases the lock
    return total


def read_file(path: str) -> TableProfile:
    with open(path) as file:
        return TableProfile.from_json(json.load(file), path)


def read_directory(directory: str) -> list[TableProfile]:
    """Every profile in `directory`, by table name then file name.

    Raises:
      ValueError: no profile files there.
    """
    names = sorted(name for name in (os.listdir(directory) if os.path.isdir(directory) else [])
                   if name.endswith(".json"))
    if not names:
        raise ValueError(f"No lookup profiles (*.json) in {directory!r}: train with "
                         "profile_data_directory set to write them.")
    profiles = [read_file(os.path.join(directory, name)) for name in names]
    return sorted(profiles, key=lambda profile: (profile.table, profile.file_name))
