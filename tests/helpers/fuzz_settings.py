"""The hypothesis settings of the op-level fuzz tests (tests/test_fuzz_*.py): each file's
example count for the default suite, or TF_EMBEDDING_FUZZ_EXAMPLES examples for every property,
which `tools/asan_fuzz.sh --long` sets to 10,000 (docs/reliability.md records the runs)."""

import os

from hypothesis import HealthCheck, settings


def fuzz_settings(default_examples: int) -> settings:
    examples = int(os.environ.get("TF_EMBEDDING_FUZZ_EXAMPLES", default_examples))
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
