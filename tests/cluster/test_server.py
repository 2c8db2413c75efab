"""`python -m tf_embedding.server`: TF_CONFIG parsing and its errors, thread counts, and real
server processes (readiness, SIGTERM, a port already taken, the op library in the server)."""

import json
import socket
import subprocess
import sys

import pytest

from tf_embedding.cluster import server

from helpers.cluster import SERVER, ServerProcess, free_ports, tf_config

pytestmark = pytest.mark.cluster

CLUSTER = {"chief": ["10.0.0.1:2222"], "ps": ["10.0.0.2:2222", "10.0.0.3:2222"],
           "worker": ["10.0.0.4:2222"]}


def test_parses_the_task_of_tf_config():
    task = server.parse_tf_config(tf_config(CLUSTER, "ps", 1))
    assert (task.task_type, task.task_index, task.address, task.protocol) == (
        "ps", 1, "10.0.0.3:2222", "grpc")
    config = json.loads(tf_config(CLUSTER, "worker", 0))
    config["rpc_layer"] = "grpc+verbs"
    assert server.parse_tf_config(json.dumps(config)).protocol == "grpc+verbs"


BAD_CONFIGS = [
    (None, "TF_CONFIG is not set"),
    ("", "TF_CONFIG is not set"),
    ("{cluster", "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "TF_CONFIG must be a JSON object"),
    (json.dumps({"task": {"type": "ps", "index": 0}}), 'needs a non-empty "cluster"'),
    (json.dumps({"cluster": {"ps": "10.0.0.2:2222"}, "task": {"type": "ps", "index": 0}}),
     "cluster entry 'ps' must be a list"),
    (json.dumps({"cluster": {"ps": ["10.0.0.2"]}, "task": {"type": "ps", "index": 0}}),
     "cluster entry 'ps' must be a list of \"host:port\""),
    (json.dumps({"cluster": CLUSTER}), 'TF_CONFIG needs "task"'),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "ps"}}), 'TF_CONFIG needs "task"'),
    (tf_config(CLUSTER, "chief", 0), "The chief is the coordinator"),
    (tf_config(CLUSTER, "evaluator", 0),
     "task type 'evaluator' is not run by python -m tf_embedding.server"),
    (tf_config({"ps": ["10.0.0.2:2222"]}, "worker", 0), "'worker' has no entry in the cluster"),
    (tf_config(CLUSTER, "ps", 2), "task index 2 is not an index of the 2 'ps' task(s)"),
    (tf_config(CLUSTER, "ps", -1), "task index -1"),
    (tf_config(CLUSTER, "ps", "0"), "task index '0'"),
    (tf_config(CLUSTER, "ps", True), "task index True"),
]


@pytest.mark.parametrize("text, message", BAD_CONFIGS)
def test_bad_tf_config_is_a_clear_error(text, message):
    with pytest.raises(server.ConfigError) as raised:
        server.parse_tf_config(text)
    assert message in str(raised.value)


def test_thread_counts_share_the_cores_of_a_host():
    loopback = {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"],
                "worker": ["127.0.0.1:4"]}
    # Four tasks on a 2-core host: one kernel thread each.
    assert server.thread_counts(server.parse_tf_config(tf_config(loopback, "ps", 0)), 2) == (1, 4)
    # One task per machine keeps every core; inter-op threads cover the workers plus one.
    many_workers = dict(CLUSTER, worker=[f"10.0.1.{i}:2222" for i in range(6)])
    task = server.parse_tf_config(tf_config(many_workers, "ps", 0))
    assert server.thread_counts(task, 16) == (16, 7)


def test_missing_tf_config_exits_with_status_2_and_the_message():
    result = subprocess.run([sys.executable, "-m", "tf_embedding.server"], capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 2
    assert "TF_CONFIG is not set" in result.stderr


def test_server_loads_the_ops_prints_ready_and_stops_on_sigterm():
    ports = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    process = ServerProcess({"TF_CONFIG": tf_config(cluster, "ps", 0)},
                            [*SERVER, "--intra-op-threads", "1"])
    try:
        assert process.wait_ready(), process.remaining_output()
        assert f"ps 0 at 127.0.0.1:{ports[0]}" in process.output[-1]
        assert "intra-op threads 1, inter-op threads 4" in process.output[-1]
    finally:
        status = process.stop()
    assert status == 0, process.remaining_output()
    assert "ps 0 stopping on SIGTERM" in process.remaining_output()


def test_a_port_already_taken_exits_with_status_1():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = ServerProcess(
            {"TF_CONFIG": tf_config({"ps": [f"127.0.0.1:{port}"]}, "ps", 0)})
        try:
            assert not process.wait_ready()
        finally:
            status = process.stop()
    assert status == 1
    assert (f"cannot start ps 0 at 127.0.0.1:{port}: Could not start gRPC server"
            in process.remaining_output())
