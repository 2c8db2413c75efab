"""The sharded engine on a `MultiWorkerMirroredStrategy` cluster: each worker holds its own row
block of every table, and a step's ids, rows and activation gradients travel between the workers
by TF's collectives, synchronously, as on a TPU pod (docs/multi_worker.md). The tables'
sharding there is `sharding/worker_row_wise.py`, its collectives `transports/collectives.py`.

* `group`: the workers as one collective group (who they are, in which order) and the
  collective ops the exchanges use.
* `block_variable`: `WorkerBlockVariable`, a table (or slot) of which this worker holds only its
  own row block.
* `block_saver`: each worker writes only its blocks into the chief's checkpoint.
* `strided_windows`: a 'mod' table saved as windows of rows its workers exchange.
* `memory`: the memory a worker has left, what a table gathered whole must fit.
* `id_check`: an out-of-range id on one worker fails the step on every worker.
"""
