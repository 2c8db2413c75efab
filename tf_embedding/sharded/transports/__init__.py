"""How a step's tensors reach a table's blocks and come back: the transports the shardings
(`sharded/sharding/`) run their roles over, one per runtime, chosen when the engine is built.

* `device_calls`: the unit of work a sharding hands a block transport (`DeviceCall`: inputs,
  and the body that runs on the block's device) and `Narrow` ids, which may travel as int32.
* `block_calls`: `BlockCalls`, what the two block transports share: a step's lookups and
  updates as one list of `DeviceCall`s for all tables, the update of every replica in one
  merge_call.
* `in_place`: `InPlace`, one machine's devices: each call runs where its block lives, its
  inputs used as they are.
* `task_packets`: `TaskPackets`, ParameterServerStrategy's tasks: a step's calls to one task
  travel in one packet each way.
* `collectives`: `WorkerCollectives`, the workers of a MultiWorkerMirroredStrategy cluster:
  every table's ids, rows and gradients in a few collectives per step (`collective_rows`, the
  forward; `collective_gradients`, the backward); `lookup_packets`: how a lookup travels
  there (id, output row and gain in 16 bytes).
"""
