"""The checks of `TPUEmbedding`'s constructor options (the strategy it runs under, and the
keyword arguments TF 2's class lacks: `table_devices`, `traffic`, `profile_data_directory`,
`collective_timeout_seconds`), with the messages users see, each naming the class
(`argument_checks` for the rules the other classes share)."""

from typing import Any, Mapping, Sequence

import tensorflow as tf

from tf_embedding import argument_checks as checks
from tf_embedding import config
from tf_embedding.sharded import layout
from tf_embedding.sharded import parameter_server
from tf_embedding.sharded.multi_worker import group

OWNER = "TPUEmbedding"  # the class the messages name

_SUPPORTED_STRATEGIES = (tf.distribute.MirroredStrategy, tf.compat.v1.distribute.MirroredStrategy)


def check_strategy(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is a ParameterServerStrategy.

    Raises:
      RuntimeError: a strategy other than the default, MirroredStrategy,
        MultiWorkerMirroredStrategy or ParameterServerStrategy.
    """
    parameter_servers = parameter_server.is_parameter_server_strategy(strategy)
    if tf.distribute.has_strategy() and not (
            isinstance(strategy, _SUPPORTED_STRATEGIES) or parameter_servers
            or group.is_multi_worker_strategy(strategy)):
        raise RuntimeError(
            "TPUEmbedding runs under the default strategy, tf.distribute.MirroredStrategy, "
            "tf.distribute.MultiWorkerMirroredStrategy or "
            "tf.distribute.ParameterServerStrategy, but was created under "
            f"{type(strategy).__name__}.")
    return parameter_servers


def worker_group(strategy: tf.distribute.Strategy, table_devices: Sequence[str] | None,
                 traffic: Mapping[str, str] | None, profile_data_directory: str | None,
                 collective_timeout_seconds: float | None) -> group.WorkerGroup | None:
    """Under MultiWorkerMirroredStrategy, its workers' group (each worker then holds one block
    of every table); else None.

    Raises:
      ValueError: an option the multi-worker engine has no use for (there every table has one
        block per worker and its lookups travel as rows), or a timeout outside it.
    """
    if collective_timeout_seconds is not None:
        checks.check_number(OWNER, "collective_timeout_seconds", collective_timeout_seconds)
    if not group.is_multi_worker_strategy(strategy):
        if collective_timeout_seconds is not None:
            raise ValueError(f"{OWNER}: collective_timeout_seconds applies under "
                             "MultiWorkerMirroredStrategy only.")
        return None
    for name, value, why in (
            ("table_devices", table_devices, "every table has one block on each worker"),
            ("traffic", traffic, "lookups always travel as rows, which keeps one process's "
             "bits (docs/multi_worker.md)"),
            ("profile_data_directory", profile_data_directory,
             "each worker would write the same files")):
        if value:
            raise ValueError(f"{OWNER}: {name} is not supported under "
                             f"MultiWorkerMirroredStrategy: {why}.")
    return group.group_of(strategy, collective_timeout_seconds)


def checked_arguments(strategy: tf.distribute.Strategy, feature_config: Any, optimizer: Any,
                      pipelined: Any, partition_strategy: str,
                      profile_data_directory: str | None) -> tuple[bool, str]:
    """Checks the strategy and the arguments TPUEmbedding's constructor reads first (in TF's
    order where TF checks them, then tf_embedding's); returns whether `strategy` is a
    ParameterServerStrategy, and the partition strategy."""
    parameter_servers = check_strategy(strategy)
    config.check_embedding_arguments(OWNER, feature_config, optimizer, allow_empty=False)
    checks.check_flag(OWNER, "pipeline_execution_with_tensor_core", pipelined)
    partition_strategy = layout.check_partition_strategy(partition_strategy, owner=OWNER)
    check_profile_directory(profile_data_directory, parameter_servers)
    return parameter_servers, partition_strategy


def check_profile_directory(directory: str | None, parameter_servers: bool) -> None:
    """Raises ValueError for a `profile_data_directory` under ParameterServerStrategy, or one
    this process cannot write (a TypeError for one that is no path)."""
    if directory and parameter_servers:
        raise ValueError(
            f"{OWNER}: profile_data_directory is not supported under ParameterServerStrategy: "
            "the statistics are written by the process that runs the step, there a remote "
            "worker, which cannot run the host function that writes them.")
    checks.check_directory(OWNER, "profile_data_directory", directory)


def checked_table_devices(table_devices: Sequence[str] | Mapping[str, Sequence[str]] | None,
                          default: Sequence[str | None], table_names: Sequence[str],
                          parameter_servers: bool) -> dict[str, tuple[str | None, ...]]:
    """{table name: its blocks' devices} from `table_devices` (one sequence for every table, or
    a mapping by table name; `default` for the tables it does not name). Under
    ParameterServerStrategy a block elsewhere than on a PS task would live on the coordinator or
    a worker, which scheduled functions cannot share."""
    if table_devices is None or isinstance(table_devices, Mapping):
        by_name = dict(table_devices or {})
        unknown = sorted(set(by_name) - set(table_names))
        if unknown:
            raise ValueError(f"{OWNER}: table_devices names tables that do not exist: "
                             f"{unknown}; the tables are {sorted(table_names)}.")
        for name, devices in by_name.items():
            checks.check_devices(OWNER, "table_devices", devices, at=f"table {name!r}")
    else:
        checks.check_devices(OWNER, "table_devices", table_devices)
        by_name = {name: table_devices for name in table_names}
    placed = {}
    for name in table_names:
        devices = tuple(by_name.get(name, default))
        where = f"table_devices of table {name!r}" if isinstance(table_devices, Mapping) \
            else "table_devices"
        if not devices:
            raise ValueError(f"{OWNER}: {where} must name at least one device.")
        if parameter_servers:
            for device in devices:
                if device is None or tf.DeviceSpec.from_string(device).job != "ps":
                    raise ValueError(
                        f"{OWNER}: {where} entry {device!r} is not a parameter-server device: "
                        "under ParameterServerStrategy every block lives on a PS task "
                        "('/job:ps/replica:0/task:<i>/device:CPU:0').")
        placed[name] = devices
    return placed


def checked_traffic(traffic: Mapping[str, str] | None, table_configs: Sequence[Any],
                    pipelined: bool) -> frozenset[str]:
    """The names of the tables whose `traffic` is "partial" (None: none)."""
    checks.check_mapping(OWNER, "traffic", traffic, "None or {table name: 'rows' or 'partial'}")
    traffic = traffic or {}
    names = [table.name for table in table_configs]
    for name, mode in traffic.items():
        if name not in names:
            raise ValueError(f"{OWNER}: traffic names table {name!r}, which is not a table of "
                             f"this TPUEmbedding (tables: {names}).")
        if mode not in ("rows", "partial"):
            raise ValueError(f"{OWNER}: traffic of table {name!r} must be 'rows' or "
                             f"'partial', got {mode!r}.")
    partial = frozenset(name for name, mode in traffic.items() if mode == "partial")
    for table in table_configs:
        if table.name in partial and table.quantization_config is not None:
            raise ValueError(
                f"{OWNER}: Table {table.name} has a QuantizationConfig: its rows are quantized "
                "before they are combined, which its blocks' tasks cannot do, so its traffic "
                "must be 'rows'.")
    if partial and pipelined:
        raise ValueError(f"{OWNER}: traffic 'partial' (tables {sorted(partial)}) does not "
                         "combine with pipeline_execution_with_tensor_core=True, which looks "
                         "rows up at enqueue time; use 'rows' for them.")
    return partial
