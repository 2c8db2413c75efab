"""Parameter-server scale benchmark: samples/s and bytes per step of `TPUEmbedding` on clusters of
1, 2 and 4 PS tasks (1 or more workers), with the rows and the partial traffic, next to the same
step in one process; on loopback, or in the network lab on shaped links.

    .venv/bin/python tools/ps_benchmark.py                      # loopback, the defaults below
    .venv/bin/python tools/ps_benchmark.py --num-ps 2 --tables 8 --vocabulary 1000000
    sudo .venv/bin/python tools/ps_benchmark.py --lab --rates 50 200 --workers 1 2

On loopback every cluster is `tf_embedding.cluster.local_cluster.loopback_cluster` and the bytes are
the TCP payload through the PS and worker ports, read from `ss -ti` (Linux iproute2) before and
after the timed steps: "down" is worker -> PS (ids, gradients), "up" PS -> worker (rows, partial
activations); the chief's small dispatch messages are included. Every task shares the cores and
nothing crosses a wire, so samples/s measure the machinery, not a network.

With --lab (root on Linux, tools/netlab) every task runs in a network namespace of its own on a
link to a bridge, and each traffic is timed once on unshaped links (the step's compute) and once
per --rates rate, each link limited to that rate in both directions. Bytes are then the frames
on the workers' links (headers included), per worker step, and every task's own counts are
listed; "model ms" is the step time of the traffic model (tools/netlab/model.py) for the rate,
given the unshaped step time.

On loopback the chief also runs the same step in its own process (the tables on its CPU), and
times it in windows that alternate with the cluster's (`--repeats`): "x one process" is the
median of the paired windows' ratios, so that both sides of each ratio saw the same load of a
shared machine. This script re-runs itself as the chief (`--role chief`); bytes per step do not
depend on the machine.
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
    parser.add_argument("--placement", choices=["blocks", "tables"], default="blocks",
                        help="blocks: every table split over every PS task (the default "
                             "table_devices); tables: table i whole on PS task i %% tasks")
    parser.add_argument("--vocabulary", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--ids-per-sample", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (all workers)")
    parser.add_argument("--steps-per-function", type=int, nargs="+", default=[1],
                        help="training steps per scheduled function (one process: per call); "
                             "each count is timed")
    parser.add_argument("--task-threads", type=int, default=0,
                        help="on loopback: intra-op threads of every ps and worker task "
                             "(default: python -m tf_embedding.server's, cores / tasks)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lab", action="store_true",
                        help="run each cluster in the network lab (root, Linux: tools/netlab)")
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0],
                        help="with --lab: link rates to time, Mbit/s per link and direction")
    parser.add_argument("--delay", type=float, default=0.0,
                        help="with --lab: delay per link and direction, ms (needs netem)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds the whole run may take; then it stops and cleans up")
    parser.add_argument("--repeats", type=int, default=3,
                        help="on loopback: timed windows of each cluster row, each paired with "
                             "a window of the one-process step; the medians are printed")
    parser.add_argument("--role", choices=["driver", "chief"], default="driver",
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


def make_step(embedding: Any, strategy: Any, steps_per_function: int) -> Any:
    """`steps_per_function` training steps (enqueue, dequeue, apply_gradients) one after the
    other in one tf.function of an iterator, unrolled: a loop op in a function whose ops span
    tasks would add its own messages per iteration."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def replica_step():
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = tf.add_n([tf.reduce_sum(a * a) for a in activations.values()])
        embedding.apply_gradients(tape.gradient(loss, activations))
        return loss

    @tf.function
    def steps(iterator):
        losses = []
        for _ in range(steps_per_function):
            embedding.enqueue(next(iterator), training=True)
            losses.append(strategy.run(replica_step))
        return losses

    return steps


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
                counters: Callable[[], Counters | None], steps_per_function: int
                ) -> dict[str, Any]:
    """Samples/s, the step time of one worker and the bytes per worker step of about
    `args.steps` steps (whole functions of `steps_per_function`) spread over the workers."""
    functions = max(1, args.steps // steps_per_function)
    num_steps = functions * steps_per_function
    before, start = counters(), time.perf_counter()
    for _ in range(functions):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    seconds, after = time.perf_counter() - start, counters()
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    result = {"workers": workers, "steps_per_function": steps_per_function,
              "samples_per_second": num_steps * args.batch / seconds,
              "step_ms": 1e3 * seconds * workers / num_steps}
    if before and after:
        per_step = {task: [(after[task][i] - before[task][i]) / num_steps / 1e6 for i in (0, 1)]
                    for task in after}
        result["down_mb"] = sum(sent for task, (sent, _) in per_step.items()
                                if task.startswith("worker"))
        result["up_mb"] = sum(received for task, (_, received) in per_step.items()
                              if task.startswith("worker"))
        result["tasks_mb"] = per_step
    return result


class OneProcess:
    """The same step in the chief's own process (tables on its CPU, outside the cluster's
    strategy), timed in windows that alternate with the cluster's, so that both see the same
    load of a shared machine."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._embedding, features = make_embedding(args)
        self._iterator = iter(make_dataset(args, features))
        self._steps: dict[int, Any] = {}

    def samples_per_second(self, steps_per_function: int) -> float:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        args = self._args
        if steps_per_function not in self._steps:
            self._steps[steps_per_function] = make_step(
                self._embedding, tf.distribute.get_strategy(), steps_per_function)
            for _ in range(max(1, args.warmup // steps_per_function)):
                self._steps[steps_per_function](self._iterator)
        step = self._steps[steps_per_function]
        functions = max(1, args.steps // steps_per_function)
        start = time.perf_counter()
        for _ in range(functions):
            losses = step(self._iterator)
        losses[-1].numpy()
        return functions * steps_per_function * args.batch / (time.perf_counter() - start)


def paired_windows(args: argparse.Namespace, one_process: OneProcess,
                   cluster_window: Callable[[], dict[str, Any]], steps_per_function: int
                   ) -> dict[str, Any]:
    """`args.repeats` windows of the one-process step and the cluster's, alternating: the
    cluster's median window, with the one-process median and the median of the windows'
    ratios."""
    windows = []
    for _ in range(args.repeats):
        alone = one_process.samples_per_second(steps_per_function)
        windows.append((cluster_window(), alone))
    ratios = sorted(result["samples_per_second"] / alone for result, alone in windows)
    windows.sort(key=lambda window: window[0]["samples_per_second"])
    median = windows[len(windows) // 2]
    return {**median[0], "one_process": sorted(alone for _, alone in windows)[len(windows) // 2],
            "ratio": ratios[len(ratios) // 2], "ratios": ratios}


def run_chief(args: argparse.Namespace) -> None:
    """Times each traffic on the cluster of TF_CONFIG: on loopback paired with the same step in
    this process; in the lab unshaped, then at each rate."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding.sharded import parameter_server  # pylint: disable=import-outside-toplevel
    counters, network = chief_counters()
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    num_ps = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["ps"])
    one_process = None if network else OneProcess(args)
    ps = parameter_server.ps_devices(strategy)
    placed = ({f"table_{i}": [ps[i % num_ps]] for i in range(args.tables)}
              if args.placement == "tables" else None)
    for traffic in args.traffic:
        with strategy.scope():
            embedding, features = make_embedding(
                args, traffic={f"table_{i}": traffic for i in range(args.tables)},
                table_devices=placed)
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda features=features: make_dataset(args, features)))
        for steps_per_function in args.steps_per_function:
            step = make_step(embedding, strategy, steps_per_function)
            for _ in range(max(1, args.warmup // steps_per_function)):
                coordinator.schedule(step, args=(iterator,))
            coordinator.join()

            def window(step=step, steps_per_function=steps_per_function):
                return timed_steps(args, coordinator, step, iterator, counters,
                                   steps_per_function)

            for rate in [None, *args.rates] if network else [None]:
                if network:
                    network.shape(rate, args.delay if rate else 0.0)
                measured = (window() if one_process is None else
                            paired_windows(args, one_process, window, steps_per_function))
                print(RESULT + json.dumps({"ps": num_ps, "traffic": traffic, "rate": rate,
                                           **measured}), flush=True)
            if network:
                network.shape(None)


def results_of(command: list[str], environ: dict[str, str], timeout: float) -> list[dict]:
    from tf_embedding.cluster import local_cluster  # pylint: disable=import-outside-toplevel
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
    from tf_embedding.cluster import local_cluster  # pylint: disable=import-outside-toplevel
    from netlab import cluster  # pylint: disable=import-outside-toplevel
    if not args.lab:
        threads = ("--intra-op-threads", str(args.task_threads)) if args.task_threads else ()
        with local_cluster.loopback_cluster(
                num_ps=num_ps, num_workers=workers,
                command=lambda *_: (*local_cluster.SERVER, *threads)) as spec:
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
        results = []
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
                                           else "loopback")
          + (", each table whole on one PS task" if args.placement == "tables" else ""))
    print("| PS tasks | traffic | samples/s | down MB/step | up MB/step | formula down / up | "
          "workers | Mbit/s | step ms | model ms | measured / model | steps/function | "
          "x one process |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    compute = {(r["ps"], r["workers"], r["traffic"], r["steps_per_function"]): r["step_ms"]
               for r in results if r["rate"] is None}
    for steps in args.steps_per_function:
        alone = sorted(r["one_process"] for r in results
                       if "one_process" in r and r["steps_per_function"] == steps)
        if alone:
            print(f"| one process | - | {alone[len(alone) // 2]:,.0f} | | | | | | "
                  f"{1e3 * args.batch / alone[len(alone) // 2]:.1f} | | | {steps} | 1.00 |")
    for result in results:
        steps = result["steps_per_function"]
        ratio = f"{result['ratio']:.2f}" if "ratio" in result else ""
        # A whole table on one task moves what one PS task's blocks would.
        down, up = model.step_bytes(workload, result["traffic"],
                                    1 if args.placement == "tables" else result["ps"])
        predicted = ""
        if result["rate"]:
            tasks = (model.whole_table_tasks(args.tables, result["ps"])
                     if args.placement == "tables" else None)
            predicted = 1e3 * model.step_seconds(
                down, up, result["rate"], tasks or result["ps"], result["workers"],
                4e-3 * args.delay,
                1e-3 * compute[result["ps"], result["workers"], result["traffic"], steps],
                independent_tasks=tasks or 1)
        print(f"| {result['ps']} | {result['traffic']} | {result['samples_per_second']:,.0f} | "
              f"{result.get('down_mb', float('nan')):.2f} | "
              f"{result.get('up_mb', float('nan')):.2f} | {down / 1e6:.2f} / {up / 1e6:.2f} | "
              f"{result['workers']} | {result['rate'] or '-'} | {result['step_ms']:.1f} | "
              + (f"{predicted:.0f} | {result['step_ms'] / predicted:.2f} |" if predicted
                 else "| |") + f" {steps} | {ratio} |")
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
    else:
        drive(args, argv)


if __name__ == "__main__":
    main()
