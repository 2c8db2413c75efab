"""Test-session setup shared by every test module, and the check that every test has a tier.

The host CPU is split into 4 logical devices before TensorFlow initialises, so tests can run
`tf.distribute.MirroredStrategy` over several CPU "devices" (as a multi-device host would) while
the default strategy keeps using /cpu:0.
"""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=wrong-import-position

NUM_LOGICAL_CPUS = 4

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)

# TFRS imports only under tf_keras: its differential tests run in the suite's tf_keras session
# (tools/run_tests.sh sets TF_USE_LEGACY_KERAS=1 for it), not in this Keras 3 one.
LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
collect_ignore = [] if LEGACY_KERAS else ["keras/test_tfrs_layer.py"]

TIERS = ("unit", "integration", "cluster")


def pytest_collection_modifyitems(items):
    """Refuses tests without a tier marker: the tiers (pyproject.toml) are how the suite is cut
    (tools/run_tests.sh --fast), so a test without one would silently fall out of a cut."""
    untiered = sorted({item.nodeid.split("::")[0] for item in items
                       if not any(item.get_closest_marker(tier) for tier in TIERS)})
    if untiered:
        raise pytest.UsageError(
            "tests without a tier marker (add `pytestmark = pytest.mark.unit`, `.integration` "
            "or `.cluster` to the module): " + ", ".join(untiered))
