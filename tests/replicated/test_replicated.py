"""TPUEmbeddingV0 against stock TF 2.21, numpy optimizer math, and itself across replicas.

Stock `TPUEmbeddingV0` only runs on a TPU, so lookups are compared with stock
`TPUEmbeddingForServing` (TF's CPU lookup, whose outputs V0 reproduces) on random
configurations: eagerly, traced with an unknown batch size, and XLA-compiled. Training steps
follow TF's documented V0 loop (GradientTape, then a Keras optimizer's `apply_gradients` on
`embedding_tables`) and are compared with numpy applying the Keras update rule to stock's
gradient, with Keras 3 and tf_keras, under the default strategy and `MirroredStrategy`.
"""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_embedding import config
from tf_embedding import optimizers
from tf_embedding.replicated import TPUEmbeddingV0

from helpers.checkpoints import FEATURES, OPTIMIZERS, feature_config, object_graph, save
from helpers.checkpoints import randomize, variable_values
from helpers.differential import make_pair, random_case, random_inputs, trace

pytestmark = pytest.mark.integration

NUM_CASES = 60
NUM_TRAINING_CASES = 8
LEARNING_RATE = 0.05
# Keras 3 and tf_keras defaults, which the numpy updates below use.
INITIAL_ACCUMULATOR, EPSILON, BETA_1, BETA_2 = 0.1, 1e-7, 0.9, 0.999
KERAS = {"keras": keras, "tf_keras": tf_keras}

stock = tf.tpu.experimental.embedding


def assert_close(actual, expected, context: str = "") -> None:
    # The fused kernel sums a row's lookups in another order than stock's ops.
    tf.nest.map_structure(
        lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6, err_msg=context),
        actual, expected)


def weighted_loss(activations, cotangents) -> tf.Tensor:
    return tf.add_n([tf.reduce_sum(a * c) for a, c in
                     zip(tf.nest.flatten(activations), tf.nest.flatten(cotangents))])


def assert_distinct(indices) -> None:
    """A table gradient lists each id once, so Keras 3 (which applies IndexedSlices row by row,
    duplicates included) applies the summed gradient, as a dense gradient would."""
    indices = np.asarray(indices)
    assert len(np.unique(indices)) == len(indices)


def lookup_with_gradients(embedding, cotangents):
    """(ids, weights) -> (activations, dense gradient of sum(activations * cotangents) per
    table)."""
    tables = list(embedding.embedding_tables.values())

    def call(ids, weights):
        with tf.GradientTape() as tape:
            activations = embedding(ids, weights)
            loss = weighted_loss(activations, cotangents)
        gradients = tape.gradient(loss, tables)
        return activations, [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g)
                             for g, t in zip(gradients, tables)]

    return call


@pytest.mark.slow
def test_random_configurations_match_stock():
    """Activations and table gradients. Every 4th case is also traced with an unknown batch
    size, every 4th (offset 2) compiled by XLA: the fused path, the stock-op path for ragged
    inputs whose output_shape needs the run-time batch size, and the XLA path."""
    rng = np.random.default_rng(20240607)
    for index in range(NUM_CASES):
        case = random_case(rng)
        ours, theirs = make_pair(TPUEmbeddingV0, case, rng)
        ids, weights = random_inputs(rng, case)
        cotangents = tf.nest.map_structure(
            lambda a: rng.normal(size=a.shape).astype(np.float32), theirs(ids, weights))
        expected = lookup_with_gradients(theirs, cotangents)(ids, weights)
        ours_lookup = lookup_with_gradients(ours, cotangents)
        context = f"case {index}: {case}"
        assert_close(ours_lookup(ids, weights), expected, context)
        if index % 4 == 0:
            assert_close(trace(ours_lookup, ids, weights), expected, context)
        if index % 4 == 2:
            assert_close(trace(ours_lookup, ids, weights, jit_compile=True, unknown_batch=False),
                         expected, context)


def numpy_keras_update(optimizer_name: str, table: np.ndarray, gradient: np.ndarray,
                       slots: dict[str, np.ndarray], step: int) -> np.ndarray:
    """One Keras 3 / tf_keras update of a whole table (rows without gradient have g = 0)."""
    if optimizer_name == "SGD":
        return table - LEARNING_RATE * gradient
    if optimizer_name == "Adagrad":
        accumulator = slots.setdefault("accumulator", np.full_like(table, INITIAL_ACCUMULATOR))
        accumulator += gradient * gradient
        return table - LEARNING_RATE * gradient / np.sqrt(accumulator + EPSILON)
    momentum = slots.setdefault("momentum", np.zeros_like(table))
    velocity = slots.setdefault("velocity", np.zeros_like(table))
    momentum += (gradient - momentum) * (1 - BETA_1)
    velocity += (gradient * gradient - velocity) * (1 - BETA_2)
    alpha = LEARNING_RATE * np.sqrt(1 - BETA_2**step) / (1 - BETA_1**step)
    return table - alpha * momentum / (np.sqrt(velocity) + EPSILON)


@pytest.mark.parametrize("keras_name, optimizer_name", [
    ("keras", "SGD"), ("keras", "Adagrad"), ("keras", "Adam"),
    ("tf_keras", "SGD"), ("tf_keras", "Adagrad"), ("tf_keras", "Adam"),
])
def test_training_steps_match_numpy(keras_name, optimizer_name):
    """Two steps of TF's V0 loop; the reference applies the Keras rule to stock's gradient."""
    rng = np.random.default_rng(len(keras_name) * 10 + len(optimizer_name))
    for index in range(NUM_TRAINING_CASES):
        case = random_case(rng)
        ours, theirs = make_pair(TPUEmbeddingV0, case, rng)
        ids, weights = random_inputs(rng, case)
        ours_tables = list(ours.embedding_tables.values())
        stock_tables = list(theirs.embedding_tables.values())
        optimizer = getattr(KERAS[keras_name].optimizers, optimizer_name)(
            learning_rate=LEARNING_RATE)
        expected = [table.numpy().astype(np.float64) for table in ours_tables]
        slots = [{} for _ in ours_tables]
        for step in (1, 2):
            cotangents = tf.nest.map_structure(
                lambda a: rng.normal(size=a.shape).astype(np.float32), theirs(ids, weights))
            with tf.GradientTape() as tape:
                loss = weighted_loss(theirs(ids, weights), cotangents)
            stock_gradients = tape.gradient(loss, stock_tables)

            with tf.GradientTape() as tape:
                tape.watch(ours_tables)
                loss = weighted_loss(ours(ids, weights), cotangents)
            gradients = tape.gradient(loss, ours_tables)
            trained = [(g, t) for g, t in zip(gradients, ours_tables) if g is not None]
            for gradient, _ in trained:
                assert isinstance(gradient, tf.IndexedSlices)
                assert_distinct(gradient.indices)
            optimizer.apply_gradients(trained)

            for i, gradient in enumerate(stock_gradients):
                if gradient is not None:
                    expected[i] = numpy_keras_update(
                        optimizer_name, expected[i], tf.convert_to_tensor(gradient).numpy(),
                        slots[i], step)
            for table, value in zip(ours_tables, expected):
                np.testing.assert_allclose(table.numpy(), value, rtol=1e-5, atol=1e-5,
                                           err_msg=f"case {index} step {step}: {case}")


@pytest.fixture(scope="module")
def mirrored():
    return tf.distribute.MirroredStrategy(
        [device.name for device in tf.config.list_logical_devices("CPU")])


def tables_by_name(embedding) -> dict[str, tf.Variable]:
    return {table.name: variable for table, variable in embedding.embedding_tables.items()}


def two_table_config(configs):
    """video 10x3 (mean) holds a weighted ragged and a sparse feature; user 6x2 a dense one."""
    video = configs.TableConfig(vocabulary_size=10, dim=3, combiner="mean", name="video")
    user = configs.TableConfig(vocabulary_size=6, dim=2, combiner="sum", name="user")
    return {"watched": configs.FeatureConfig(table=video),
            "liked": configs.FeatureConfig(table=video),
            "friend": configs.FeatureConfig(table=user)}


def replica_batch(replica: int, batch_size: int = 3):
    """Replica `replica`'s rows of (id, weight) lookups per feature, and its activation
    cotangents."""
    rng = np.random.default_rng(replica)

    def rows(vocabulary_size):
        return [[(int(rng.integers(vocabulary_size)), float(rng.uniform(0.5, 2.0)))
                 for _ in range(int(rng.integers(0, 4)))] for _ in range(batch_size)]

    lookups = {"watched": rows(10), "liked": rows(10),
               "friend": [[(int(rng.integers(6)), 1.0)] for _ in range(batch_size)]}
    cotangents = {"watched": rng.normal(size=(batch_size, 3)).astype(np.float32),
                  "liked": rng.normal(size=(batch_size, 3)).astype(np.float32),
                  "friend": rng.normal(size=(batch_size, 2)).astype(np.float32)}
    return lookups, cotangents


def batch_tensors(lookups):
    """(features, weights of watched): watched ragged, liked sparse, friend dense."""
    def ragged(feature, column, dtype):
        return tf.ragged.constant([[lookup[column] for lookup in row] for row in lookups[feature]],
                                  dtype=dtype, ragged_rank=1)

    features = {"watched": ragged("watched", 0, tf.int64),
                "liked": ragged("liked", 0, tf.int64).to_sparse(),
                "friend": tf.constant([row[0][0] for row in lookups["friend"]], tf.int64)}
    return features, ragged("watched", 1, tf.float32)


def weights_of(watched_weights):
    return {"watched": watched_weights, "liked": None, "friend": None}


def numpy_gradients(lookups, cotangents) -> dict[str, np.ndarray]:
    """Table gradients of sum(activations * cotangents): gain * cotangent per lookup, where
    gain = weight / sum of the row's weights (video: mean) or weight (user: sum), and only
    watched has weights."""
    gradients = {"video": np.zeros((10, 3)), "user": np.zeros((6, 2))}
    for feature, rows in lookups.items():
        table = "user" if feature == "friend" else "video"
        for row, cotangent in zip(rows, cotangents[feature]):
            row_weights = [w if feature == "watched" else 1.0 for _, w in row]
            for (index, _), weight in zip(row, row_weights):
                gain = weight / sum(row_weights) if table == "video" else weight
                gradients[table][index] += gain * cotangent
    return gradients


@pytest.mark.parametrize("keras_name", ["keras", "tf_keras"])
@pytest.mark.parametrize("strategy_name", ["default", "mirrored"])
def test_documented_training_loop_across_replicas(keras_name, strategy_name, mirrored):
    """Each replica looks up its own batch; Keras all-reduces the IndexedSlices (sum), so every
    replica's tables take the SGD step of the summed gradient and stay identical."""
    strategy = mirrored if strategy_name == "mirrored" else tf.distribute.get_strategy()
    num_replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        embedding = TPUEmbeddingV0(two_table_config(config), optimizers.SGD(0.1))
        optimizer = KERAS[keras_name].optimizers.SGD(learning_rate=LEARNING_RATE)
    tables = tables_by_name(embedding)
    expected = {name: table.numpy().astype(np.float64) for name, table in tables.items()}
    batches = [replica_batch(replica) for replica in range(num_replicas)]
    inputs = strategy.experimental_distribute_values_from_function(
        lambda context: (*batch_tensors(batches[context.replica_id_in_sync_group][0]),
                         batches[context.replica_id_in_sync_group][1]))

    @tf.function
    def training_step(inputs):
        def replica_step(inputs):
            features, watched_weights, cotangents = inputs
            with tf.GradientTape() as tape:
                tape.watch(list(tables.values()))
                loss = weighted_loss(embedding(features, weights_of(watched_weights)),
                                     cotangents)
            gradients = tape.gradient(loss, list(tables.values()))
            optimizer.apply_gradients(zip(gradients, list(tables.values())))
            return [tf.convert_to_tensor(g.indices) for g in gradients]

        return strategy.run(replica_step, args=(inputs,))

    for _ in range(2):
        indices = training_step(inputs)
        for lookups, cotangents in batches:
            for name, gradient in numpy_gradients(lookups, cotangents).items():
                expected[name] -= LEARNING_RATE * gradient
        for name, table in tables.items():
            copies = strategy.experimental_local_results(table)
            assert len(copies) == num_replicas
            for copy in copies:
                np.testing.assert_allclose(copy.numpy(), expected[name], rtol=1e-5, atol=1e-6)
    for replica_indices in tf.nest.flatten(strategy.experimental_local_results(indices)):
        assert_distinct(replica_indices)


def test_each_replica_looks_up_its_own_copy(mirrored):
    with mirrored.scope():
        embedding = TPUEmbeddingV0(two_table_config(config), optimizers.SGD(0.1))
    # Built outside the scope, the tables still belong to the strategy they were created under.
    video = tables_by_name(embedding)["video"]
    copies = mirrored.experimental_local_results(video)
    for replica, copy in enumerate(copies):
        copy.assign(np.full(copy.shape, replica, np.float32) + np.arange(10)[:, None])
    liked = tf.sparse.from_dense(tf.constant([[3], [7]], tf.int64))

    @tf.function
    def lookup():
        return mirrored.run(lambda: embedding({"liked": liked})["liked"])

    for replica, result in enumerate(mirrored.experimental_local_results(lookup())):
        np.testing.assert_array_equal(result, np.full((2, 3), replica) + [[3], [7]])
    lookup_devices = [op.device for op in lookup.get_concrete_function().graph.get_operations()
                      if op.type == "TfeFeaturesLookup"]
    assert lookup_devices == [copy.device for copy in copies]


def test_lookup_outside_replica_context_reads_first_copy(mirrored):
    with mirrored.scope():
        embedding = TPUEmbeddingV0(two_table_config(config), optimizers.SGD(0.1))
        friend = tf.constant([1, 4], tf.int64)
        expected = tf.gather(tables_by_name(embedding)["user"], friend)
        for lookup in (embedding, tf.function(embedding)):
            np.testing.assert_array_equal(lookup({"friend": friend})["friend"], expected)


def op_types(function, *args) -> set[str]:
    """Op types of a tf.function's graph and of every function it calls."""
    graph_def = function.get_concrete_function(*args).graph.as_graph_def()
    return ({node.op for node in graph_def.node}
            | {node.op for f in graph_def.library.function for node in f.node_def})


def test_jit_compile_runs_the_fused_ops_through_their_xla_kernels():
    """tf.function(jit_compile=True) compiles the fused ops with their XLA kernels, also from a
    function traced outside XLA and called inside it."""
    embedding = TPUEmbeddingV0(two_table_config(config), optimizers.SGD(0.1))
    features, watched_weights = batch_tensors(replica_batch(0)[0])
    weights = weights_of(watched_weights)
    expected = embedding(features, weights)
    custom_ops = {"TfeFeaturesLookup"}

    def lookup(features, weights):
        return embedding(features, weights)

    compiled = tf.function(lookup, jit_compile=True)
    inner = tf.function(lookup)
    inner(features, weights)
    calls_inner = tf.function(lambda f, w: inner(f, w), jit_compile=True)
    for function in (compiled, calls_inner):
        assert custom_ops <= op_types(function, features, weights)
        assert_close(function(features, weights), expected)


@pytest.mark.parametrize("batch_size", [3, None])
def test_pooled_features_keep_their_rows_without_reshapes(batch_size):
    """A pooled feature of rank-2 sparse or ragged ids has one activation row per sample: its
    activations are the lookup's rows, with the batch size its ids have statically, and the
    step computes no shapes for them (no Reshape, no shape ops)."""
    table = config.TableConfig(vocabulary_size=8, dim=2, combiner="mean", name="t",
                               initializer=tf.constant_initializer(np.arange(16.0)))
    embedding = TPUEmbeddingV0({"sparse": config.FeatureConfig(table),
                                "ragged": config.FeatureConfig(table)}, optimizers.SGD(0.1))
    ids = tf.ragged.constant([[1, 3], [], [5]], dtype=tf.int64)
    specs = {"sparse": tf.SparseTensorSpec([batch_size, None], tf.int64),
             "ragged": tf.RaggedTensorSpec([batch_size, None], tf.int64, 1, tf.int64)}
    lookup = tf.function(embedding, input_signature=[specs])
    graph = lookup.get_concrete_function().graph
    assert [output.shape.as_list() for output in graph.outputs] == [[batch_size, 2]] * 2
    assert not {op.type for op in graph.get_operations()} & {"Reshape", "Shape", "ConcatV2"}
    expected = [[4, 5], [0, 0], [10, 11]]  # the mean of rows 1 and 3, none, row 5
    activations = lookup({"sparse": ids.to_sparse(), "ragged": ids})
    np.testing.assert_array_equal(activations["sparse"], expected)
    np.testing.assert_array_equal(activations["ragged"], expected)


@pytest.mark.parametrize("keras_name", ["keras", "tf_keras"])
def test_training_under_jit_compile_matches_fused(keras_name):
    """Two Adagrad steps compiled by XLA give the tables of the TF-runtime path."""
    lookups, cotangents = replica_batch(0)
    features, watched_weights = batch_tensors(lookups)
    weights = weights_of(watched_weights)
    results = []
    for jit_compile in (False, True):
        embedding = TPUEmbeddingV0(two_table_config(config), optimizers.SGD(0.1))
        tables = list(embedding.embedding_tables.values())
        rng = np.random.default_rng(7)
        for table in tables:
            table.assign(rng.normal(size=table.shape).astype(np.float32))
        optimizer = KERAS[keras_name].optimizers.Adagrad(learning_rate=LEARNING_RATE)

        @tf.function(jit_compile=jit_compile)
        def training_step(features, weights):
            with tf.GradientTape() as tape:
                loss = weighted_loss(embedding(features, weights), cotangents)
            gradients = tape.gradient(loss, tables)
            optimizer.apply_gradients(zip(gradients, tables))
            return [g.indices for g in gradients]

        for _ in range(2):
            indices = training_step(features, weights)
        for table_indices in indices:
            assert_distinct(table_indices)
        results.append([table.numpy() for table in tables])
    assert_close(results[1], results[0])


def ragged_output_shape_configs(output_shape, combiner="mean"):
    def build(configs):
        table = configs.TableConfig(vocabulary_size=8, dim=2, combiner=combiner, name="video",
                                    initializer=configs.RowIdInitializer(offset=1))
        return {"f": configs.FeatureConfig(table=table, output_shape=output_shape)}

    return build(config), build(stock)


@pytest.mark.parametrize("output_shape", [[3], [3, 2], [6]])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_ragged_output_shape_with_unknown_batch(output_shape, jit_compile):
    """The batch size decides between pooling ([3]) and sequences ([3, 2], [6]) at run time."""
    ours_config, stock_config = ragged_output_shape_configs(output_shape)
    ours = TPUEmbeddingV0(ours_config, optimizers.SGD(0.1))
    theirs = stock.TPUEmbeddingForServing(stock_config, None)
    ids = {"f": tf.ragged.constant([[0, 1, 5], [], [3]], dtype=tf.int64)}
    weights = {"f": tf.ragged.constant([[2.0, 1.0, 0.5], [], [0.5]])}
    table = ours.embedding_tables[ours_config["f"].table]

    def loss_and_gradient(ids, weights):
        with tf.GradientTape() as tape:
            activations = ours(ids, weights)
            loss = tf.reduce_sum(activations["f"])
        return activations, tape.gradient(loss, table)

    traced = tf.function(loss_and_gradient, jit_compile=jit_compile, input_signature=[
        {"f": tf.RaggedTensorSpec([None, None], tf.int64, 1)},
        {"f": tf.RaggedTensorSpec([None, None], tf.float32, 1)}])
    activations, gradient = traced(ids, weights)
    assert_close(activations, theirs(ids, weights))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ours(ids, weights)["f"])
    np.testing.assert_allclose(tf.convert_to_tensor(gradient),
                               tf.convert_to_tensor(tape.gradient(loss, table)), rtol=1e-6)
    if not jit_compile:  # XLA compiles the run-time check away.
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"got output shape \(.*\), input data batch size 4"):
            traced({"f": tf.ragged.constant([[0], [1], [2], [3]], dtype=tf.int64)},
                   {"f": tf.ragged.constant([[1.0], [1.0], [1.0], [1.0]])})


def keras3_adagrad_sharing_slots():
    """The class docstring's recipe: Keras 3's `build()` reuses slots created earlier."""
    slots = {}

    class Adagrad(keras.optimizers.Adagrad):

        def add_variable_from_reference(self, reference_variable, name=None,
                                        initializer="zeros"):
            key = (id(reference_variable), name)
            if key not in slots:
                slots[key] = super().add_variable_from_reference(reference_variable, name,
                                                                 initializer)
            return slots[key]

    optimizer = Adagrad(learning_rate=LEARNING_RATE)
    return optimizer, optimizer.add_variable_from_reference


def legacy_adagrad():
    """tf_keras's legacy optimizers have TF's documented `add_slot`."""
    optimizer = tf_keras.optimizers.legacy.Adagrad(learning_rate=LEARNING_RATE)
    return optimizer, optimizer.add_slot


@pytest.mark.parametrize("make_optimizer, strategy_name", [
    (keras3_adagrad_sharing_slots, "default"), (keras3_adagrad_sharing_slots, "mirrored"),
    (legacy_adagrad, "default")])
def test_slot_variable_creation_fn_shares_slots_with_keras(make_optimizer, strategy_name,
                                                           mirrored):
    strategy = mirrored if strategy_name == "mirrored" else tf.distribute.get_strategy()
    with strategy.scope():
        keras_optimizer, create_slot = make_optimizer()

        def slot_variable_creation_fn(table, slot_names, slot_initializers):
            keras_names = {"accumulators": "accumulator"}
            return {slot: create_slot(table, keras_names[slot], initializer)
                    for slot, initializer in zip(slot_names, slot_initializers)}

        embedding = TPUEmbeddingV0(two_table_config(config), optimizers.Adagrad(
            LEARNING_RATE, slot_variable_creation_fn=slot_variable_creation_fn))
        embedding.build()
    tables = tables_by_name(embedding)
    lookups, cotangents = replica_batch(0)
    features, watched_weights = batch_tensors(lookups)
    weights = weights_of(watched_weights)

    @tf.function
    def training_step(features, weights):
        def replica_step(features, weights):
            with tf.GradientTape() as tape:
                loss = weighted_loss(embedding(features, weights), cotangents)
            gradients = tape.gradient(loss, list(tables.values()))
            keras_optimizer.apply_gradients(zip(gradients, list(tables.values())))

        strategy.run(replica_step, args=(features, weights))

    training_step(features, weights)
    gradients = numpy_gradients(lookups, cotangents)
    num_replicas = strategy.num_replicas_in_sync
    keras_variables = keras_optimizer.variables
    if callable(keras_variables):  # tf_keras legacy: a method
        keras_variables = keras_variables()
    # One accumulator per table: Keras's own, which the embedding holds as its slot.
    assert len([v for v in keras_variables if len(v.shape) == 2]) == len(tables)
    for name, gradient in gradients.items():
        slot = embedding.table_variables()[name]["accumulators"]
        assert any(slot is v for v in keras_variables)
        # Every replica has the same batch. Keras all-reduces IndexedSlices by concatenating the
        # replicas' rows, and Adagrad squares each row, so the accumulator gains R * g^2.
        np.testing.assert_allclose(
            np.asarray(slot), INITIAL_ACCUMULATOR + num_replicas * gradient**2, rtol=1e-5)


@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
def test_checkpoint_round_trips_with_stock_serving(optimizer_name, tmp_path):
    """Same keys and object graph as stock's serving object; each restores the other's
    checkpoint before build, with identical variables and lookups."""
    classes = {"ours": (TPUEmbeddingV0, config, optimizers),
               "stock": (stock.TPUEmbeddingForServing, stock, stock)}

    def make(side):
        cls, configs, embedding_optimizers = classes[side]
        return cls(feature_config(configs),
                   getattr(embedding_optimizers, optimizer_name)(**OPTIMIZERS[optimizer_name]))

    def all_variables(embedding):
        # V0, like TF's, has no `variables` property (stock's serving class has one).
        if isinstance(embedding, TPUEmbeddingV0):
            return types.SimpleNamespace(variables=embedding.table_variables())
        return embedding

    paths, values, lookups = {}, {}, {}
    for seed, side in enumerate(("ours", "stock")):
        writer = make(side)
        writer.build()
        values[side] = randomize(all_variables(writer), seed)
        lookups[side] = writer(FEATURES)
        paths[side] = save(writer, tmp_path / side)
    assert tf.train.list_variables(paths["ours"]) == tf.train.list_variables(paths["stock"])
    assert object_graph(paths["ours"]) == object_graph(paths["stock"])

    for source, target in (("ours", "stock"), ("stock", "ours")):
        reader = make(target)
        status = tf.train.Checkpoint(embedding=reader).restore(paths[source])
        # Our first call may be inside a tf.function; the variables still restore on creation.
        lookup = (tf.function(reader) if target == "ours" else reader)(FEATURES)
        status.assert_consumed()
        restored = variable_values(all_variables(reader))
        assert restored.keys() == values[source].keys()
        for name, value in values[source].items():
            np.testing.assert_array_equal(restored[name], value, err_msg=name)
        assert_close(lookup, lookups[source])
