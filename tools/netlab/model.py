"""The traffic model of docs/parameter_server_traffic.md, as bytes per step and step time on links.

Bytes are the tensors' payload by the formulas of "Traffic: rows or partial activations"; on a
link they travel in Ethernet frames of at most FRAME bytes carrying SEGMENT bytes each. A step of
one worker is three transfers that wait for each other (ids down, rows or partial activations
up, gradients down), so it pays its down and its up bytes one after the other on its own link;
a PS task's link carries 1/P of every worker's traffic, and the workers, which start together
and run the same step, send and receive at about the same times, so it too pays both
directions one after the other. The step takes whichever is longer, plus its round trips and
the compute measured on unshaped links.
"""

import dataclasses

# A full TCP segment on a 1500-byte MTU (with the timestamp option) and its Ethernet frame.
SEGMENT = 1448
FRAME = 1514
# Dependent round trips per step: the chief's dispatch, the lookups, the update.
ROUND_TRIPS = 3


@dataclasses.dataclass(frozen=True)
class Workload:
    """`tables` tables of `vocabulary` x `dim` floats, one feature each, `ids_per_sample`
    uniform ids per sample and feature, `batch` samples per worker step."""

    tables: int
    vocabulary: int
    dim: int
    batch: int
    ids_per_sample: int

    def unique_ids(self) -> float:
        """Expected distinct ids of one table in one step (uniform draws with repeats)."""
        draws = self.batch * self.ids_per_sample
        return self.vocabulary * (1.0 - (1.0 - 1.0 / self.vocabulary) ** draws)


def step_bytes(workload: Workload, traffic: str, num_ps: int) -> tuple[float, float]:
    """(down, up) payload bytes of one worker step: worker -> PS tasks, PS tasks -> worker."""
    row = 4 * workload.dim
    rows, lookups = workload.batch, workload.batch * workload.ids_per_sample
    # Ids travel as int32 block-local ids, row offsets as int64 (sharded/transports/task_packets.py).
    if traffic == "rows" and num_ps > 1:
        unique = workload.unique_ids()
        down, up = unique * (4 + 4 + row), unique * row
    else:  # partial, and every table of one block
        down = num_ps * 8 * (rows + 1) + 8 * lookups + num_ps * rows * row
        up = num_ps * rows * row
    return workload.tables * down, workload.tables * up


def whole_table_tasks(tables: int, num_ps: int) -> float:
    """How many equal PS tasks `tables` tables whole on `num_ps` tasks (table i on task
    i % num_ps) are worth: the busiest task holds ceil(tables / num_ps) of them, so its link
    carries that share of the bytes."""
    return tables / -(-tables // num_ps)


def network_seconds(down: float, up: float, rate_mbit: float, num_ps: float,
                    num_workers: int, independent_tasks: float = 1) -> float:
    """Seconds one worker step spends on the links at `rate_mbit` per link and direction.

    `num_ps`: the PS tasks sharing every worker's bytes (`whole_table_tasks` for whole tables).
    `independent_tasks`: how many PS tasks hold whole tables of their own, whose transfers do
    not wait for each other (1 when every table is split over every task, whose lookups need
    every task's part; `whole_table_tasks` for whole tables). Their transfers pipeline on the
    worker's full-duplex link: one task's rows come up while another's ids or gradients go down,
    so only one task's share of the smaller direction adds to the larger one (the sum for one
    task)."""
    bytes_per_second = rate_mbit * 1e6 / 8 * SEGMENT / FRAME
    own_link = (max(down, up) + min(down, up) / independent_tasks) / bytes_per_second
    ps_link = num_workers * (down + up) / num_ps / bytes_per_second
    return max(own_link, ps_link)


def step_seconds(down: float, up: float, rate_mbit: float, num_ps: float, num_workers: int,
                 round_trip: float, compute: float, independent_tasks: float = 1) -> float:
    """The model's step time: the links' time (`network_seconds`), the round trips, and
    `compute`, the step time measured without shaping (which holds the unshaped links' own
    transfer time too)."""
    return (network_seconds(down, up, rate_mbit, num_ps, num_workers, independent_tasks)
            + ROUND_TRIPS * round_trip + compute)
