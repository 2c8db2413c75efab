"""A worker of the multi-worker dynamic-table tests' loopback cluster (TF_CONFIG set):

    python mw_dynamic.py OUT_DIR PLACEMENT                       trains
    python mw_dynamic.py OUT_DIR PLACEMENT bad RANK STEP         trains, worker RANK's first
                                                                 key of STEP negative
    python mw_dynamic.py OUT_DIR PLACEMENT restore CKPT CAPACITY restores CKPT (of step
                                                                 CHECKPOINT_STEP) before build
                                                                 into a table of CAPACITY,
                                                                 then trains on from there

runs tests/helpers/dynamic_training.py's training (PLACEMENT: 'div' or 'mod', the table
row-wise over the workers, or 'owner<r>', whole on worker r) with each worker's slice of every
global batch, then looks up its slice of the first batch forward-only. Writes this worker's
activations of each step and of that lookup ("forward") and the index's statistics
(`rank<r>.npz`, a failed step's error message printed instead), every table and slot whole from
rank 0 (`tables.npz`; every rank takes part in the gather), and checkpoints as TF documents for
MWMS, rank 0 to OUT_DIR/<name>, the others to OUT_DIR/temporary<rank>/<name>: when training
from the start, `ckpt` after step CHECKPOINT_STEP; `final` at the end.
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import group_of

from helpers import dynamic_training
from helpers.multi_worker_training import save_whole_tables


def main(out_dir: str, placement: str, mode: str = "train", *arguments: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    directory = (out_dir if workers.rank == 0
                 else os.path.join(out_dir, f"temporary{workers.rank}"))
    capacity = {"capacity": int(arguments[1])} if mode == "restore" else {}
    embedding = dynamic_training.embedding_for(
        strategy, placement, dynamic_training.GLOBAL_BATCH // workers.size, **capacity)
    if mode == "restore":
        tf.train.Checkpoint(embedding=embedding).read(arguments[0])
        activations = dynamic_training.train(strategy, embedding, workers.rank, workers.size,
                                             first_step=dynamic_training.CHECKPOINT_STEP)
    else:
        edit = (dynamic_training.negative_key_edit(int(arguments[0]), int(arguments[1]),
                                                   workers.size) if mode == "bad" else None)
        activations = dynamic_training.train(strategy, embedding, workers.rank, workers.size,
                                             edit, os.path.join(directory, "ckpt"))
    first_step = dynamic_training.STEPS - len(activations)
    values = {}
    for step, result in enumerate(activations, first_step):
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
    tf.train.Checkpoint(embedding=embedding).write(os.path.join(directory, "final"))
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
