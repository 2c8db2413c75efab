"""A worker of the bad-id test's loopback cluster (TF_CONFIG set):

    python mw_bad_id.py OUT_DIR CASE BAD_RANK BAD_STEP

trains CASE, where step BAD_STEP of worker BAD_RANK's slice looks up an id past table "video"
(feature "watched"); prints each step's error message, if any, and writes every table and slot
whole from rank 0 (`tables.npz`).
"""

import os
import sys

import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import group_of

from helpers.multi_worker_training import bad_id_edit, save_whole_tables, train


def main(out_dir: str, case: str, bad_rank: str, bad_step: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    embedding, results = train(strategy, case, workers.rank, workers.size,
                               bad_id_edit(int(bad_rank), int(bad_step), workers.size))
    for step, result in enumerate(results):
        if isinstance(result, tf.errors.OpError):
            message = " ".join(result.message.split())
            print(f"step {step} failed: {type(result).__name__}: {message}", flush=True)
    save_whole_tables(embedding, workers.rank, os.path.join(out_dir, "tables.npz"))
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
