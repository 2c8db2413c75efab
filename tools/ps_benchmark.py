"""Parameter-server scale benchmark: samples/s and bytes per step of `TPUEmbedding` on clusters of
1, 2 and 4 PS tasks (1 or more workers), with the rows and the partial traffic, next to the same
step in one process; on loopback, or in the network lab on shaped links.

    .venv/bin/python tools/ps_benchmark.py                      # loopback, the defaults below
    .venv/bin/python tools/ps_benchmark.py --num-ps 2 --tables 8 --vocabulary 1000000
    sudo .venv/bin/python tools/ps_benchmark.py --lab --rates 50 200 --workers 1 2

On loopback every cluster is `tf_embedding.local_cluster.loopback_cluster` and the bytes are the
TCP payload through the PS and worker ports, read from `ss -ti` (Linux iproute2) before and after
the timed steps: "down" is worker -> PS (ids, gradients), "up" PS -> worker (rows, partial
activations); the chief's small dispatch messages are included. Every task shares the cores and
nothing crosses a wire, so samples/s measure the machinery, not a network.

With --lab (root on Linux, tools/netlab) every task runs in a network namespace of its own on a
link to a bridge, and each traffic is timed once on unshaped links (the step's compute) and once
per --rates rate, each link limited to that rate in both directions. Bytes are then the frames
on the workers' links (headers included), per worker step, and every task's own counts are
listed; "model ms" is the step time of the traffic model (tools/netlab/model.py) for the rate,
given the unshaped step time.

This script re-runs itself as the chief (`--role chief`) and as the one-process run
(`--role one-process`); bytes per step do not depend on the machine.
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

from netlab import model

RESULT = "RESULT "
# Counts of bytes (sent, received) so far, by task (or "workers", all of them on loopback).
Counters = dict[str, tuple[int, int]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-ps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="worker tasks per cluster (each size is a cluster of its own)")
    parser.add_argument("--traffic", nargs="+", default=["rows", "partial"],
                        choices=["rows", "partial"])
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--vocabulary", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--ids-per-sample", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (all workers)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lab", action="store_true",
                        help="run each cluster in the network lab (root, Linux: tools/netlab)")
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0],
                        help="with --lab: link rates to time, Mbit/s per link and direction")
    parser.add_argument("--delay", type=float, default=0.0,
                        help="with --lab: delay per link and direction, ms (needs netem)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds the whole run may take; then it stops and cleans up")
    parser.add_argument("--role", choices=["driver", "chief", "one-process"], default="driver",
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def port_bytes(ps_ports: set[str], worker_ports: set[str]) -> Counters | None:
    """{"workers": (worker -> PS bytes, PS -> worker bytes)} so far, from the server side of each
    loopback connection.

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
    return {"workers": (down, up)}


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


def chief_counters() -> tuple[Callable[[], Counters | None], Any]:
    """(a reader of the cluster's byte counters, the lab's network or None on loopback)."""
    from netlab import cluster, links  # pylint: disable=import-outside-toplevel
    if cluster.NETWORK_ENVIRON in os.environ:
        network = links.Network.from_description(os.environ[cluster.NETWORK_ENVIRON])
        return network.counters, network
    spec = json.loads(os.environ["TF_CONFIG"])["cluster"]
    ps_ports = {address.rsplit(":", 1)[1] for address in spec["ps"]}
    worker_ports = {address.rsplit(":", 1)[1] for address in spec["worker"]}
    return lambda: port_bytes(ps_ports, worker_ports), None


def timed_steps(args: argparse.Namespace, coordinator: Any, step: Any, iterator: Any,
                counters: Callable[[], Counters | None]) -> dict[str, Any]:
    """Samples/s, the step time of one worker and the bytes per worker step of `args.steps`
    steps spread over the workers."""
    before, start = counters(), time.perf_counter()
    for _ in range(args.steps):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    seconds, after = time.perf_counter() - start, counters()
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    result = {"workers": workers, "samples_per_second": args.steps * args.batch / seconds,
              "step_ms": 1e3 * seconds * workers / args.steps}
    if before and after:
        per_step = {task: [(after[task][i] - before[task][i]) / args.steps / 1e6 for i in (0, 1)]
                    for task in after}
        result["down_mb"] = sum(sent for task, (sent, _) in per_step.items()
                                if task.startswith("worker"))
        result["up_mb"] = sum(received for task, (_, received) in per_step.items()
                              if task.startswith("worker"))
        result["tasks_mb"] = per_step
    return result


def run_chief(args: argparse.Namespace) -> None:
    """Times each traffic on the cluster of TF_CONFIG: unshaped, then (in the lab) at each rate."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    counters, network = chief_counters()
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    num_ps = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["ps"])
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
        for rate in [None, *args.rates] if network else [None]:
            if network:
                network.shape(rate, args.delay if rate else 0.0)
            result = {"ps": num_ps, "traffic": traffic, "rate": rate,
                      **timed_steps(args, coordinator, step, iterator, counters)}
            print(RESULT + json.dumps(result), flush=True)
        if network:
            network.shape(None)


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
    print(RESULT + json.dumps({"ps": 0, "traffic": "-", "rate": None,
                               "samples_per_second": args.steps * args.batch / seconds,
                               "step_ms": 1e3 * seconds / args.steps}), flush=True)


def results_of(command: list[str], environ: dict[str, str], timeout: float) -> list[dict]:
    from tf_embedding import local_cluster  # pylint: disable=import-outside-toplevel
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                               env=local_cluster.child_environment(environ))
    if completed.returncode:
        sys.exit(f"{' '.join(command[:4])} failed:\n{completed.stderr[-5000:]}")
    return [json.loads(line[len(RESULT):]) for line in completed.stdout.splitlines()
            if line.startswith(RESULT)]


@contextlib.contextmanager
def chief_of(args: argparse.Namespace, chief: list[str], num_ps: int, workers: int
             ) -> Iterator[tuple[list[str], dict[str, str]]]:
    """A fresh cluster (loopback, or the lab's), yielding the chief's argv and environment."""
    from tf_embedding import local_cluster  # pylint: disable=import-outside-toplevel
    from netlab import cluster  # pylint: disable=import-outside-toplevel
    if not args.lab:
        with local_cluster.loopback_cluster(num_ps=num_ps, num_workers=workers) as spec:
            yield [sys.executable, *chief], {"TF_CONFIG": local_cluster.tf_config(spec, "chief", 0)}
        return
    with cluster.lab_cluster(num_ps, workers) as (network, spec):
        yield cluster.chief_command(network, chief), {
            "TF_CONFIG": local_cluster.tf_config(spec, "chief", 0),
            cluster.NETWORK_ENVIRON: network.description()}


def drive(args: argparse.Namespace, argv: list[str]) -> None:
    from netlab import cluster  # pylint: disable=import-outside-toplevel
    script = [os.path.abspath(__file__), *argv]
    with cluster.bounded(args.timeout):
        # The one-process step is the loopback table's reference; the lab's is the unshaped row.
        results = [] if args.lab else results_of(
            [sys.executable, *script, "--role", "one-process"], {}, args.timeout)
        for num_ps in args.num_ps:
            for workers in args.workers:
                with chief_of(args, script + ["--role", "chief"], num_ps, workers) as (
                        command, environ):
                    results += results_of(command, environ, args.timeout)
    print_results(args, results)


def print_results(args: argparse.Namespace, results: list[dict]) -> None:
    """The table of every run, the model's step time next to each shaped one; in the lab, each
    task's bytes."""
    workload = model.Workload(args.tables, args.vocabulary, args.dim, args.batch,
                              args.ids_per_sample)
    print(f"{args.tables} tables of {args.vocabulary:,} x {args.dim}, batch {args.batch}, "
          f"{args.ids_per_sample} uniform ids per sample and table, Adagrad, "
          f"{args.steps} timed steps, " + (f"lab links, delay {args.delay} ms" if args.lab
                                           else "loopback"))
    print("| PS tasks | traffic | samples/s | down MB/step | up MB/step | formula down / up | "
          "workers | Mbit/s | step ms | model ms | measured / model |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    compute = {(r["ps"], r["workers"], r["traffic"]): r["step_ms"] for r in results
               if r["ps"] and r["rate"] is None}
    for result in results:
        if result["ps"] == 0:
            print(f"| one process | - | {result['samples_per_second']:,.0f} | | | | | | "
                  f"{result['step_ms']:.0f} | | |")
            continue
        down, up = model.step_bytes(workload, result["traffic"], result["ps"])
        predicted = ""
        if result["rate"]:
            predicted = 1e3 * model.step_seconds(
                down, up, result["rate"], result["ps"], result["workers"], 4e-3 * args.delay,
                1e-3 * compute[result["ps"], result["workers"], result["traffic"]])
        print(f"| {result['ps']} | {result['traffic']} | {result['samples_per_second']:,.0f} | "
              f"{result.get('down_mb', float('nan')):.2f} | "
              f"{result.get('up_mb', float('nan')):.2f} | {down / 1e6:.2f} / {up / 1e6:.2f} | "
              f"{result['workers']} | {result['rate'] or '-'} | {result['step_ms']:.0f} | "
              + (f"{predicted:.0f} | {result['step_ms'] / predicted:.2f} |" if predicted
                 else "| |"))
    for result in results:
        if "tasks_mb" in result and result["rate"]:
            print(f"bytes per worker step, sent / received MB, {result['ps']} ps, "
                  f"{result['workers']} worker(s), {result['traffic']}, {result['rate']} Mbit/s: "
                  + ", ".join(f"{task} {sent:.2f} / {received:.2f}"
                              for task, (sent, received) in result["tasks_mb"].items()))


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
