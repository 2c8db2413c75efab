"""A worker of the multi-worker memory test's loopback cluster (TF_CONFIG set):

    python mw_memory.py train DIR ROWS DIM OPTIMIZER
    python mw_memory.py restore DIR ROWS DIM OPTIMIZER

train: builds a TPUEmbedding of one ROWS x DIM table (OPTIMIZER: SGD or Adagrad, one slot) under
MultiWorkerMirroredStrategy, trains a step and saves a checkpoint (rank 0 to DIR/ckpt, the others
to DIR/temporary<rank>/ckpt); restore: restores DIR/ckpt into a new TPUEmbedding before its
build, and asks for the table whole with too little memory (as if), which is refused; prints
`memory <phase> <bytes>`, the peak resident memory of each phase over the resident memory before
it (VmHWM after resetting it through /proc/self/clear_refs), and `block <bytes>`, the bytes of
this worker's blocks (table and slot). With MEMORY_CGROUPS set (a cgroup directory), the worker
first moves itself into its subgroup `worker<task index>`, whose memory limit the test set.
"""

import json
import os
import sys

import tensorflow as tf

import tf_embedding
from tf_embedding.sharded.multi_worker.group import group_of

BATCH = 64


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field)) * 1024


def measured(phase: str, run) -> None:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # VmHWM := the current RSS
    before = status_bytes("VmRSS")
    run()
    print(f"memory {phase} {status_bytes('VmHWM') - before}", flush=True)


def join_memory_cgroup() -> None:
    """Moves this process into its memory cgroup, if the test made one (before TF allocates)."""
    groups = os.environ.get("MEMORY_CGROUPS")
    if groups:
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        with open(os.path.join(groups, f"worker{index}", "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))


def embedding_for(strategy, rows: int, dim: int, optimizer: str):
    table = tf_embedding.TableConfig(
        vocabulary_size=rows, dim=dim, name="big",
        initializer=tf.keras.initializers.TruncatedNormal(stddev=0.05, seed=7))
    with strategy.scope():
        return tf_embedding.TPUEmbedding({"f": tf_embedding.FeatureConfig(table, name="f")},
                                         getattr(tf_embedding, optimizer)(0.1))


def main(mode: str, directory: str, rows: str, dim: str, optimizer: str) -> None:
    rows, dim = int(rows), int(dim)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    embedding = embedding_for(strategy, rows, dim, optimizer)
    if mode == "train":
        train(strategy, workers, embedding, directory, rows)
    else:
        measured("restore", lambda: (
            tf.train.Checkpoint(embedding=embedding).read(os.path.join(directory, "ckpt")),
            embedding.build(per_replica_batch_size=BATCH // workers.size)))
        # A table larger than a worker's memory is refused whole, naming it (before any
        # collective, so on every worker alike).
        workers.least_available_bytes = rows * dim * 4 // 2
        try:
            embedding.table_variables()["big"]["parameters"].full_value()
        except ValueError as error:
            print(f"refused {error}", flush=True)
    blocks = sum(block.variable.shape.num_elements() * 4
                 for variables in embedding.table_blocks().values()
                 for table_blocks in variables.values() for block in table_blocks)
    print(f"block {blocks}", flush=True)
    print("done", flush=True)


def train(strategy, workers, embedding, directory: str, rows: int) -> None:
    measured("build", lambda: embedding.build(per_replica_batch_size=BATCH // workers.size))
    ids = tf.constant([[(index * 7919) % rows] for index in range(BATCH // workers.size)],
                      tf.int64)

    @tf.function
    def step():
        def replica_step():
            embedding.enqueue({"f": ids}, training=True)
            activations = embedding.dequeue()
            embedding.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))
        strategy.run(replica_step)

    measured("step", step)
    path = directory if workers.rank == 0 else os.path.join(directory, f"temporary{workers.rank}")
    measured("save", lambda: tf.train.Checkpoint(embedding=embedding).write(
        os.path.join(path, "ckpt")))
    # The chief merges the checkpoint after every worker wrote its blocks: wait for it.
    workers.all_gather(tf.ones([1]), workers.exchange_keys()[0])


if __name__ == "__main__":
    join_memory_cgroup()
    main(*sys.argv[1:])
