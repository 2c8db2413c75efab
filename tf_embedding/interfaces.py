"""Deprecated alias of `tf_embedding.cluster.network_interfaces` (this process's network
interfaces), where this module moved in 0.2.0: import that module instead. Importing this one
warns (`DeprecationWarning`) and gives that module itself; it will be removed in a later release
(CHANGELOG.md)."""

from tf_embedding.cluster.moved import alias

alias(__name__, "tf_embedding.cluster.network_interfaces", "0.2.0")
