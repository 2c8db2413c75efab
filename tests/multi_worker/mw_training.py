"""A worker of the multi-worker tests' loopback cluster (TF_CONFIG set):

    python mw_training.py OUT_DIR CASE [CASE ...]     (CASE: optimizer:kind:partition:steps)

trains each case (helpers/multi_worker_training.py) and writes each worker's activations of
every step (`<case>.rank<r>.npz`) and, from rank 0, every table and slot whole (`<case>.npz`;
every rank takes part in the gather).
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import group_of

from helpers.multi_worker_training import save_whole_tables, train


def main(out_dir: str, cases: list[str]) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    for case in cases:
        embedding, activations = train(strategy, case, workers.rank, workers.size)
        name = case.replace(":", "_")
        np.savez(os.path.join(out_dir, f"{name}.rank{workers.rank}.npz"),
                 **{f"{step}/{feature}": value for step, values in enumerate(activations)
                    for feature, value in values.items()})
        save_whole_tables(embedding, workers.rank, os.path.join(out_dir, f"{name}.npz"))
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
