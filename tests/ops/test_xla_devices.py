"""Which XLA devices the ops compile for: XLA's CPU device only (cc/xla/registration.cc), in
either order of loading the op library and TensorFlow making its XLA kernels. On another XLA
device (XLA_GPU_JIT) an op has no kernel, and TensorFlow fails the compiled function when it
compiles it, naming the op and the device: the failure the last test shows on the CPU device
with the one op that has no XLA kernel at all (docs/xla.md)."""

import re

import pytest
import tensorflow as tf

from helpers.processes import fresh_process_output
from tf_embedding import ops

pytestmark = pytest.mark.integration

# The ops without an XLA kernel on any device: TfeCsrDedup's output size depends on the ids,
# TfeSyntheticFeature's on the lengths it draws and TfeDecodeTsv's on the lines it reads (both
# run in the job's tf.data pipeline); TfeCheckQueueSizes checks the engine's queues, which
# compiled functions do not use; TfeFeaturesCheck runs only in a MultiWorkerMirroredStrategy
# step, whose collectives XLA cannot compile either; TfeAssignRows and TfeRestoreRows make a block
# when it is created, outside any step; the dynamic index's ops are stateful resource ops whose
# outputs' sizes depend on the keys, and TfeResetRows resets the rows they give (a dynamic
# table's step is not compiled).
WITHOUT_XLA_KERNEL = {"TfeCsrDedup", "TfeCheckQueueSizes", "TfeSyntheticFeature", "TfeDecodeTsv",
                      "TfeFeaturesCheck", "TfeAssignRows", "TfeRestoreRows", "TfeResetRows",
                      "TfeDynamicIndex",
                      "TfeDynamicLookup", "TfeDynamicIndexExport", "TfeDynamicIndexStats",
                      "TfeDynamicIndexImport", "TfeDynamicIndexImportPlaced",
                      "TfeDropMissingLookups"}

# Prints, per tf_embedding op, the devices of its kernels, after loading the op library (an
# eager lookup) and compiling a function, in the order ORDER (defined before it) gives.
_DEVICES_SCRIPT = """
import tensorflow as tf
from tensorflow.python.framework import kernels
from tf_embedding import ops

def load_library():
    ops.embedding_lookup_dense(
        tf.zeros([2, 1]), tf.constant([0, 1], tf.int64), tf.constant([0], tf.int64),
        tf.constant([1.0]))

def compile_a_function():
    tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))

steps = [load_library, compile_a_function]
for step in (steps if ORDER == "library-first" else reversed(steps)):
    step()
devices = {}
for kernel in kernels.get_all_registered_kernels().kernel:
    if kernel.op.startswith("Tfe"):
        devices.setdefault(kernel.op, set()).add(kernel.device_type)
for op in sorted(devices):
    print(op, *sorted(devices[op]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", ["library-first", "xla-first"])
def test_the_ops_compile_for_the_xla_cpu_device_only(order):
    output = fresh_process_output(f"ORDER = {order!r}\n" + _DEVICES_SCRIPT)
    devices = {op: set(types) for op, *types in (line.split() for line in output.splitlines())}
    xla_devices = {op: {d for d in types if d.startswith("XLA_")} for op, types in devices.items()}
    assert {"TfeEmbeddingLookup", "TfeEmbeddingLookupDense", "TfeEmbeddingGradient",
            "TfeFeaturesToCsr", "TfeFeaturesLookup", "TfeFeatureOutputs", "TfeSparseApplyAdam",
            "TfeSparseApplyAdamRows"} | WITHOUT_XLA_KERNEL <= set(devices)
    for op, types in xla_devices.items():
        assert "CPU" in devices[op], op
        assert types == (set() if op in WITHOUT_XLA_KERNEL else {"XLA_CPU_JIT"}), op


def test_an_op_without_a_kernel_for_the_device_fails_the_compilation_naming_it():
    @tf.function(jit_compile=True)
    def deduplicate(ids):
        return ops.dedup(ids, num_shards=1, table_name="t").unique_ids

    message = ("Detected unsupported operations when trying to compile graph .* on XLA_CPU_JIT: "
               + re.escape("TfeCsrDedup (No registered 'TfeCsrDedup' OpKernel for XLA_CPU_JIT "
                           "devices"))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        deduplicate(tf.constant([3, 1, 3], tf.int64))
