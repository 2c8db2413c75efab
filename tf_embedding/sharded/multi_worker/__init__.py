"""The sharded engine on a `MultiWorkerMirroredStrategy` cluster: each worker holds its own row
block of every table, and a step's ids, rows and activation gradients travel between the workers
by TF's collectives, synchronously, as on a TPU pod (docs/multi_worker.md).

* `group`: the workers as one collective group (who they are, in which order) and the
  collective ops the exchanges use.
* `block_variable`: `WorkerBlockVariable`, a table (or slot) of which this worker holds only its
  own row block.
* `row_exchange`: a step's forward half: unique ids to the owners of their rows, rows back.
* `gradient_exchange`: its backward half: activation gradients to the owners, each applying one
  fused update per step for the global batch.
* `id_check`: an out-of-range id on one worker fails the step on every worker.
"""
