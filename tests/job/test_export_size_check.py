"""The job's export refuses tables that would not fit the exporting machine, naming the table
and the sizes, before it reads any of them."""

import pytest

import tf_embedding
from tf_embedding.job import export

pytestmark = pytest.mark.unit


def feature_config():
    users = tf_embedding.TableConfig(vocabulary_size=1_000_000, dim=64, name="users")
    items = tf_embedding.TableConfig(vocabulary_size=500_000, dim=32, name="items")
    return {"user": tf_embedding.FeatureConfig(users), "item": tf_embedding.FeatureConfig(items),
            "clicked": tf_embedding.FeatureConfig(items)}


def test_tables_that_fit_pass():
    export.check_tables_fit(feature_config(), 256_000_000 + 64_000_000)


@pytest.mark.parametrize("available, message", [
    (200_000_000, r"Table 'users' is 0.24 GiB \(1000000 x 64 float32\), which brings the "
                  r"exported tables to 0.24 GiB, more than the 0.19 GiB"),
    (300_000_000, r"Table 'items' is 0.06 GiB \(500000 x 32 float32\), which brings the "
                  r"exported tables to 0.30 GiB"),
])
def test_tables_that_do_not_fit_are_refused_by_name(available, message):
    with pytest.raises(ValueError, match=message):
        export.check_tables_fit(feature_config(), available)
