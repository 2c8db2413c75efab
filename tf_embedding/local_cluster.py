"""Deprecated alias of `tf_embedding.cluster.local_cluster` (loopback clusters of task processes),
where this module moved in 0.2.0: import that module instead. Importing this one warns
(`DeprecationWarning`) and gives that module's names, the same objects; it will be removed in a
later release (CHANGELOG.md)."""

import warnings as _warnings

# pylint: disable=wildcard-import,unused-wildcard-import
from tf_embedding.cluster import local_cluster as _moved
from tf_embedding.cluster.local_cluster import *  # noqa: F401,F403

# stacklevel 2 names the importing code: warnings skips the import machinery's frames.
_warnings.warn("tf_embedding.local_cluster is deprecated: import "
               "tf_embedding.cluster.local_cluster instead (moved in tf_embedding 0.2.0)",
               DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    """Private names, too, are the moved module's."""
    return getattr(_moved, name)
