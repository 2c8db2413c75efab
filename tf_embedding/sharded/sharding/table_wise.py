"""`TableWise`: a whole table in one block on one device, which combines its lookups there
(the pooled roles of `RowWisePooled` with one block: the partial activations are the
activations). XLA can compile its steps, and a forward-only batch of such tables may be
converted and looked up in one op (`lookup_features`).
"""

from typing import Any, Sequence

import tensorflow as tf

from tf_embedding import ops
from tf_embedding.feature_inputs.feature_input import FeatureInput
from tf_embedding.sharded.batch_types import TableBatch
from tf_embedding.sharded.sharding.row_wise_pooled import RowWisePooled
from tf_embedding.sharded.transports.device_calls import DeviceCall


class TableWise(RowWisePooled):
    """One block, which combines its lookups (or, for a quantized table, returns the rows of
    every lookup, quantized and combined where the step runs)."""

    def check_compilable(self) -> None:
        """One block on the step's device: XLA compiles it."""

    @property
    def looks_up_features_directly(self) -> bool:
        # A dynamic table's keys are not its rows: they pass through its index (`convert`).
        return self.table.config.quantization_config is None and self.table.dynamic is None

    def looked_up_table(self) -> ops.LookedUpTable:
        """The table as `lookup_features` reads it. REQUIRES: looks_up_features_directly."""
        config = self.table.config
        (block,) = list(self.table.variables["parameters"])
        return ops.LookedUpTable(block, config.name, config.vocabulary_size, config.combiner)

    def block_lookups(self, batch: TableBatch, transport: Any) -> list[DeviceCall]:
        if self.table.config.quantization_config is None:
            return super().block_lookups(batch, transport)
        return [self.gather_call(0, batch.unique_ids)]

    def combine_lookups(self, batch: TableBatch, block_results: list[tf.Tensor]) -> tf.Tensor:
        if self.table.config.quantization_config is None:
            return super().combine_lookups(batch, block_results)
        return self.combine_rows(batch, block_results[0])


def lookup_features(shardings: Sequence[TableWise],
                    table_inputs: Sequence[Sequence[FeatureInput]]
                    ) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """One replica's features of each table -> (its [R, dim] activations, each feature's row
    count): `convert` + the lookup's bits, for a batch that no update follows, in one op per
    device holding tables (one op for all, on one device), so that its threads share every
    table's rows. REQUIRES: every sharding looks_up_features_directly."""
    positions_by_device: dict[str | None, list[int]] = {}
    for position, sharding in enumerate(shardings):
        (device,) = sharding.table.layout.devices
        positions_by_device.setdefault(device, []).append(position)
    results: list[Any] = [None] * len(shardings)
    for device, positions in positions_by_device.items():
        with tf.device(device):
            looked_up = ops.features_lookup(
                [shardings[position].looked_up_table() for position in positions],
                [table_inputs[position] for position in positions])
        for position, result in zip(positions, looked_up):
            results[position] = result
    return results
