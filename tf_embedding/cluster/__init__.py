"""Process plumbing of clusters: the task command, local clusters, private network namespaces,
and the chief's end (docs/parameter_server.md).

* `server`: `python -m tf_embedding.server` (`tf_embedding/server.py` runs its `main`), one `ps`
  or `worker` task: reads `TF_CONFIG` (also the parser of the chief's `TF_CONFIG`), loads the op
  library, sizes TF's thread pools, serves until SIGTERM or SIGINT.
* `local_cluster`: the ps and worker tasks as `python -m tf_embedding.server` subprocesses on
  free ports of 127.0.0.1 (or in a private network), awaited until ready and stopped by pid.
* `private_network`: network namespaces whose only interface is their own loopback, made with
  `unshare` and joined by children through `nsenter`.
* `network_interfaces`: this process's network interfaces as its sockets see them (which are up,
  bringing one up, which of them a listening port is reachable on).
* `chief`: ending the chief's program (`chief.run(main)`) without TF's coordinator teardown,
  which hangs after a lost worker.
* `moved`: the aliases at the old paths of the modules that moved here (`tf_embedding.chief`,
  ...), which warn and give the new module.

The package imports nothing itself, so the task command does not load TensorFlow before it has
blocked its stop signals.
"""
