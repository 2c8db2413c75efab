"""A worker of the malformed-batch test's loopback cluster (TF_CONFIG set):

    python mw_bad_batch.py KIND

trains three steps of one table with ragged ids and weights, each worker its own samples; at
step 1 worker 1's batch is malformed (KIND "row_splits": ragged row splits that decrease, made
with validate=False; "weights": fewer weights than ids). The collective
timeout is 120 s: a worker left waiting would fail with DeadlineExceeded instead. Prints each
step's outcome and the seconds it took, and the table's sum.
"""

import sys
import time

import tensorflow as tf

import tf_embedding
from tf_embedding.sharded.multi_worker.group import group_of


def batch(rank: int, step: int, kind: str) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    ids = tf.ragged.constant([[rank, step + 1], [rank + 2]], tf.int64)
    weights = tf.ragged.constant([[1.0, 0.5], [2.0]])
    if rank == 1 and step == 1:
        if kind == "row_splits":
            ids = tf.RaggedTensor.from_row_splits(ids.values, tf.constant([0, 2, 1], tf.int64),
                                                  validate=False)
        else:
            weights = tf.ragged.constant([[1.0], [0.5]])
    return ids, weights


def main(kind: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    table = tf_embedding.TableConfig(8, 2, name="video", combiner="sum")
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding({"watched": tf_embedding.FeatureConfig(table)},
                                              tf_embedding.SGD(0.1),
                                              collective_timeout_seconds=120)
    embedding.build([tf.TensorShape([2, None])])

    @tf.function
    def step(ids, weights):
        embedding.enqueue({"watched": ids}, {"watched": weights}, training=True)

        def replica():
            activations = embedding.dequeue()
            embedding.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))

        strategy.run(replica)

    for index in range(3):
        start = time.monotonic()
        try:
            step(*batch(workers.rank, index, kind))
            outcome = "ok"
        except tf.errors.OpError as error:
            outcome = f"failed: {type(error).__name__}: {' '.join(error.message.split())}"
        print(f"step {index} {outcome} ({time.monotonic() - start:.1f} s)", flush=True)
    total = tf.reduce_sum(embedding.table_variables()["video"]["parameters"].full_value())
    print(f"table sum {float(total):.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
