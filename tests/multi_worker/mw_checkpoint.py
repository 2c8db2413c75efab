"""A worker of the multi-worker checkpoint tests' loopback cluster (TF_CONFIG set):

    python mw_checkpoint.py save DIR CASE [WINDOW_BYTES]
                                                trains CASE, then saves as TF documents for MWMS:
                                                rank 0 to DIR/ckpt, the others to
                                                DIR/temporary<rank>/ckpt ('mod' tables in
                                                windows of WINDOW_BYTES of each block)
    python mw_checkpoint.py restore CKPT DIR CASE WHEN
                                                builds CASE's TPUEmbedding and restores CKPT
                                                into it (WHEN: "before" or "after" build); rank
                                                0 writes every table and slot whole to
                                                DIR/restored.npz
"""

import os
import sys

import tensorflow as tf

from tf_embedding.sharded.multi_worker import strided_windows
from tf_embedding.sharded.multi_worker.group import group_of

from helpers.multi_worker_training import GLOBAL_BATCH, embedding_for, save_whole_tables, train


def main(mode: str, *args: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    if mode == "save":
        directory, case, *window_bytes = args
        if window_bytes:
            # Small windows: a 'mod' table of a few rows is saved in many exchanges.
            # pylint: disable-next=protected-access
            strided_windows._WINDOW_BLOCK_BYTES = int(window_bytes[0])
        embedding, _ = train(strategy, case, workers.rank, workers.size)
        path = (directory if workers.rank == 0
                else os.path.join(directory, f"temporary{workers.rank}"))
        tf.train.Checkpoint(embedding=embedding).write(os.path.join(path, "ckpt"))
    else:
        checkpoint_path, directory, case, when = args
        embedding = embedding_for(strategy, case)
        checkpoint = tf.train.Checkpoint(embedding=embedding)
        if when == "after":
            embedding.build(per_replica_batch_size=GLOBAL_BATCH // workers.size)
        status = checkpoint.read(checkpoint_path)
        embedding.build(per_replica_batch_size=GLOBAL_BATCH // workers.size)
        status.assert_consumed()
        save_whole_tables(embedding, workers.rank, os.path.join(directory, "restored.npz"))
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
