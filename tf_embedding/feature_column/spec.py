"""`EmbeddingConfigSpec` (TPUEstimator's embedding configuration) and v1's table and feature
configs, with the estimator's validation and messages."""

import collections
from typing import Any, Callable, Optional

from tensorflow.python.feature_column import feature_column as core_fc
from tensorflow.python.feature_column import feature_column_v2 as fc_lib
from tensorflow.python.tpu import feature_column as tpu_fc
from tensorflow.python.tpu import feature_column_v2 as tpu_fc_v2

from tf_embedding.combiners import COMBINERS
from tf_embedding.feature_column import parameters

_SUPPORTED_FEATURE_COLUMNS = (core_fc._NumericColumn,  # pylint: disable=protected-access
                              fc_lib.NumericColumn)
_TPU_EMBEDDING_COLUMN_CLASSES = (
    tpu_fc._TPUEmbeddingColumn,  # pylint: disable=protected-access
    tpu_fc._TPUSharedEmbeddingColumn,  # pylint: disable=protected-access
    tpu_fc_v2._TPUEmbeddingColumnV2,  # pylint: disable=protected-access
    tpu_fc_v2._TPUSharedEmbeddingColumnV2)  # pylint: disable=protected-access
_EMBEDDING_COLUMN_CLASSES = (core_fc._EmbeddingColumn,  # pylint: disable=protected-access
                             fc_lib.EmbeddingColumn,
                             core_fc._SharedEmbeddingColumn)  # pylint: disable=protected-access
_SUPPORTED_OPTIMIZERS = (
    parameters.ProximalAdagradParameters, parameters.AdagradParameters,
    parameters.AdamParameters, parameters.FtrlParameters,
    parameters.StochasticGradientDescentParameters, parameters.MomentumParameters,
    parameters.RMSPropParameters)
# v1 also takes None (no combiner: the sequence columns).
_COMBINERS = COMBINERS + (None,)


_TableFields = collections.namedtuple("TableConfig", [
    "vocabulary_size", "dimension", "initializer", "combiner", "hot_id_replication",
    "learning_rate", "learning_rate_fn", "optimization_parameters"])


class TableConfig(_TableFields):
    """v1 `tpu_embedding.TableConfig` (the `table_to_config_dict` path), with v1's messages."""

    def __new__(cls, vocabulary_size: int, dimension: int,
                initializer: Optional[Callable[..., Any]] = None,
                combiner: Optional[str] = "mean", hot_id_replication: bool = False,
                learning_rate: Optional[float] = None,
                learning_rate_fn: Optional[Callable[[Any], Any]] = None,
                optimization_parameters: Any = None) -> "TableConfig":
        if not isinstance(vocabulary_size, int) or vocabulary_size < 1:
            raise ValueError(f"Invalid vocabulary_size {vocabulary_size}.")
        if not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"Invalid dimension {dimension}.")
        if initializer is not None and not callable(initializer):
            raise ValueError("initializer must be callable if specified.")
        if combiner not in _COMBINERS:
            raise ValueError(f"Invalid combiner {combiner}")
        if learning_rate is not None and learning_rate_fn is not None:
            # v1's wording, inverted as it is there.
            raise ValueError("At most one of learning_rate and learning_rate_fn can be None; "
                             f"got {learning_rate} and {learning_rate_fn}")
        if optimization_parameters is not None and not isinstance(
                optimization_parameters,
                parameters._OptimizationParameters):  # pylint: disable=protected-access
            raise ValueError("`optimization_parameters` must inherit from "
                             "`_OptimizationParameters`. `type(optimization_parameters)`="
                             f"{type(optimization_parameters)}")
        return super().__new__(cls, vocabulary_size, dimension, initializer, combiner,
                               hot_id_replication, learning_rate, learning_rate_fn,
                               optimization_parameters)


_FeatureFields = collections.namedtuple("FeatureConfig",
                                        ["table_id", "max_sequence_length", "weight_key"])


class FeatureConfig(_FeatureFields):
    """v1 `tpu_embedding.FeatureConfig`: the feature's table (by name) and sequence length."""

    def __new__(cls, table_id: str, max_sequence_length: int = 0,
                weight_key: Optional[str] = None) -> "FeatureConfig":
        if not isinstance(max_sequence_length, int) or max_sequence_length < 0:
            raise ValueError(f"Invalid max_sequence_length {max_sequence_length}.")
        return super().__new__(cls, table_id, max_sequence_length, weight_key)


_SpecFields = collections.namedtuple("EmbeddingConfigSpec", [
    "feature_columns", "tensor_core_feature_columns", "optimization_parameters",
    "clipping_limit", "pipeline_execution_with_tensor_core",
    "experimental_gradient_multiplier_fn", "feature_to_config_dict", "table_to_config_dict",
    "partition_strategy", "profile_data_directory"])


class EmbeddingConfigSpec(_SpecFields):
    """TPUEstimator's `EmbeddingConfigSpec`, for `EmbeddingFeatures` and the mid-level API.

    Exactly one of `feature_columns` and the pair `feature_to_config_dict` /
    `table_to_config_dict` configures the tables. `clipping_limit` bounds each table's summed
    gradient element-wise, `experimental_gradient_multiplier_fn(global_step)` scales the
    activation gradients, `partition_strategy` is 'div' or 'mod'.
    """

    def __new__(cls, feature_columns: Any = None, optimization_parameters: Any = None,
                clipping_limit: Optional[float] = None,
                pipeline_execution_with_tensor_core: bool = False,
                experimental_gradient_multiplier_fn: Optional[Callable[[Any], Any]] = None,
                feature_to_config_dict: Optional[dict[str, FeatureConfig]] = None,
                table_to_config_dict: Optional[dict[str, TableConfig]] = None,
                partition_strategy: str = "div",
                profile_data_directory: Optional[str] = None) -> "EmbeddingConfigSpec":
        if (feature_columns is None) == (feature_to_config_dict is None
                                         or table_to_config_dict is None):
            raise ValueError("Exactly one of `feature_columns` and the pair "
                             "`feature_to_config_dict` and `table_to_config_dict` must be be "
                             "specified.")
        if partition_strategy not in ("div", "mod"):
            raise ValueError(f"Invalid partition_strategy {partition_strategy}. Must be one of "
                             '"mod" or "div".')
        tensor_core_feature_columns = None
        if feature_columns is not None:
            supported = (_SUPPORTED_FEATURE_COLUMNS + _TPU_EMBEDDING_COLUMN_CLASSES
                         + _EMBEDDING_COLUMN_CLASSES)
            for column in feature_columns:
                if not isinstance(column, supported):
                    raise TypeError(f"All feature columns must be supported types in "
                                    f"{supported}. Got {type(column)}")
            tensor_core = tpu_fc_v2.EmbeddingDevice.TPU_TENSOR_CORE
            tensor_core_feature_columns = [
                column for column in feature_columns
                if getattr(column, "embedding_lookup_device", None) == tensor_core]
            feature_columns = [column for column in feature_columns
                               if column not in tensor_core_feature_columns]
            if not isinstance(optimization_parameters, _SUPPORTED_OPTIMIZERS):
                raise ValueError("optimization_parameters must be an instance of type "
                                 f"{_SUPPORTED_OPTIMIZERS}. Got {type(optimization_parameters)}.")
        else:
            for feature, config in feature_to_config_dict.items():
                if not isinstance(config, FeatureConfig):
                    raise TypeError(f"Config for feature {feature} must be of type "
                                    f"`FeatureConfig`. Got {type(config)}")
                if config.table_id not in table_to_config_dict:
                    raise ValueError(f"Feature {feature} refers to table {config.table_id} "
                                     "which is not in the table_to_config_dict.")
            for table, config in table_to_config_dict.items():
                if not isinstance(config, TableConfig):
                    raise TypeError(f"Config for table {table} must be of type `TableConfig`. "
                                    f"Got {type(config)}")
        return super().__new__(
            cls, feature_columns=feature_columns,
            tensor_core_feature_columns=tensor_core_feature_columns,
            optimization_parameters=optimization_parameters, clipping_limit=clipping_limit,
            pipeline_execution_with_tensor_core=pipeline_execution_with_tensor_core,
            experimental_gradient_multiplier_fn=experimental_gradient_multiplier_fn,
            feature_to_config_dict=feature_to_config_dict,
            table_to_config_dict=table_to_config_dict, partition_strategy=partition_strategy,
            profile_data_directory=profile_data_directory)
