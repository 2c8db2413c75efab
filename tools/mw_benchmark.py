"""Multi-worker scale benchmark: samples/s and bytes per step of `TPUEmbedding` trained
synchronously on 1, 2 and 4 MultiWorkerMirroredStrategy workers on this machine, next to the same
step in one process, with the traffic formula of docs/sharding_plans.md beside the measured bytes.

    .venv/bin/python tools/mw_benchmark.py                         # the defaults below
    .venv/bin/python tools/mw_benchmark.py --workers 2 --tables 8 --vocabulary 1000000
    sudo .venv/bin/python tools/mw_benchmark.py --lab --rates 50 200 --workers 2 4 \
        --tables 2 --vocabulary 100000 --batch 1024

Every worker trains its rows of each global batch of --batch samples (uniform ids, --ids-per-sample
per sample and table, one feature per table, Adagrad), in the program shape of a TPU step (enqueue
in the step function, dequeue and apply_gradients in `strategy.run`). All workers run in one private
network namespace (`tf_embedding.cluster.private_network`), so the loopback counters of that
namespace (/proc/net/dev, read by worker 0 before and after the timed steps) count their traffic and
nothing else: bytes per step per worker are those counters over steps and workers, IP and TCP
headers included. Every worker shares this machine's cores and nothing crosses a wire, so the
samples/s measure the machinery, not a network.

With --lab (root on Linux, tools/netlab) every worker runs in a network namespace of its own on
a link to a bridge; the step is timed on unshaped links (its compute and copies), then with every
link limited to each --rates rate in both directions, and the bytes are the frames each worker's
link sent, headers included. "model ms" is the unshaped step plus the formula's bytes over the
rate: the exchanges are phases one after the other, and in each phase every link carries its
worker's sends (and, the traffic being symmetric, as much received).

This script re-runs itself as each worker (`--role worker`, TF_CONFIG set) and as the one-process
run (`--role one-process`).
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import ps_benchmark

RESULT = "RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--vocabulary", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4096, help="the global batch")
    parser.add_argument("--ids-per-sample", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lab", action="store_true",
                        help="run each cluster in the network lab (root, Linux: tools/netlab)")
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0],
                        help="with --lab: link rates to time, Mbit/s per link and direction")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds each run may take")
    parser.add_argument("--role", choices=["driver", "worker", "one-process"], default="driver",
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def loopback_bytes() -> int:
    """Bytes sent over this network namespace's loopback so far (each packet counts once)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[8])  # transmitted bytes
    raise RuntimeError("no loopback interface in /proc/net/dev")


def step_bytes(args: argparse.Namespace, workers: int) -> float:
    """The traffic formula (tf_embedding/sharded/planning/traffic.py, docs/sharding_plans.md):
    payload bytes one worker sends per step with every table row-wise, for uniform ids."""
    from tf_embedding.sharded.planning import traffic  # pylint: disable=import-outside-toplevel
    if workers <= 1:  # one worker, or one process (0): nothing leaves the process
        return 0.0
    load = traffic.TableLoad(args.vocabulary, args.dim, args.batch / workers,
                             args.ids_per_sample)
    return args.tables * traffic.row_wise(load, workers).sent


def run_step(args: argparse.Namespace, strategy: Any, rank: int, workers: int) -> list[dict]:
    """Times the step on this worker's rows (samples/s of the global batch): once, or in the lab
    once unshaped and once per rate (worker 0 shapes the links between the windows; the workers
    run in lockstep)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with strategy.scope():
        embedding, features = ps_benchmark.make_embedding(args)
    per_worker = args.batch // workers
    embedding.build(per_replica_input_shapes={
        name: tf.TensorShape([per_worker, None]) for name in features})
    dataset = ps_benchmark.make_dataset(args, features).map(
        lambda batch: {name: ids[rank * per_worker:(rank + 1) * per_worker]
                       for name, ids in batch.items()})
    iterator = iter(dataset)
    step = ps_benchmark.make_step(embedding, strategy, steps_per_function=1)
    for _ in range(args.warmup):
        step(iterator)
    network = lab_network()
    results = []
    for rate in [None, *args.rates] if network else [None]:
        if network and rank == 0:
            network.shape(rate)
        before, start = sent_bytes(network, rank), time.perf_counter()
        for _ in range(args.steps):
            (loss,) = step(iterator)
        float(strategy.experimental_local_results(loss)[0])
        seconds, sent = time.perf_counter() - start, sent_bytes(network, rank) - before
        results.append({"workers": workers, "rate": rate,
                        "samples_per_second": args.steps * args.batch / seconds,
                        "step_ms": 1e3 * seconds / args.steps,
                        "mb_per_worker_step": sent / args.steps / max(workers, 1) / 1e6})
    if network and rank == 0:
        network.shape(None)
    return results


def lab_network() -> Any:
    """The lab's network this worker runs in (--lab), else None."""
    from netlab import cluster, links  # pylint: disable=import-outside-toplevel
    description = os.environ.get(cluster.NETWORK_ENVIRON)
    return links.Network.from_description(description) if description else None


def sent_bytes(network: Any, rank: int) -> int:
    """Bytes the workers sent so far: every worker link's frames in the lab (read by worker 0;
    0 elsewhere), else the loopback counters of the private namespace they share."""
    if network is None:
        return loopback_bytes()
    return sum(sent for sent, _ in network.counters().values()) if rank == 0 else 0


def run_worker(args: argparse.Namespace) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf_embedding.sharded.multi_worker.group import group_of  # pylint: disable=C0415
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = group_of(strategy)
    results = run_step(args, strategy, workers.rank, workers.size)
    if workers.rank == 0:
        for result in results:
            print(RESULT + json.dumps(result), flush=True)


def run_one_process(args: argparse.Namespace) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    (result,) = run_step(args, tf.distribute.get_strategy(), 0, 1)
    print(RESULT + json.dumps({**result, "workers": 0, "mb_per_worker_step": 0.0}), flush=True)


def run_cluster(args: argparse.Namespace, script: list[str], workers: int) -> list[dict]:
    """Runs `workers` workers of `script` in a fresh private network (or lab); worker 0's
    results."""
    from tf_embedding.cluster import local_cluster  # pylint: disable=import-outside-toplevel
    from tf_embedding.cluster.private_network import PrivateNetwork  # pylint: disable=C0415
    from netlab import cluster, links  # pylint: disable=import-outside-toplevel
    if args.lab:
        network = links.Network([f"worker{index}" for index in range(workers)])
        addresses = [f"{link.address}:{cluster.PORT}" for link in network.links.values()]
        context: Any = contextlib.ExitStack()
        context.callback(network.remove)
        network.create()
    else:
        network = PrivateNetwork.create()
        addresses = [f"127.0.0.1:{port}" for port in local_cluster.free_ports(workers)]
        context = network
    with context:
        spec = {"worker": addresses}
        processes = []
        for index in range(workers):
            environ = {"TF_CONFIG": local_cluster.tf_config(spec, "worker", index)}
            if args.lab:
                environ[cluster.NETWORK_ENVIRON] = network.description()
                argv = cluster.in_namespace(network, f"worker{index}", script)
                processes.append(local_cluster.start_process(
                    argv, environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            else:
                processes.append(local_cluster.start_process(
                    script, environ, network, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True))
        outputs = []
        try:
            for process in processes:
                outputs.append(process.communicate(timeout=args.timeout))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    for process, (_, stderr) in zip(processes, outputs):
        if process.returncode:
            sys.exit(f"a worker failed:\n{stderr[-5000:]}")
    return [json.loads(line[len(RESULT):]) for line in outputs[0][0].splitlines()
            if line.startswith(RESULT)]


def drive(args: argparse.Namespace, argv: list[str]) -> None:
    script = [os.path.abspath(__file__), *argv]
    results = ps_benchmark.results_of([sys.executable, *script, "--role", "one-process"], {},
                                      args.timeout)
    for workers in args.workers:
        results += run_cluster(args, [*script, "--role", "worker"], workers)
    print_results(args, results)


def print_results(args: argparse.Namespace, results: list[dict]) -> None:
    one_process = results[0]["samples_per_second"]
    where = "lab links" if args.lab else "loopback in a private network namespace"
    print(f"{args.tables} tables of {args.vocabulary:,} x {args.dim}, global batch {args.batch}, "
          f"{args.ids_per_sample} uniform ids per sample and table, Adagrad, "
          f"{args.steps} timed steps, {where}")
    print("| workers | Mbit/s | samples/s | vs one process | step ms | model ms | "
          "MB sent per worker and step | formula MB | measured / formula |")
    print("|---|---|---|---|---|---|---|---|---|")
    unshaped = {result["workers"]: result["step_ms"] for result in results
                if result.get("rate") is None}
    for result in results:
        workers, rate = result["workers"], result.get("rate")
        formula = step_bytes(args, workers) / 1e6
        ratio = f"{result['mb_per_worker_step'] / formula:.2f}" if formula else ""
        model = f"{unshaped[workers] + 8e3 * formula / rate:.0f}" if rate else ""
        print(f"| {workers or 'one process'} | {rate or '-'} | "
              f"{result['samples_per_second']:,.0f} | "
              f"{result['samples_per_second'] / one_process:.2f}x | {result['step_ms']:.0f} | "
              f"{model} | {result['mb_per_worker_step']:.2f} | {formula:.2f} | {ratio} |")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.role == "worker":
        run_worker(args)
    elif args.role == "one-process":
        run_one_process(args)
    else:
        drive(args, argv)


if __name__ == "__main__":
    main()
