"""Timing helpers shared by the benchmark scripts."""

import os
import threading
import time

import keras
import numpy as np


def compiled_call(model):
    """A function running one forward pass, compiled the backend's best way.

    `jax.jit` of `stateless_call` under JAX (compiled ahead of time once per
    input shape, with the weights as arguments, not constants),
    `tf.function(jit_compile=True)` under TensorFlow, eager
    `torch.no_grad()` under PyTorch (`torch.compile` with
    `TORCH_COMPILE["enabled"]`, its first call eager as the zoo's own
    compiled steps run theirs). Every model, keras-hub's baselines
    included, runs inside the zoo's workarounds (`zoo_workarounds`), so a
    baseline is compiled as the zoo's models are (no graph break in
    attention under `torch.compile`, no cuDNN fallback log under JAX on a
    GPU). Returns NumPy, so the time includes
    waiting for the result. Under JAX the function has a `compiled(x)`
    attribute giving the executable for `x`'s shape (its
    `memory_analysis()` is what `peak_memory_mb` reports).
    """
    from ensemble_zoo.utils.workarounds import zoo_workarounds

    backend = keras.config.backend()
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def forward(t, n, x):
            with zoo_workarounds():
                return model.stateless_call(t, n, x, training=False)[0]

        fn = jax.jit(forward)
        executables = {}

        def compiled(x):
            key = (tuple(x.shape), str(x.dtype))
            if key not in executables:
                executables[key] = fn.lower(trainable, non_trainable, x).compile()
            return executables[key]

        def call(x):
            return jax.tree_util.tree_map(np.asarray, compiled(x)(trainable, non_trainable, x))

        call.compiled = compiled
        return call
    if backend == "tensorflow":
        import tensorflow as tf

        fn = tf.function(lambda x: model(x, training=False), jit_compile=True)
        return lambda x: keras.tree.map_structure(lambda t: t.numpy(), fn(x))
    import torch

    def forward(x):
        with zoo_workarounds():
            return model(x, training=False)

    if TORCH_COMPILE["enabled"]:
        from ensemble_zoo.utils.backend import with_tracing_depth

        # As the zoo's own compiled steps: the first call runs eagerly (a
        # layer's first call sets state that dynamo breaks the graph on),
        # and dynamo traces with a raised recursion limit.
        compiled, eager = with_tracing_depth(torch.compile(forward)), forward
        first = [True]

        def forward(x):
            if first[0]:
                first[0] = False
                return eager(x)
            return compiled(x)

    def call(x):
        with torch.no_grad():
            return keras.tree.map_structure(keras.ops.convert_to_numpy, forward(x))

    return call


#: Under PyTorch, whether `compiled_call` uses `torch.compile` (set by
#: `run_all.py --torch-compile`; eager otherwise).
TORCH_COMPILE = {"enabled": False}


def torch_compile_counts():
    """`(graphs, graph_breaks)` dynamo has compiled and met so far in this
    process (PyTorch); every recompilation is one more graph."""
    from torch._dynamo.utils import counters

    return (int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values())))


def interleaved_ms(groups, x, repeats, *args):
    """Median ms of each group of fns (the group's fns summed), the groups
    timed in turn within every repeat so that a change in the load of a
    shared machine hits them alike; two warm-up rounds first.

    Args:
        groups: dict mapping a name to a list of functions of `(x, *args)`.
        x: the input.
        repeats: int, the number of timed rounds.

    Returns:
        dict mapping each name to its median milliseconds.
    """
    for fns in groups.values():
        for fn in fns:
            fn(x, *args)
            fn(x, *args)
    times = {name: [] for name in groups}
    for _ in range(repeats):
        for name, fns in groups.items():
            start = time.perf_counter()
            for fn in fns:
                fn(x, *args)
            times[name].append(time.perf_counter() - start)
    return {name: 1000.0 * float(np.median(t)) for name, t in times.items()}


def median_ms(fns, x, repeats, *args):
    """Median over `repeats` of the summed time of running every fn once
    on `x` (and `args`), after two warm-up rounds."""
    return interleaved_ms({"fns": fns}, x, repeats, *args)["fns"]


def train_step(model):
    """A function `(x, y)` running one `train_on_batch` of a compiled model
    and waiting for the update (dispatch is asynchronous under JAX)."""

    def step(x, y):
        model.train_on_batch(x, y)
        keras.ops.convert_to_numpy(model.trainable_variables[0])

    return step


def device_name():
    """The device the backend computes on, in words (e.g. `"NVIDIA H100
    80GB HBM3"`, `"cpu (2 cores)"`)."""
    import os

    from ensemble_zoo.utils.backend import accelerator

    backend = keras.config.backend()
    if accelerator() == "cpu":
        return f"cpu ({os.cpu_count()} cores)"
    if backend == "jax":
        import jax

        return jax.devices()[0].device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0)
    import tensorflow as tf

    gpu = tf.config.list_physical_devices("GPU")[0]
    return tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)


def _outputs(model, x, training):
    out = model(x, training=training)
    return out if not isinstance(out, dict) else next(iter(out.values()))


def peak_memory_mb(model, x, train=False, call=None):
    """Peak memory (MiB) of one forward pass (`train=False`) or one forward
    and backward pass (`train=True`, gradients of a mean-square of the
    outputs for every trainable variable), beyond weights and inputs.

    JAX: the compiled executable's memory analysis (temporaries plus
    outputs), which XLA reports on every device, CPU included; pass the
    model's `compiled_call` as `call` to reuse its executable. PyTorch and
    TensorFlow on GPU: the allocator's peak minus what was allocated
    before. `None` where neither exists (PyTorch and TensorFlow on CPU).
    """
    from ensemble_zoo.utils.backend import accelerator

    backend = keras.config.backend()
    if backend == "jax":
        import jax

        if not train:
            executable = (call or compiled_call(model)).compiled(x)
        else:
            non_trainable = [v.value for v in model.non_trainable_variables]

            def loss(t, x):
                out = _first(model.stateless_call(t, non_trainable, x, training=True)[0])
                return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32")))

            trainable = [v.value for v in model.trainable_variables]
            executable = jax.jit(jax.grad(loss)).lower(trainable, x).compile()
        stats = executable.memory_analysis()
        if stats is None:
            return None
        return (stats.temp_size_in_bytes + stats.output_size_in_bytes) / 2**20
    if accelerator() == "cpu":
        return None
    if backend == "torch":
        import torch

        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if train:
            out = _first(model(x, training=True)).float()
            keras.ops.mean(keras.ops.square(out)).backward()
            for v in model.trainable_variables:
                v.value.grad = None
        else:
            with torch.no_grad():
                model(x, training=False)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    import tensorflow as tf

    tf.config.experimental.reset_memory_stats("GPU:0")
    before = tf.config.experimental.get_memory_info("GPU:0")["current"]
    if train:
        with tf.GradientTape() as tape:
            out = tf.cast(_first(model(x, training=True)), "float32")
            loss = tf.reduce_mean(tf.square(out))
        tape.gradient(loss, model.trainable_variables)
    else:
        model(x, training=False)
    return (tf.config.experimental.get_memory_info("GPU:0")["peak"] - before) / 2**20


def _first(outputs):
    """The first output of a model that may return a dict."""
    return outputs if not isinstance(outputs, dict) else next(iter(outputs.values()))


def resident_bytes():
    """The process's resident memory now (Linux `/proc/self/statm`)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_above_start(fn):
    """`(result, peak resident bytes above the start, seconds)` of `fn()`,
    the resident memory sampled every 5 ms while it runs."""
    start = resident_bytes()
    peak = [start]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], resident_bytes())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    try:
        result = fn()
    finally:
        seconds = time.perf_counter() - began
        done.set()
        sampler.join()
    peak[0] = max(peak[0], resident_bytes())
    return result, peak[0] - start, seconds
