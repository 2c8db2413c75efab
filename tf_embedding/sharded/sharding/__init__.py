"""How each table is split and where its pieces travel: one module per sharding kind, each with
its roles (the features' distribution, each block's lookup, the outputs' way back, the
gradients' way to the owners, the update), run over a transport (`sharded/transports/`).

* `kind`: what every sharding is (`Sharding`: convert a table's features into its batch,
  combine rows into activations, whether XLA can compile it) and what the kinds run over block
  calls share (`BlockSharding`: their roles as `DeviceCall`s, each block's update).
* `row_wise`: `RowWise`, rows split into blocks; the unique ids go to their blocks, the rows
  come back and are combined where the step runs; the update sends each block its ids' summed
  gradient rows.
* `row_wise_pooled`: `RowWisePooled`, rows split into blocks; each block combines its own
  lookups into partial activations, summed in block order; the update sends each block its
  lookups with the activation gradients (`traffic={table: "partial"}`).
* `table_wise`: `TableWise`, the whole table in one block on one device, which combines the
  lookups (and is read directly by the forward-only one-op lookup, `lookup_features`).
* `worker_row_wise`: `WorkerRowWise`, one block per worker of a MultiWorkerMirroredStrategy
  cluster: rows back to the requester, lookups and activation gradients to the owners, so
  every row keeps one process's bits.
* `worker_table_wise`: `WorkerTableWise`, a whole table on one worker, which pools each
  worker's samples and sends one row per sample back.
* `choice`: which kind each table gets when the engine is built.
"""
