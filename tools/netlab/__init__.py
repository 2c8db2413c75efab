"""The network lab: a parameter-server cluster whose tasks talk over shaped links on one machine.

Every task (chief, ps, worker) runs in a network namespace of its own, joined by a veth link to a
bridge in a hub namespace; `tc` limits each link's rate (both directions). Addresses exist only on
those links (10.213.0.0/24 inside the lab's namespaces), so nothing touches the machine's own
network namespace and no traffic leaves the machine. Root on Linux.

* `links.Network`: the namespaces, links, shaping, byte counters and their removal.
* `cluster.lab_cluster`: the ps and worker tasks (`python -m tf_embedding.server`) in the lab.
* `model`: the traffic model of docs/parameter_server_traffic.md, as bytes and step time.
* `python tools/netlab train ...` runs `tf-embedding train` as the lab's chief;
  `python tools/ps_benchmark.py --lab` runs the PS benchmark in it (docs/scale.md).
"""
