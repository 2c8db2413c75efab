"""The data layout of a run: tables, features and dense inputs, as plain Python.

A `DataSpec` says what every reader produces and what the model consumes. It is free of
TensorFlow so that the command line can resolve configuration without importing it.
"""

import dataclasses
import json
import math
from typing import Any

from tf_embedding.combiners import COMBINERS

ID_TYPES = ("int", "string")
DENSE_TRANSFORMS = ("none", "log1p")

# Cardinalities of the 26 categorical columns of the Criteo Kaggle display-advertising data
# (as counted by the DLRM reference); the preset hashes each into at most
# _CRITEO_MAX_VOCABULARY rows, with headroom so that small columns rarely collide.
_CRITEO_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
_CRITEO_MAX_VOCABULARY = 1_000_000

# MLPerf's DLRM-DCNv2 (Training v3+, Criteo 1TB with multi-hot columns; the vocabularies as the
# reference caps them at 40M rows): each of its 26 categorical features' vocabulary and fixed
# multi-hot size, 13 dense inputs, embedding width 128.
MLPERF_DCNV2_VOCABULARIES = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
    11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
MLPERF_DCNV2_MULTI_HOT = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
MLPERF_DCNV2_DENSE = 13
MLPERF_DCNV2_EMBEDDING_DIM = 128


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """One embedding table.

    `zipf_alpha` and `head_size` only shape synthetic data: ids are drawn with probability
    proportional to rank**-zipf_alpha, and the planted effect of the id of rank r has standard
    deviation proportional to 1 / sqrt(1 + r / head_size), so rarely seen ids matter less.

    `dynamic`: the options of `tf_embedding.DynamicVocabulary` (a JSON object, {} for the
    defaults) for a dynamic table, whose ids are keys and `vocabulary_size` its capacity: int
    ids are taken as they are, string ids hashed into the int64s >= 0, and synthetic ranks
    become scattered keys (below 2**59). `renew_every` (synthetic data, dynamic tables): every
    rank's key is replaced by a new one every `renew_every` batches, the ranks at staggered
    batches, so the keys seen grow with the stream as new items replace old ones (0: never).
    """

    name: str
    vocabulary_size: int
    combiner: str = "sum"
    zipf_alpha: float = 1.05
    head_size: int = 1000
    dynamic: dict[str, Any] | None = None
    renew_every: int = 0

    @property
    def id_space(self) -> int:
        """What raw ids are reduced into: the vocabulary, or -1 for a dynamic table's keys
        (`common.to_rows`, the TSV op)."""
        return -1 if self.dynamic is not None else self.vocabulary_size


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One categorical feature, looked up in `table` and pooled with the table's combiner.

    `id_type` says how raw values become rows: "int" values are taken modulo the vocabulary,
    "string" values are hashed (fingerprint64) into it. `min_ids`, `max_ids` and `effect_scale`
    only shape synthetic data (ids per sample are uniform in min_ids..max_ids, so min_ids =
    max_ids is a fixed multi-hot size; the planted effect is scaled).
    Weighted features carry a weight per id.
    """

    name: str
    table: str
    id_type: str = "int"
    weighted: bool = False
    max_ids: int = 1
    min_ids: int = 1
    effect_scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """Tables, features (in column order for TSV) and the number of dense inputs."""

    tables: tuple[TableSpec, ...]
    features: tuple[FeatureSpec, ...]
    num_dense: int
    dense_transform: str = "none"
    label_bias: float = -1.0

    def __post_init__(self) -> None:
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"table names must be unique, got {names}")
        for table in self.tables:
            where = f"tables[{table.name!r}]"
            if table.vocabulary_size < 1:
                raise ValueError(f"{where}.vocabulary_size must be >= 1, "
                                 f"got {table.vocabulary_size}")
            if table.combiner not in COMBINERS:
                raise ValueError(f"{where}.combiner must be one of {COMBINERS}, "
                                 f"got {table.combiner!r}")
            if table.zipf_alpha <= 0 or table.head_size < 1:
                raise ValueError(f"{where}: zipf_alpha must be > 0 and head_size >= 1")
            if table.dynamic is not None and not isinstance(table.dynamic, dict):
                raise ValueError(f"{where}.dynamic must be a JSON object of DynamicVocabulary's "
                                 f"options, got {table.dynamic!r}")
            if (not isinstance(table.renew_every, int) or table.renew_every < 0
                    or (table.renew_every and table.dynamic is None)):
                raise ValueError(f"{where}.renew_every must be an int >= 0, and > 0 only for a "
                                 f"dynamic table, got {table.renew_every!r}")
        feature_names = [f.name for f in self.features]
        if not feature_names or len(set(feature_names)) != len(feature_names):
            raise ValueError(f"feature names must be unique and non-empty, got {feature_names}")
        for feature in self.features:
            where = f"features[{feature.name!r}]"
            if feature.table not in names:
                raise ValueError(f"{where}.table {feature.table!r} is not one of {names}")
            if feature.id_type not in ID_TYPES:
                raise ValueError(f"{where}.id_type must be one of {ID_TYPES}, "
                                 f"got {feature.id_type!r}")
            if not 1 <= feature.min_ids <= feature.max_ids:
                raise ValueError(f"{where}: 1 <= min_ids <= max_ids must hold, got min_ids "
                                 f"{feature.min_ids} and max_ids {feature.max_ids}")
            if "/" in feature.name or "\t" in feature.name:
                raise ValueError(f"{where}: names may not contain '/' or tabs")
        unused = set(names) - {f.table for f in self.features}
        if unused:
            raise ValueError(f"tables {sorted(unused)} are used by no feature")
        if self.num_dense < 0:
            raise ValueError(f"num_dense must be >= 0, got {self.num_dense}")
        if self.dense_transform not in DENSE_TRANSFORMS:
            raise ValueError(f"dense_transform must be one of {DENSE_TRANSFORMS}, "
                             f"got {self.dense_transform!r}")

    def table(self, name: str) -> TableSpec:
        return next(t for t in self.tables if t.name == name)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with every key (lists, as JSON reads them back)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "DataSpec":
        """Builds a spec from the JSON form (as written by `to_json`); unknown keys are errors,
        missing ones take their defaults (a layout written before a key existed reads as it
        did: --resume compares layouts read back so)."""
        value = dict(value)
        try:
            tables = tuple(_build(TableSpec, t, f"tables[{i}]")
                           for i, t in enumerate(value.pop("tables")))
            features = tuple(_build(FeatureSpec, f, f"features[{i}]")
                             for i, f in enumerate(value.pop("features")))
        except KeyError as e:
            raise ValueError(f"a data spec needs 'tables' and 'features'; missing {e}") from None
        return _build(cls, dict(value, tables=tables, features=features), "data spec")


def _build(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object, got {value!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    try:
        return cls(**value)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from None


def synthetic_spec() -> DataSpec:
    """The default click log: vocabularies from 24 to 2,000,000 rows, one- and multi-hot,
    weighted and unweighted features, a table shared by two features, four dense inputs."""
    return DataSpec(
        tables=(
            TableSpec("user", 2_000_000, "sum", zipf_alpha=1.05, head_size=2000),
            TableSpec("item", 1_000_000, "mean", zipf_alpha=1.1, head_size=2000),
            TableSpec("query_term", 200_000, "sqrtn", zipf_alpha=1.1, head_size=500),
            TableSpec("category", 10_000, "mean", zipf_alpha=1.2, head_size=200),
            TableSpec("country", 200, "sum", zipf_alpha=1.5, head_size=20),
            TableSpec("hour", 24, "sum", zipf_alpha=0.3, head_size=24),
        ),
        features=(
            FeatureSpec("user_id", "user"),
            FeatureSpec("item_id", "item"),
            FeatureSpec("item_history", "item", max_ids=20, effect_scale=0.5),
            FeatureSpec("query_terms", "query_term", weighted=True, max_ids=8),
            FeatureSpec("categories", "category", max_ids=3),
            FeatureSpec("country", "country", effect_scale=0.5),
            FeatureSpec("hour", "hour", effect_scale=0.5),
        ),
        num_dense=4,
    )


def mlperf_dcnv2_spec(vocabulary_cap: int) -> DataSpec:
    """MLPerf DLRM-DCNv2's layout: 26 sum-pooled integer features, each with its own table of
    MLPerf's vocabulary (at most `vocabulary_cap` rows) and its fixed multi-hot size, and 13
    dense inputs (log1p, as Criteo's counts). Synthetic data of this layout has MLPerf's shape,
    not Criteo's statistics: Zipf ids, and a planted effect per id scaled by 0.3 / sqrt(the
    multi-hot size), so that each feature's sum moves the click logit alike."""
    tables = tuple(TableSpec(f"C{i + 1}", min(vocabulary, vocabulary_cap), "sum")
                   for i, vocabulary in enumerate(MLPERF_DCNV2_VOCABULARIES))
    features = tuple(FeatureSpec(t.name, t.name, min_ids=hot, max_ids=hot,
                                 effect_scale=round(0.3 / math.sqrt(hot), 4))
                     for t, hot in zip(tables, MLPERF_DCNV2_MULTI_HOT))
    return DataSpec(tables=tables, features=features, num_dense=MLPERF_DCNV2_DENSE,
                    dense_transform="log1p")


def criteo_spec() -> DataSpec:
    """The Criteo layout: 13 integer columns (log1p-transformed) and 26 hashed categoricals."""
    tables = tuple(
        TableSpec(f"C{i + 1}", min(2 * n, _CRITEO_MAX_VOCABULARY), "sum")
        for i, n in enumerate(_CRITEO_CARDINALITIES))
    features = tuple(FeatureSpec(t.name, t.name, id_type="string") for t in tables)
    return DataSpec(tables=tables, features=features, num_dense=13, dense_transform="log1p")
