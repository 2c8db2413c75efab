"""A worker lost mid-training on a loopback cluster: does the user's chief finish and exit, and
what do the retried steps do to the tables and to the step count?

    python tools/lost_worker.py [--trials 10] [--steps 300] [--seed 0]

Each trial starts a loopback cluster of 2 ps and 2 worker tasks and a chief program (this file with
`--chief`, a user's program of the documented shape: `tf_embedding.cluster.chief.run(main)`), and
kills worker 1 with SIGKILL at a random moment of the training. The chief trains one table of the
sharded `TPUEmbedding` with SGD (learning rate 1, zero initial table) and a loss whose gradient is 1
for each id, so each time a step's update reaches a row it lowers that row by exactly 1 per lookup.
Every batch looks up row 0 (the first ps task's block) and the last row (the second's) once, and no
other batch row touches them: after the run, minus each of those rows is the number of times any
step's update reached that block. A step counter, incremented at the end of each step, counts the
step functions that ran to the end.

Per trial it prints the kill moment, the chief's exit status and time, and scheduled steps /
completed step functions / updates that reached each block. Exit status 1 if a chief did not
exit 0 within --timeout or a count is below the scheduled steps (a step lost); at-least-once
retries (counts above it) are what TF's coordinator promises, and are reported, not failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROWS, DIM, BATCH, IDS_PER_SAMPLE = 200_000, 32, 4096, 20
STARTED, RESULT = "started", "result.json"


def chief_main(output: str, steps: int, seed: int) -> int:
    """The chief program: trains `steps` steps over the cluster of TF_CONFIG, then writes the
    counts to OUTPUT/result.json."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import tf_embedding  # pylint: disable=import-outside-toplevel

    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    table = tf.tpu.experimental.embedding.TableConfig(
        ROWS, DIM, combiner="sum", initializer=tf.zeros_initializer(), name="table")
    features = {"ids": tf.tpu.experimental.embedding.FeatureConfig(table=table, name="ids")}
    with strategy.scope():
        embedding = tf_embedding.TPUEmbedding(features, tf_embedding.SGD(1.0))
        completed = tf.Variable(0, dtype=tf.int64)

    def replica_step() -> None:
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = tf.reduce_sum(activations["ids"])
        embedding.apply_gradients(tape.gradient(loss, activations))
        completed.assign_add(1)

    @tf.function
    def training_step(ids: tf.SparseTensor) -> None:
        embedding.enqueue({"ids": ids}, training=True)
        strategy.run(replica_step)

    rng = np.random.default_rng(seed)
    positions = np.stack(np.meshgrid(np.arange(BATCH), np.arange(IDS_PER_SAMPLE),
                                     indexing="ij"), -1).reshape(-1, 2).astype(np.int64)

    def batch() -> tf.SparseTensor:
        ids = rng.integers(1, ROWS - 1, (BATCH, IDS_PER_SAMPLE), dtype=np.int64)
        ids[0, 0], ids[0, 1] = 0, ROWS - 1
        return tf.SparseTensor(positions, ids.reshape(-1), (BATCH, IDS_PER_SAMPLE))

    coordinator.schedule(training_step, args=(batch(),)).fetch()
    open(os.path.join(output, STARTED), "w", encoding="utf-8").close()
    start = time.monotonic()
    for _ in range(steps - 1):
        coordinator.schedule(training_step, args=(batch(),))
    coordinator.join()
    seconds = time.monotonic() - start
    values = tf.convert_to_tensor(embedding.embedding_tables[table])
    with open(os.path.join(output, RESULT), "w", encoding="utf-8") as f:
        json.dump({"scheduled": steps, "completed": int(completed.numpy()),
                   "first_block_updates": -float(values[0, 0]),
                   "last_block_updates": -float(values[ROWS - 1, 0]),
                   "training_seconds": seconds}, f)
    return 0


def trial(steps: int, seed: int, kill_within: float, timeout: float) -> dict:
    """One cluster, one chief, worker 1 killed `kill_within * uniform` seconds after the first
    step; the chief's counts plus its exit status and timing."""
    from tf_embedding.cluster import local_cluster  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as output, \
            local_cluster.loopback_tasks(num_ps=2, num_workers=2) as (cluster, servers):
        chief = subprocess.Popen(
            [sys.executable, __file__, "--chief", output, "--steps", str(steps),
             "--seed", str(seed)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=local_cluster.child_environment(
                {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)}))
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(output, STARTED)):
            if chief.poll() is not None or time.monotonic() > deadline:
                chief.kill()
                raise RuntimeError("the chief did not start training:\n" + chief.stderr.read())
            time.sleep(0.05)
        kill_at = kill_within * rng.uniform()
        time.sleep(kill_at)
        servers[("worker", 1)].process.kill()
        killed = time.monotonic()
        try:
            chief.wait(max(0.0, deadline - killed))
        except subprocess.TimeoutExpired:
            chief.kill()
            chief.wait()
            return {"kill_at": kill_at, "status": "hung", "exit_seconds": timeout}
        stderr = chief.stderr.read()
        result = {"kill_at": kill_at, "status": chief.returncode,
                  "exit_seconds": time.monotonic() - killed}
        path = os.path.join(output, RESULT)
        if chief.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"the chief exited {chief.returncode}:\n{stderr[-5000:]}")
        with open(path, encoding="utf-8") as f:
            return {**result, **json.load(f)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-within", type=float, default=2.0,
                        help="the latest kill moment, in seconds after the first step")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a chief may take before it counts as hung")
    parser.add_argument("--chief", metavar="OUTPUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.chief:
        import tf_embedding.cluster.chief  # pylint: disable=import-outside-toplevel
        tf_embedding.cluster.chief.run(lambda: chief_main(args.chief, args.steps, args.seed))

    print("trial  kill at  chief exit  after kill  scheduled  completed  block 0  block 1  "
          "training")
    failures = 0
    for index in range(args.trials):
        r = trial(args.steps, args.seed + index, args.kill_within, args.timeout)
        counts = [r.get(key, 0) for key in ("completed", "first_block_updates",
                                             "last_block_updates")]
        failed = r["status"] != 0 or min(counts) < args.steps
        failures += failed
        print(f"{index:5d}  {r['kill_at']:6.2f}s  {str(r['status']):>10}  "
              f"{r['exit_seconds']:9.2f}s  {args.steps:9d}  {counts[0]:9d}  {counts[1]:7.0f}  "
              f"{counts[2]:7.0f}  {r.get('training_seconds', 0.0):7.2f}s"
              + ("  FAILED" if failed else ""), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
