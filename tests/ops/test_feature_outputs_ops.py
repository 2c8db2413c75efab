"""TfeFeatureOutputs: each feature's rows of a table's activations in the feature's output shape,
on the TF runtime and under XLA, and its errors."""

import numpy as np
import pytest
import tensorflow as tf

from tf_embedding import _loader
from tf_embedding import ops

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def lib():
    return _loader.load_ops()


def feature_outputs(activations, counts, shapes, partial=False, jit_compile=False):
    """TfeFeatureOutputs of table 'video' with the message 'Does not fit.'."""
    return tf.function(lambda a, c: ops.feature_outputs(a, c, shapes, partial, "Does not fit.",
                                                          "video"),
                       jit_compile=jit_compile)(activations, np.array(counts, np.int64))


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("dim", [3, 64])  # rows of 12 bytes: slices unaligned, so copied
def test_feature_outputs_are_each_features_rows_in_its_shape(dim, jit_compile):
    activations = np.arange(9 * dim, dtype=np.float32).reshape(9, dim)
    shapes = [[2, dim], [1, 4, dim], [3, dim]]
    outputs = feature_outputs(activations, [2, 4, 3], shapes, jit_compile=jit_compile)
    for output, rows, shape in zip(outputs, np.split(activations, [2, 6]), shapes):
        np.testing.assert_array_equal(output, rows.reshape(shape))
    # A smaller final batch: whole samples, each feature's first dimension its own.
    outputs = feature_outputs(activations[:5], [1, 4, 0], shapes, partial=True,
                              jit_compile=jit_compile)
    assert [list(output.shape) for output in outputs] == [[1, dim], [1, 4, dim], [0, dim]]
    np.testing.assert_array_equal(outputs[1], activations[1:5].reshape(1, 4, dim))


# (name, activations rows, counts, partial, message after "Table 'video': " or the message)
FEATURE_OUTPUTS_FAULTS = [
    ("short", 8, [2, 4, 2], False, r"Does not fit\. Rows per feature: \[2, 4, 2\]\."),
    ("part_of_a_sample", 8, [2, 3, 3], True, r"Does not fit\. Rows per feature: \[2, 3, 3\]\."),
    ("above_the_shape", 11, [2, 4, 5], True, r"Does not fit\. Rows per feature: \[2, 4, 5\]\."),
    ("count_list", 6, [2, 4], False,
     r"Table 'video': feature_row_counts has 2 entries for 3 features"),
    ("negative", 0, [2, -4, 2], True, r"Table 'video': feature_row_counts\[1\] = -4 is negative"),
    ("sum", 10, [2, 4, 3], False,
     r"Table 'video': the rows per feature \[2, 4, 3\] do not add up to the activations' 10 rows"),
]


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("rows,counts,partial,message",
                         [case[1:] for case in FEATURE_OUTPUTS_FAULTS],
                         ids=[case[0] for case in FEATURE_OUTPUTS_FAULTS])
def test_feature_outputs_reject_rows_that_do_not_fit(rows, counts, partial, message, jit_compile):
    """Compiled, the rows are known when compiling: the same errors, then."""
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        feature_outputs(np.zeros([rows, 3], np.float32), counts,
                        [[2, 3], [1, 4, 3], [3, 3]], partial, jit_compile)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_feature_outputs_reject_activations_of_another_shape(jit_compile):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': activations must be a matrix, got shape \[2\]"):
        feature_outputs(np.zeros([2], np.float32), [2], [[2, 1]], jit_compile=jit_compile)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': output shape 0 has 2 dimensions, the last of them "
                             r"not the activations' 4"):
        feature_outputs(np.zeros([2, 4], np.float32), [2], [[2, 3]], jit_compile=jit_compile)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_feature_outputs_reject_malformed_attrs_and_counts(lib, jit_compile):
    def call(counts, num_outputs, shapes):
        return tf.function(lambda a, c: lib.tfe_feature_outputs(
            activations=a, feature_row_counts=c, N=num_outputs, output_shapes=shapes,
            message="Does not fit.", table_name="video"), jit_compile=jit_compile)(
                np.zeros([2, 3], np.float32), np.array(counts, np.int64))

    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': feature_row_counts must be a vector, got shape "
                             r"\[1,1\]"):
        call([[2]], 1, [[2, 3]])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Table 'video': output shape \[\?,3\] is not fully defined"):
        call([2], 1, [[None, 3]])


@pytest.mark.parametrize("num_outputs,shapes", [(2, [[2, 3]]), (1, [[1, 3], [1, 3]])])
def test_feature_outputs_need_one_shape_per_output(lib, num_outputs, shapes):
    """Eagerly, where no shape function runs first, the kernel refuses them itself."""
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"Table 'video': output_shapes has {len(shapes)} shapes for "
                             f"{num_outputs} outputs"):
        lib.tfe_feature_outputs(
            activations=np.zeros([2, 3], np.float32), feature_row_counts=np.array([2], np.int64),
            N=num_outputs, output_shapes=shapes, message="Does not fit.", table_name="video")
