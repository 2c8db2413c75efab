"""A worker of the multi-worker dynamic-table tests' loopback cluster (TF_CONFIG set):

    python mw_dynamic.py OUT_DIR PARTITION [BAD_RANK BAD_STEP]

trains tests/helpers/dynamic_training.py's run (PARTITION: 'div' or 'mod', the table row-wise
over the workers, or 'owner<r>', whole on worker r) with each worker's slice of every global
batch, then looks up its slice of the first batch forward-only, and writes this worker's
activations of each step and of that lookup ("forward") and the index's statistics (`rank<r>.npz`, a failed step's error message printed
instead), every table and slot whole from rank 0 (`tables.npz`; every rank takes part in the
gather), and the checkpoint written after step CHECKPOINT_STEP as TF documents for MWMS: rank 0
to OUT_DIR/ckpt, the others to OUT_DIR/temporary<rank>/ckpt. With BAD_RANK and BAD_STEP, that
worker's first key of that step is negative.
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import group_of

from helpers import dynamic_training
from helpers.multi_worker_training import save_whole_tables


def main(out_dir: str, partition: str, *bad: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    embedding = dynamic_training.embedding_for(
        strategy, partition, dynamic_training.GLOBAL_BATCH // workers.size)
    edit = (dynamic_training.negative_key_edit(int(bad[0]), int(bad[1]), workers.size)
            if bad else None)
    path = out_dir if workers.rank == 0 else os.path.join(out_dir, f"temporary{workers.rank}")
    activations = dynamic_training.train(strategy, embedding, workers.rank, workers.size, edit,
                                         os.path.join(path, "ckpt"))
    values = {}
    for step, result in enumerate(activations):
        if isinstance(result, tf.errors.OpError):
            message = " ".join(result.message.split())
            print(f"step {step} failed: {type(result).__name__}: {message}", flush=True)
        else:
            values[f"step{step}"] = result
    values["forward"] = dynamic_training.forward(strategy, embedding, workers.rank, workers.size)
    statistics = embedding.dynamic_statistics()["items"]
    np.savez(os.path.join(out_dir, f"rank{workers.rank}.npz"),
             statistics=np.array(list(statistics.values())), **values)
    save_whole_tables(embedding, workers.rank, os.path.join(out_dir, "tables.npz"))
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
