"""The `tf-embedding` command (train, predict, stats, generate) and its input pipelines.

It uses the library (`tf_embedding`) as any user would; nothing in the library imports it.

* `cli`: the command line (train | cluster | predict | stats | generate) and its dispatch;
  `options`: the subcommands' options, as the dataclasses the command line is built from.
* `training`: `train`'s steps, checkpoints, resume and evaluation; `model`: the DLRM-style
  ranking model; `embedding_apis`: the `--embedding-api` adapters; `keras_rs_training`:
  `--embedding-api keras-rs`, keras-rs's layer in the model that `model.fit` trains;
  `sharding`: `--sharding`, the plan the sharded API's tables get.
* `model_dir`: a run's config.json, the checks of its model directory (fresh or resumed)
  and the saving of its checkpoints.
* `evaluation`: held-out ROC AUC and log loss; `progress`: the custom loop's progress display;
  `summaries`: the TensorBoard summaries; `interrupts`: Ctrl-C as a stop at the next step
  boundary.
* `export`: the SavedModel export (stock TF ops only); `predict`: `tf-embedding predict`, which
  scores files with it.
* `cluster`: `train` as the chief of the parameter-server cluster TF_CONFIG names;
  `multi_worker`: `train` as one worker of a MultiWorkerMirroredStrategy cluster; `launcher`:
  `tf-embedding cluster`, `train` on a cluster on this machine.
* `stats`: `tf-embedding stats`, how ids fall on each table; `plots`: its histogram (matplotlib).
* `data/`: the input pipelines, and `tf-embedding generate`.
"""
