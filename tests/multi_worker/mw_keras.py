"""A worker of the multi-worker Keras tests' loopback cluster (TF_CONFIG set):

    python mw_keras.py OUT_DIR LOOP FRONT_END [FRONT_END ...]     (LOOP: fit or custom)

trains each front end's model (helpers/multi_worker_keras.py) and writes each worker's model
outputs of its slice of the first global batch (`<front end>.forward.rank<r>.npy`) and, from
rank 0, every table and slot whole and the Dense layer's weights (`<front end>.npz`; every rank
takes part in the gather); then saves the model as MWMS wants, every worker, rank 0 to the real path and the
others to temporary ones: `model.save_weights` (`<front end>.weights.h5`) and a
`tf.train.Checkpoint` (`<front end>/ckpt`).
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tf_embedding.sharded.multi_worker.group import group_of

from helpers.multi_worker_keras import bad_id_inputs, forward_outputs, model_values, train
from helpers.multi_worker_training import whole_tables


def main(out_dir: str, loop: str, front_ends: list[str]) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = group_of(strategy).rank
    directory = out_dir if rank == 0 else os.path.join(out_dir, f"temporary{rank}")
    os.makedirs(directory, exist_ok=True)
    for name in front_ends:
        model = train(strategy, name, loop)
        np.save(os.path.join(out_dir, f"{name}.forward.rank{rank}.npy"),
                forward_outputs(strategy, model))
        values = {**whole_tables(model.embedding), **model_values(model)}
        if rank == 0:
            np.savez(os.path.join(out_dir, f"{name}.npz"), **values)
        model.save_weights(os.path.join(directory, f"{name}.weights.h5"))
        tf.train.Checkpoint(model=model).write(os.path.join(directory, name, "ckpt"))
        if name == "keras":
            look_up_bad_id(strategy, model.embedding, rank)
    print("done", flush=True)


def look_up_bad_id(strategy: tf.distribute.Strategy, layer, rank: int) -> None:
    """Looks up a batch where rank 1 has an id past its table; prints each worker's error."""
    features, weights = bad_id_inputs(rank)

    @tf.function
    def look_up():
        return strategy.run(lambda: layer(features, weights))

    try:
        look_up()
        print("bad id: no error", flush=True)
    except tf.errors.OpError as error:
        print(f"bad id: {type(error).__name__}: {' '.join(error.message.split())}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
