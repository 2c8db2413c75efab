"""A run's model directory: config.json, the options and data layout a run computes with; the
checks that a fresh run finds the directory unused and a resumed one computes what the first
did; and the saving of the run's checkpoints."""

import dataclasses
import json
import os
from typing import Any

import tensorflow as tf

from tf_embedding.job.data.spec import DataSpec
from tf_embedding.job.options import TrainOptions


# Options that steer a run without changing what it computes: a resumed run may change them
# (a checkpoint restores under any sharding plan).
RUN_CONTROL = ("resume", "stop_at_step", "steps", "progress", "checkpoint_every",
               "keep_checkpoints", "export_dir", "eval_examples", "eval_input", "config",
               "jit_compile", "sharding", "ps_placement", "summary_every")


def resolved_config(options: TrainOptions, spec: DataSpec) -> dict[str, Any]:
    """Options and layout as written to config.json (JSON round-tripped, so comparable)."""
    return json.loads(json.dumps({"options": dataclasses.asdict(options),
                                  "data_spec": spec.to_json()}))


def check_model_dir(options: TrainOptions, spec: DataSpec, checkpoints: str,
                    path: str) -> None:
    """A fresh run needs an unused directory; a resumed run must compute what the first did."""
    latest = tf.train.latest_checkpoint(checkpoints)
    if not options.resume:
        if latest:
            raise ValueError(f"{options.model_dir} already holds a run; pass --resume to "
                             "continue it or choose another --model-dir")
        return
    if not os.path.exists(path):
        raise ValueError(f"--resume: no run to resume in {options.model_dir}")
    if not latest:
        # Killed before its first checkpoint: nothing of it is kept, so it starts afresh.
        raise ValueError(f"--resume: the run in {options.model_dir} has no checkpoint yet (it "
                         "stopped before its first); run without --resume to start it from the "
                         "beginning")
    with open(path) as f:
        saved = json.load(f)
    current = resolved_config(options, spec)
    if DataSpec.from_json(saved["data_spec"]).to_json() != current["data_spec"]:
        raise ValueError("--resume: the data layout differs from the run being resumed")
    for key, value in saved["options"].items():
        if key not in RUN_CONTROL and current["options"].get(key) != value:
            raise ValueError(f"--resume: option {key} is {current['options'].get(key)!r} but "
                             f"the run being resumed used {value!r}")


class Checkpoints:
    """Saves the run's checkpoint (`manager`'s) every `every` steps of its `step` variable and
    where training stopped; `malformed` counts the records dropped from the input."""

    def __init__(self, manager: tf.train.CheckpointManager, step: tf.Variable,
                 malformed: tf.Variable, every: int):
        self._manager, self._step, self._malformed = manager, step, malformed
        self._every = every
        self.first_step = self._saved_at = int(step)

    def after_step(self) -> int:
        """Saves when the step just done is due; returns that step."""
        step = int(self._step)
        if step % self._every == 0:
            self._manager.save(checkpoint_number=step)
            self._saved_at = step
        return step

    def finish(self, examples: int) -> None:
        """Saves the step training stopped at, unless saved there already. Steps trained
        without one example mean the input holds none (all malformed): an error."""
        step = int(self._step)
        if step > self.first_step and not examples:
            raise ValueError(f"the training input holds no examples ({int(self._malformed)} "
                             "malformed records)")
        if self._saved_at != step:
            self._manager.save(checkpoint_number=step)
