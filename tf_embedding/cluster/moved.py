"""Aliases of modules that moved: the old path, imported, becomes the new module itself."""

import importlib
import sys
import warnings


def alias(old: str, new: str, release: str) -> None:
    """Makes the module `old`, which is being imported, the module `new` (its objects, private
    names too), with a DeprecationWarning naming `new` and attributed to the importing code."""
    moved = importlib.import_module(new)
    # stacklevel 3: past this function and the alias module (warnings skips the import
    # machinery's frames), the code that imports `old`.
    warnings.warn(f"{old} is deprecated: import {new} instead (moved in tf_embedding {release})",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = moved
