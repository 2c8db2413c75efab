"""Parameter-server scale benchmark: samples/s and bytes per step of `TPUEmbedding` on loopback
clusters of 1, 2 and 4 PS tasks (1 worker), with the rows and the partial traffic, next to the
same step in one process.

    .venv/bin/python tools/ps_benchmark.py                      # the defaults below
    .venv/bin/python tools/ps_benchmark.py --num-ps 2 --tables 8 --vocabulary 1000000

Every cluster is `tf_embedding.local_cluster.loopback_cluster`; this script re-runs itself as the
chief (`--role chief`) and as the one-process run (`--role one-process`). Bytes are the TCP
payload through the PS and worker ports, read from `ss -ti` (Linux iproute2) before and after the
timed steps: "down" is worker -> PS (ids, gradients), "up" PS -> worker (rows, partial
activations); the chief's small dispatch messages are included. On one machine the "network" is
loopback and every task shares the cores, so samples/s here measure the machinery, not a
network; bytes per step do not depend on the machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

RESULT = "RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-ps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--traffic", nargs="+", default=["rows", "partial"],
                        choices=["rows", "partial"])
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--vocabulary", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--ids-per-sample", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--role", choices=["driver", "chief", "one-process"], default="driver",
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def port_bytes(ps_ports: set[str], worker_ports: set[str]) -> tuple[int, int] | None:
    """(worker -> PS bytes, PS -> worker bytes) so far, from the server side of each connection.

    TF pulls tensors (the receiver asks the sender's server), so each direction uses both the PS
    and the worker ports. None without `ss`.
    """
    try:
        output = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True,
                                text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    down = up = 0
    lines = output.splitlines()
    for line, info in zip(lines, lines[1:]):
        fields = line.split()
        if line.startswith(("\t", " ")) or len(fields) < 4:
            continue
        port = fields[2].rsplit(":", 1)[-1]
        sent = re.search(r"bytes_acked:(\d+)", info)
        received = re.search(r"bytes_received:(\d+)", info)
        sent_bytes = int(sent.group(1)) if sent else 0
        received_bytes = int(received.group(1)) if received else 0
        if port in ps_ports:
            up, down = up + sent_bytes, down + received_bytes
        elif port in worker_ports:
            down, up = down + sent_bytes, up + received_bytes
    return down, up


def make_embedding(args: argparse.Namespace, **options: Any) -> tuple[Any, dict[str, Any]]:
    """(an unbuilt TPUEmbedding, its feature config): `args.tables` tables, one feature each."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf_embedding  # pylint: disable=import-outside-toplevel
    tables = [tf_embedding.TableConfig(args.vocabulary, args.dim, name=f"table_{i}",
                                       initializer=tf.keras.initializers.RandomUniform(seed=i))
              for i in range(args.tables)]
    features = {f"feature_{i}": tf_embedding.FeatureConfig(table)
                for i, table in enumerate(tables)}
    embedding = tf_embedding.TPUEmbedding(features, tf_embedding.Adagrad(0.1), **options)
    return embedding, features


def make_dataset(args: argparse.Namespace, features: dict[str, Any]) -> Any:
    """Uniform ids, `ids_per_sample` per sample and feature, as ragged batches, forever (one
    stateless draw per batch: a per-id pipeline would be slower than the step)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def batch(index):
        ids = tf.random.stateless_uniform([args.batch, args.ids_per_sample], seed=[1, index],
                                          maxval=args.vocabulary, dtype=tf.int64)
        return {name: tf.RaggedTensor.from_tensor(ids) for name in features}

    return tf.data.Dataset.range(2**62).map(batch).prefetch(2)


def make_step(embedding: Any, strategy: Any) -> Any:
    """The training step (a tf.function of an iterator): enqueue, dequeue, apply_gradients."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    @tf.function
    def step(iterator):
        embedding.enqueue(next(iterator), training=True)

        def replica_step():
            with tf.GradientTape() as tape:
                activations = embedding.dequeue()
                tape.watch(activations)
                loss = tf.add_n([tf.reduce_sum(a * a) for a in activations.values()])
            embedding.apply_gradients(tape.gradient(loss, activations))
            return loss

        return strategy.run(replica_step)

    return step


def run_chief(args: argparse.Namespace) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    ps_ports = {address.rsplit(":", 1)[1] for address in cluster["ps"]}
    worker_ports = {address.rsplit(":", 1)[1] for address in cluster["worker"]}
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    for traffic in args.traffic:
        with strategy.scope():
            embedding, features = make_embedding(
                args, traffic={f"table_{i}": traffic for i in range(args.tables)})
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda features=features: make_dataset(args, features)))
        step = make_step(embedding, strategy)
        for _ in range(args.warmup):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()
        before, start = port_bytes(ps_ports, worker_ports), time.perf_counter()
        for _ in range(args.steps):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()
        seconds, after = time.perf_counter() - start, port_bytes(ps_ports, worker_ports)
        result = {"ps": len(ps_ports), "traffic": traffic,
                  "samples_per_second": args.steps * args.batch / seconds}
        if before and after:
            result["down_mb"] = (after[0] - before[0]) / args.steps / 1e6
            result["up_mb"] = (after[1] - before[1]) / args.steps / 1e6
        print(RESULT + json.dumps(result), flush=True)


def run_one_process(args: argparse.Namespace) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    embedding, features = make_embedding(args)
    iterator = iter(make_dataset(args, features))
    step = make_step(embedding, tf.distribute.get_strategy())
    for _ in range(args.warmup):
        step(iterator)
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step(iterator)
    loss.numpy()
    seconds = time.perf_counter() - start
    print(RESULT + json.dumps({"ps": 0, "traffic": "-",
                               "samples_per_second": args.steps * args.batch / seconds}),
          flush=True)


def results_of(command: list[str], environ: dict[str, str]) -> list[dict]:
    from tf_embedding import local_cluster  # pylint: disable=import-outside-toplevel
    completed = subprocess.run(command, capture_output=True, text=True,
                               env=local_cluster.child_environment(environ))
    if completed.returncode:
        sys.exit(f"{' '.join(command[:3])} failed:\n{completed.stderr[-5000:]}")
    return [json.loads(line[len(RESULT):]) for line in completed.stdout.splitlines()
            if line.startswith(RESULT)]


def drive(args: argparse.Namespace, argv: list[str]) -> None:
    from tf_embedding import local_cluster  # pylint: disable=import-outside-toplevel
    script = [sys.executable, os.path.abspath(__file__), *argv]
    results = results_of(script + ["--role", "one-process"], {})
    for num_ps in args.num_ps:
        with local_cluster.loopback_cluster(num_ps=num_ps, num_workers=1) as cluster:
            results += results_of(script + ["--role", "chief"],
                                  {"TF_CONFIG": local_cluster.tf_config(cluster, "chief", 0)})
    print(f"{args.tables} tables of {args.vocabulary:,} x {args.dim}, batch {args.batch}, "
          f"{args.ids_per_sample} uniform ids per sample and table, Adagrad, 1 worker, "
          f"{args.steps} timed steps")
    print("| PS tasks | traffic | samples/s | down MB/step | up MB/step |")
    print("|---|---|---|---|---|")
    for result in results:
        where = "one process" if result["ps"] == 0 else str(result["ps"])
        print(f"| {where} | {result['traffic']} | {result['samples_per_second']:,.0f} | "
              f"{result.get('down_mb', float('nan')):.2f} | "
              f"{result.get('up_mb', float('nan')):.2f} |")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.role == "chief":
        run_chief(args)
    elif args.role == "one-process":
        run_one_process(args)
    else:
        drive(args, argv)


if __name__ == "__main__":
    main()
