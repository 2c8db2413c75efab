"""TPUEmbedding on a loopback MultiWorkerMirroredStrategy cluster trains the bits of one process:
the same global batch split over 2 (4: slow tier) workers gives every worker's activations and
every table and slot after K steps bit-identical to one process running the global batch, for
every optimizer, sparse / ragged / mixed inputs with weights, every combiner, sequence features,
a table shared by features, a table with fewer rows than workers, 'div' and 'mod', rows looked
up at enqueue time (pipelining), TF's documented program without an explicit build (the
first enqueue builds; a distributed dataset's batch dimension is unknown there), and a
`ShardingPlan` with whole tables on one worker beside row-wise ones."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import multi_worker
from helpers.multi_worker_training import train, whole_tables
from helpers.sharded_training import OPTIMIZERS

pytestmark = pytest.mark.cluster

KINDS = ("sparse", "ragged", "mixed")
STEPS = 3


def cases_for(num_workers: int) -> list[str]:
    """Every optimizer, each input kind twice over the optimizers, both partition strategies."""
    return [f"{name}:{KINDS[index % len(KINDS)]}:{('div', 'mod')[index % 2]}:{STEPS}"
            for index, name in enumerate(OPTIMIZERS)] + (
        [f"adagrad:{kind}:div:{STEPS}" for kind in KINDS[1:]]
        + [f"adam:sparse:mod:{STEPS}:pipelined"]
        # TF's documented TPU program: no build, the first enqueue's batch dimension unknown.
        + [f"adagrad:{kind}:div:{STEPS}:unbuilt" for kind in KINDS]
        + [f"sgd:sparse:mod:{STEPS}:pipelined:unbuilt"]
        # A ShardingPlan mixing table-wise and row-wise tables.
        + [f"adagrad:ragged:mod:{STEPS}:plan", f"adam:mixed:div:{STEPS}:plan:pipelined",
           f"ftrl:sparse:div:{STEPS}:plan:unbuilt"] if num_workers == 2 else [])


def one_process(case: str) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The case's tables and activations, trained in this process on the whole global batch."""
    embedding, activations = train(tf.distribute.get_strategy(), case)
    return whole_tables(embedding), activations


def check_bit_identical(num_workers: int, tmp_path) -> None:
    cases = cases_for(num_workers)
    multi_worker.assert_succeeded(multi_worker.run_workers(
        num_workers, [multi_worker.script("mw_training.py"), str(tmp_path), *cases]))
    for case in cases:
        name = case.replace(":", "_")
        tables, activations = one_process(case)
        saved = np.load(tmp_path / f"{name}.npz")
        assert sorted(saved.files) == sorted(tables)
        for key, expected in tables.items():
            np.testing.assert_array_equal(saved[key], expected, err_msg=f"{case} {key}")
        for rank in range(num_workers):
            worker = np.load(tmp_path / f"{name}.rank{rank}.npz")
            for step, step_activations in enumerate(activations):
                for feature, expected in step_activations.items():
                    per_worker = expected.shape[0] // num_workers
                    np.testing.assert_array_equal(
                        worker[f"{step}/{feature}"],
                        expected[rank * per_worker:(rank + 1) * per_worker],
                        err_msg=f"{case} rank {rank} step {step} {feature}")


def test_two_workers_train_the_bits_of_one_process(tmp_path):
    check_bit_identical(2, tmp_path)


@pytest.mark.slow
def test_four_workers_train_the_bits_of_one_process(tmp_path):
    check_bit_identical(4, tmp_path)
