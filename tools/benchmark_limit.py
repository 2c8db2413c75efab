"""The native limit of tools/benchmark.py: builds and runs tools/native_limit/native_limit.cc.

The program times, on the benchmark's own ids, what plain C++ does on this machine: the
gather-sum of the forward phase, the gather-sum + deduplicated exact Adagrad step of the train
phase (fused per table, and in the order of an API's step), both again reading the ids as a
SparseTensor holds them (indices and values; SPARSE_INPUT_PHASES), and STREAM-style read and
read-modify-write bandwidth (its header comment has the details). benchmark.py gives every
forward and train row as a share of it.

The binary is compiled on first use with -march=native (capped as TF_EMBEDDING_SIMD caps the op
library) and kept under build/native_limit/, named by a hash of what it depends on (source,
flags, compiler, CPU), so an edit or another machine compiles anew and an unchanged checkout
does not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from typing import Any, Sequence

TOOLS = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(TOOLS, "native_limit", "native_limit.cc")
BUILD_DIR = os.path.join(os.path.dirname(TOOLS), "build", "native_limit")
# -fno-math-errno: without it GCC keeps a scalar sqrt with an errno branch in the Adagrad rule
# (as for the op library, docs/archive/benchmark_runs.md, "Where the time went").
FLAGS = ("-std=c++17", "-O3", "-march=native", "-fno-math-errno", "-fopenmp")
# TF_EMBEDDING_SIMD caps the op library's vector ISA (cc/core/simd_dispatch.cc); the limit is
# compiled under the same cap, so a capped run on a wider CPU compares code of one ISA, as on a
# CPU without the wider vectors (baseline: no AVX at all, though SSE4 and BMI may stay). Any other
# value leaves the library at the widest ISA, as here.
ISA_CAP_FLAGS = {"avx2": ("-mno-avx512f",), "baseline": ("-mno-avx",)}
# Lookups ahead that the gather and the update prefetch; 0 is no prefetching.
PREFETCH_DISTANCES = (0, 8, 16, 32, 64)


# The limit phase each benchmark phase's rows are a share of: a serving lookup's is the forward
# gather-sum; a training step's is the train step in API order (every lookup before any update,
# as a model between them imposes). The fused train step (each table updated right after its own
# gather, its rows still cached) is reported next to it (FUSED_TRAIN_PHASE).
LIMIT_PHASES = {"forward": "forward", "serve": "forward", "train": "train_in_api_order"}
FUSED_TRAIN_PHASE = "train"
# The limit phase of the same work reading the input as a rank-2 SparseTensor holds it: each
# lookup's sample from the indices, its id from the values (the plain phases read the ids only).
SPARSE_INPUT_PHASES = {"forward": "forward_sparse",
                       "train_in_api_order": "train_sparse_in_api_order"}


def compared_phases(phase: str) -> list[str]:
    """The limit phases a row of benchmark phase `phase` is a share of: its LIMIT_PHASES entry,
    and for a training row the fused train step too."""
    return [LIMIT_PHASES[phase]] + ([FUSED_TRAIN_PHASE] if phase == "train" else [])


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase at one thread count: the median step time at its fastest prefetch distance."""

    seconds: float
    best_prefetch: int
    seconds_by_prefetch: dict[int, float]


@dataclasses.dataclass(frozen=True)
class Limit:
    """The native limit at one thread count."""

    threads: int
    forward: Phase
    train: Phase
    train_in_api_order: Phase
    forward_sparse: Phase
    train_sparse_in_api_order: Phase
    read_bytes_per_second: float
    rmw_bytes_per_second: float

    def phase(self, name: str) -> Phase:
        """A limit phase: "forward", "train" (fused), "train_in_api_order", or one of
        SPARSE_INPUT_PHASES' values."""
        return {"forward": self.forward, "train": self.train,
                "train_in_api_order": self.train_in_api_order,
                "forward_sparse": self.forward_sparse,
                "train_sparse_in_api_order": self.train_sparse_in_api_order}[name]


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of the program on one distribution's ids."""

    isa: str
    huge_page_bytes: int
    table_bytes: int
    limits: dict[int, Limit]

    @classmethod
    def parse(cls, output: dict[str, Any]) -> Run:
        def phase(p: dict[str, Any]) -> Phase:
            return Phase(p["seconds"], p["best_prefetch"],
                         {int(k): v for k, v in p["seconds_by_prefetch"].items()})

        limits = {r["threads"]: Limit(r["threads"], phase(r["forward"]), phase(r["train"]),
                                      phase(r["train_in_api_order"]),
                                      phase(r["forward_sparse"]),
                                      phase(r["train_sparse_in_api_order"]),
                                      r["read_bytes_per_second"], r["rmw_bytes_per_second"])
                  for r in output["results"]}
        return cls(output["isa"], output["huge_page_bytes"], output["table_bytes"], limits)


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


def _flags() -> tuple[str, ...]:
    return FLAGS + ISA_CAP_FLAGS.get(os.environ.get("TF_EMBEDDING_SIMD", ""), ())


def _build_key() -> str:
    digest = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        digest.update(f.read())
    digest.update(" ".join(_flags()).encode())
    digest.update(subprocess.run([_compiler(), "--version"], capture_output=True,
                                 check=True).stdout)
    with open("/proc/cpuinfo") as f:
        # -march=native: the first CPU's model and flags decide the code.
        digest.update("".join(line for line in f.read().split("\n\n")[0].splitlines(True)
                              if line.startswith(("model name", "flags"))).encode())
    return digest.hexdigest()[:16]


def build() -> str:
    """The program's path, compiling it first unless this source, compiler and CPU built it."""
    path = os.path.join(BUILD_DIR, f"native_limit-{_build_key()}")
    if not os.path.exists(path):
        os.makedirs(BUILD_DIR, exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        result = subprocess.run([_compiler(), *_flags(), SOURCE, "-o", partial],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE} failed:\n{result.stderr}")
        # Atomic, so a concurrent run never executes a half-written binary.
        os.replace(partial, path)
    return path


def command_line() -> str:
    return f"{_compiler()} {' '.join(_flags())}"


def _command(ids_path: str, vocab: int, dim: int, threads: Sequence[int], steps: int,
             warmup: int, learning_rate: float, initial_accumulator: float,
             prefetch: Sequence[int]) -> list[str]:
    return [build(), "--ids", ids_path, "--vocab", str(vocab), "--dim", str(dim),
            "--threads", ",".join(map(str, threads)),
            "--prefetch", ",".join(map(str, prefetch)),
            "--steps", str(steps), "--warmup", str(warmup),
            "--learning-rate", str(learning_rate),
            "--initial-accumulator", str(initial_accumulator)]


def run(ids_path: str, vocab: int, dim: int, threads: Sequence[int], steps: int, warmup: int,
        learning_rate: float, initial_accumulator: float, timeout: float,
        prefetch: Sequence[int] = PREFETCH_DISTANCES) -> Run:
    """Runs the program on the ids in `ids_path` (int64 [batches, tables, batch, per_sample]),
    timing each phase at every distance of `prefetch`."""
    command = _command(ids_path, vocab, dim, threads, steps, warmup, learning_rate,
                       initial_accumulator, prefetch)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    return Run.parse(json.loads(result.stdout))


class Rounds:
    """The program kept running, timing its phases once per `next_run()`: a caller alternating
    its own timings with the limit's compares the two at the same moments, on tables allocated
    (and given their 2 MiB pages) once. The program inherits the caller's CPU affinity. Arguments
    as `run`'s; use as a context manager."""

    def __init__(self, ids_path: str, vocab: int, dim: int, threads: Sequence[int], steps: int,
                 warmup: int, learning_rate: float, initial_accumulator: float,
                 prefetch: Sequence[int]):
        self._command = _command(ids_path, vocab, dim, threads, steps, warmup, learning_rate,
                                 initial_accumulator, prefetch) + ["--rounds-on-stdin", "1"]
        self._process = subprocess.Popen(self._command, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)

    def next_run(self) -> Run:
        """Times every phase once more; blocks until done."""
        self._process.stdin.write("\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"{' '.join(self._command)} failed:\n"
                               f"{self._process.stderr.read()}")
        return Run.parse(json.loads(line))

    def __enter__(self) -> Rounds:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._process.stdin.close()
        self._process.wait()
        self._process.stdout.close()
        self._process.stderr.close()
