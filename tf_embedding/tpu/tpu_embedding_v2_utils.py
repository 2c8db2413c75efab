"""`tensorflow.python.tpu.tpu_embedding_v2_utils`'s names: configs and embedding optimizers.

`CustomCombiner` and `CustomOptimizer` run only on SparseCore and are absent
(docs/api_differences.md, "Deliberately absent").
"""

from tf_embedding.config import FeatureConfig, QuantizationConfig, RowIdInitializer, TableConfig
from tf_embedding.optimizers.base import _Optimizer
from tf_embedding.optimizers import FTRL, SGD, Adagrad, AdagradMomentum, Adam

__all__ = ["Adagrad", "AdagradMomentum", "Adam", "FTRL", "FeatureConfig", "QuantizationConfig",
           "RowIdInitializer", "SGD", "TableConfig", "_Optimizer"]
