"""`python tools/netlab COMMAND`: the network lab's commands (root on Linux).

    sudo .venv/bin/python tools/netlab train --num-ps 2 --rate 200 -- --steps 50 --batch-size 1024
    sudo .venv/bin/python tools/netlab cleanup

`train` runs `tf-embedding train ARGS` as the chief of a lab cluster (`python -m
tf_embedding.server` tasks, each in its own namespace on a link shaped to --rate) and prints the
job's own examples/s and each task's bytes per step on its link over the whole run (start-up,
evaluation and export included). `cleanup` removes what a lab killed with SIGKILL left behind.
The PS benchmark, with the traffic model's step time, is `tools/ps_benchmark.py --lab`.
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from netlab import cluster, links  # pylint: disable=wrong-import-position

PROGRESS = re.compile(r"step (\d+)/\d+ .*?([\d.]+k) ex/s")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python tools/netlab",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="tf-embedding train as the chief of a lab cluster")
    train.add_argument("--num-ps", type=int, default=2)
    train.add_argument("--workers", type=int, default=1)
    train.add_argument("--rate", type=float, default=200.0,
                       help="Mbit/s per link and direction (0: unshaped)")
    train.add_argument("--delay", type=float, default=0.0,
                       help="ms per link and direction (needs netem in the kernel)")
    train.add_argument("--timeout", type=float, default=1800.0,
                       help="seconds the run may take; then it stops and cleans up")
    train.add_argument("train_args", nargs=argparse.REMAINDER,
                       help="-- then the arguments of tf-embedding train")
    commands.add_parser("cleanup", help="remove every namespace a lab left behind (and those "
                                        "of any lab running now)")
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> int:
    from tf_embedding.cluster import local_cluster  # pylint: disable=import-outside-toplevel
    train_args = [arg for arg in args.train_args if arg != "--"]
    with cluster.bounded(args.timeout), cluster.lab_cluster(args.num_ps, args.workers) as (
            network, spec):
        network.shape(args.rate or None, args.delay)
        before = network.counters()
        completed = subprocess.run(
            cluster.chief_command(network, ["-m", "tf_embedding", "train", "--progress", "lines",
                                            *train_args]),
            capture_output=True, text=True, timeout=args.timeout,
            env=local_cluster.child_environment(
                {"TF_CONFIG": local_cluster.tf_config(spec, "chief", 0),
                 cluster.NETWORK_ENVIRON: network.description()}))
        after = network.counters()
    sys.stdout.write(completed.stdout)
    if completed.returncode:
        sys.stderr.write(completed.stderr[-5000:])
        print(f"tf-embedding train failed with status {completed.returncode}", file=sys.stderr)
        return completed.returncode
    progress = PROGRESS.findall(completed.stdout)
    if not progress:
        print("no progress line with examples/s in the job's output", file=sys.stderr)
        return 1
    steps, rate = progress[-1]
    print(f"lab: {args.num_ps} ps, {args.workers} worker(s), "
          f"{args.rate or 'unshaped'} Mbit/s links, delay {args.delay} ms: {rate} examples/s "
          f"(the job's own figure); bytes per step over the whole run, sent / received MB: "
          + ", ".join(f"{task} {(after[task][0] - before[task][0]) / int(steps) / 1e6:.2f} / "
                      f"{(after[task][1] - before[task][1]) / int(steps) / 1e6:.2f}"
                      for task in after))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "cleanup":
        removed = links.remove_leftovers()
        print(f"removed {len(removed)} namespace(s): {' '.join(removed) or '-'}")
        return 0
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
