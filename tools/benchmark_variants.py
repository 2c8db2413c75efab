"""What tools/benchmark.py measures: every variant (`VARIANTS`), each one way to run a step.

A variant makes its variables from the shared `Context` and returns a `Setup`: a callable that runs
a step (or `--steps-per-call` steps) on precomputed batch `i`, the bytes of the variables it
holds, and a checksum with which the harness checks that the variants of one phase compute the
same thing (benchmark_registry.py). Adding a variant is one decorated function in the module of
its kind, e.g. for the sharded TPUEmbedding step:

    @variant("sharded-train", "train", "TPUEmbedding enqueue + dequeue + apply_gradients")
    def _sharded_train(ctx: Context) -> Setup:
        embedding = ...  # built, then ctx.workload.fill_tables(its tables)

        @tf.function
        def step(features):
            ...

        return ctx.train_setup(step, tables, variables)

The modules, imported here in the order the tables list their variants (baselines next to the
variants compared with them): benchmark_step_variants.py (stock TF's ops, the fused ops,
TPUEmbeddingV0, the sharded TPUEmbedding), benchmark_keras_variants.py (Keras optimizers and
layers, model.fit, keras-rs, TFRS), benchmark_serving_variants.py (serving lookups and exports),
benchmark_part_variants.py (the parts of ours-train, for --breakdown).

Phases: "forward" (CSR conversion + lookup), "train" (forward + backward + Adagrad), "serve" (the
forward pass of a serving lookup, stock ops only), and "part" (one piece of another variant's step,
for the per-phase breakdown). Ratios are taken against the
phase's `baseline` variant; `target` is the speed-up the issue asks of it.

TensorFlow is imported by the worker processes only (`benchmark_registry.import_tensorflow`), so
the orchestrator reads this registry without TensorFlow's start-up time and memory.
"""

import benchmark_registry
# Each registers its variants when imported.
import benchmark_step_variants  # pylint: disable=unused-import
import benchmark_keras_variants  # pylint: disable=unused-import
import benchmark_serving_variants  # pylint: disable=unused-import
import benchmark_part_variants  # pylint: disable=unused-import

# Every variant by name, in registration order.
VARIANTS = benchmark_registry.registered()
