"""The sharded engine behind `tf_embedding.TPUEmbedding`.

* `tpu_embedding`: the public class (enqueue / dequeue / apply_gradients, checkpoints).
* `engine_options`: the checks of its constructor's options (strategy, devices, traffic).
* `placement`: where each table's blocks live and how they split its rows, from a
  `ShardingPlan` or from `table_devices` / `traffic` / `partition_strategy`.
* `planning/`: making a `ShardingPlan` from a cost model (`plan_sharding`).
* `engine`: the engine's declared interface (`Engine`: group features by table, convert, look
  up, apply activation gradients), which everything below `tpu_embedding` is driven through.
* `front_end`: what Keras front ends ask of the engine (look up these features; the gradient
  trap trains on their activation gradients).
* `batch_paths`: the one place that runs a replica's enqueue / dequeue / apply_gradients, and
  which way a batch goes (converted first, looked up directly, handed to XLA).
* `batch_types`: what a batch is (`TableBatch`, `Batch`) and the protocol of what carries it
  (`BatchCarrier`), which `queues` and `handoff` implement.
* `handoff`: the carrier inside one traced function (XLA-compiled, or scheduled on a PS cluster).
* `parameter_server`: the engine on ParameterServerStrategy's ps tasks.
* `sharding/`: how each table is split and where its pieces travel, one module per kind
  (row-wise, row-wise pooled, table-wise, the workers' row-wise), chosen per table at build.
* `transports/`: how the shardings' roles move tensors: in place on one machine's devices,
  packets to parameter-server tasks, the workers' collectives.
* `multi_worker/`: a MultiWorkerMirroredStrategy cluster's workers as one group, the variable
  of which each worker holds its own block, and the check that fails a bad batch everywhere.
* `table_state`: what the engine knows about one table (its config, features, layout and
  variables).
* `dynamic_relayout`: a dynamic table's checkpoint placed onto another block layout, its rows
  moved with their keys.
* `dynamic_table`: a dynamic table's key index and initializer pool, and how its batches' keys
  become rows before the sharding arranges them.
* `layout`: how a table's rows split into blocks over devices ('div' contiguous, 'mod' strided).
* `strided_variable`: the variable of a 'mod' table, saved and read as the whole table.
* `initial_rows`: rows of a table's initial value computed without the rest of the table.
* `checkpoint_rows`: a block's rows read from the checkpoint being restored, and no others.
* `profile_sampling`, `profile_files`: `profile_data_directory`'s sampling and its files.
* `queues`: the carrier across functions: per-replica queues from enqueue to dequeue to apply.

The package imports nothing itself, so `import tf_embedding.sharded.layout` stays light.
"""
