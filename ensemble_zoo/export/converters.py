"""Writes a `ServingModel` in each export format: the export's
backend-specific code, one function per format.

Each writer gives the artifact one input per model input (named after the
input spec, `"images"` for image models) and one output per serving
output, named where the format has names, with a dynamic batch size.
"""

import os
import tempfile

import keras
import numpy as np

from ensemble_zoo.utils import backend as backend_utils

# The ONNX opset that every backend's converter writes.
ONNX_OPSET = 18


def flat_specs(input_signature):
    """The input specs in the order each format lists its inputs."""
    return keras.tree.flatten(input_signature)


def input_names(input_signature):
    specs = flat_specs(input_signature)
    if isinstance(input_signature[0], dict):
        return list(sorted(input_signature[0]))
    return [getattr(s, "name", None) or f"input_{i}" for i, s in enumerate(specs)]


def serving_fn(serving, positional):
    """`serving`'s call; `positional`: outputs as a tuple in name order."""

    def fn(*args):
        outputs = serving(*args)
        if positional:
            return tuple(outputs[name] for name in serving.serving_names)
        return outputs

    return fn


# === TensorFlow SavedModel and LiteRT ===


def write_saved_model(serving, filepath, input_signature, verbose=None, **kwargs):
    backend_utils.write_saved_model(
        serving,
        filepath,
        serving_fn(serving, positional=False),
        input_signature,
        verbose=verbose,
        **kwargs,
    )


def write_litert(serving, filepath, input_signature, verbose=None, **kwargs):
    """TensorFlow: a SavedModel first (its `serve` signature names the
    outputs), then TensorFlow's LiteRT converter with LiteRT's built-in ops
    only, so that the plain LiteRT runtime (`ai_edge_litert`) runs the
    file. PyTorch: `litert-torch` (see `_litert_from_torch`)."""
    if keras.config.backend() == "torch":
        return _litert_from_torch(serving, filepath, input_signature, **kwargs)
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as directory:
        write_saved_model(serving, directory, input_signature)
        converter = tf.lite.TFLiteConverter.from_saved_model(directory, signature_keys=["serve"])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        for key, value in kwargs.items():
            if not hasattr(converter, key):
                raise ValueError(
                    f"Unknown LiteRT converter option {key!r}; see `tf.lite.TFLiteConverter`."
                )
            setattr(converter, key, value)
        flatbuffer = converter.convert()
    with open(filepath, "wb") as f:
        f.write(flatbuffer)


def _litert_from_torch(serving, filepath, input_signature, **kwargs):
    """`litert-torch` (an optional package: `pip install litert-torch`)
    converts the `torch.export` program of `serving` into a `serve`
    signature whose inputs keep their names. Every size is static:
    litert-torch 0.10 cannot lower a dynamic batch size, so `export_model`
    fixes unknown sizes to 1 first, as Keras does. (`check_format` has
    checked that the package is installed.)"""
    x64 = _jax_x64()
    import litert_torch
    import torch

    names = input_names(input_signature)

    class NamedInputs(torch.nn.Module):
        # litert-torch names a signature's inputs after the keyword
        # arguments of `forward`.
        def __init__(self):
            super().__init__()
            self.serving = serving

        def forward(self, **inputs):
            flat = [inputs[name] for name in names]
            return self.serving(*keras.tree.pack_sequence_as(input_signature, flat))

    samples, _ = torch_sample_and_dynamic_shapes(input_signature)
    sample_kwargs = dict(zip(names, keras.tree.flatten(samples)))
    serving.eval()
    try:
        converter = litert_torch.signature(
            "serve", NamedInputs().eval(), sample_kwargs=sample_kwargs
        )
        converter.convert(**kwargs).export(filepath)
    finally:
        _restore_jax_x64(x64)


def _jax_x64():
    """JAX's `jax_enable_x64` where JAX is imported: importing litert-torch
    turns it on for the whole process (Keras' own LiteRT export restores
    it the same way)."""
    import sys

    jax = sys.modules.get("jax")
    return None if jax is None else bool(jax.config.jax_enable_x64)


def _restore_jax_x64(value):
    import sys

    jax = sys.modules.get("jax")
    if jax is not None:
        jax.config.update("jax_enable_x64", bool(value))


# === ONNX ===


def write_onnx(serving, filepath, input_signature, verbose=None, opset_version=None):
    opset = opset_version or ONNX_OPSET
    backend = keras.config.backend()
    if backend == "tensorflow":
        _onnx_from_tensorflow(serving, filepath, input_signature, opset)
    elif backend == "jax":
        _onnx_from_jax(serving, filepath, input_signature, opset)
    else:
        _onnx_from_torch(serving, filepath, input_signature, opset)
    name_onnx_io(filepath, input_names(input_signature), serving.serving_names)


def _erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx 1.17 has no converter for TensorFlow's `Erfc`, which
    `tf.nn.gelu(approximate=False)` uses: `erfc(x) = 1 - erf(x)`."""
    from tf2onnx import utils

    node.type = "Erf"
    one = ctx.make_const(utils.make_name("erfc_one"), np.array(1, np.float32))
    sub = ctx.insert_new_node_on_output(
        "Sub", node.output[0], name=utils.make_name(f"{node.name}_erfc")
    )
    ctx.replace_inputs(sub, [one.output[0], node.output[0]])
    return node


def _onnx_from_tensorflow(serving, filepath, input_signature, opset):
    """The serving function frozen into a GraphDef (weights and captured
    constants become constants), converted by tf2onnx."""
    import tensorflow as tf
    import tf2onnx
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    def tensor_spec(spec, name):
        return tf.TensorSpec(spec.shape, spec.dtype, name=name)

    if isinstance(input_signature[0], dict):
        specs = [{k: tensor_spec(v, k) for k, v in input_signature[0].items()}]
    else:
        names = input_names(input_signature)
        specs = [tensor_spec(s, n) for s, n in zip(input_signature, names)]
    function = tf.function(serving_fn(serving, positional=True))
    concrete = function.get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete)
    tf2onnx.convert.from_graph_def(
        frozen.graph.as_graph_def(),
        input_names=[t.name for t in frozen.inputs],
        output_names=[t.name for t in frozen.outputs],
        opset=opset,
        custom_op_handlers={"Erfc": (_erfc_as_one_minus_erf, [])},
        output_path=filepath,
    )


def symbolic_dims(spec):
    """`spec`'s shape with each unknown size named by its axis (`"batch"`,
    then `"d1"`, ...): inputs share their unknown sizes (a text model's
    token ids and padding mask have one batch size and one length)."""
    return [("batch" if j == 0 else f"d{j}") if d is None else d for j, d in enumerate(spec.shape)]


def _onnx_from_jax(serving, filepath, input_signature, opset):
    """The serving function traced to a jaxpr by JAX itself (symbolic batch
    size, weights as constants), then that jaxpr converted by jax2onnx.

    jax2onnx traces through its own patched `jax.numpy`, whose `tile`
    binds its argument without converting a Keras variable (keras-hub's
    ViT class token) to an array, which JAX 0.10 refuses; evaluating the
    jaxpr that JAX traced binds arrays only.
    """
    import jax
    from jax2onnx import to_onnx

    specs = flat_specs(input_signature)
    # One symbolic scope for every input, so equal names are one size.
    names = sorted({d for s in specs for d in symbolic_dims(s) if isinstance(d, str)})
    symbols = dict(zip(names, jax.export.symbolic_shape(",".join(names)))) if names else {}
    shapes = [
        jax.ShapeDtypeStruct(
            tuple(symbols.get(d, d) if isinstance(d, str) else d for d in symbolic_dims(s)), s.dtype
        )
        for s in specs
    ]
    trainable = [v.value for v in serving.trainable_variables]
    non_trainable = [v.value for v in serving.non_trainable_variables]

    def stateless(*flat):
        args = keras.tree.pack_sequence_as(input_signature, flat)
        outputs, _ = serving.stateless_call(trainable, non_trainable, *args)
        return tuple(outputs[name] for name in serving.serving_names)

    closed = jax.make_jaxpr(stateless)(*shapes)

    def replay(*flat):
        return tuple(_replay_jaxpr(closed.jaxpr, closed.consts, flat))

    to_onnx(
        replay,
        inputs=shapes,  # the jaxpr's own symbolic sizes
        input_names=input_names(input_signature),
        opset=opset,
        return_mode="file",
        output_path=str(filepath),
    )


def _replay_jaxpr(jaxpr, consts, args):
    """`jax.core.eval_jaxpr`, with nested `jit` calls inlined and each
    `broadcast_in_dim` that adds a symbolic axis done in two steps: a static
    reshape that adds the new axes with size 1, then a broadcast of equal
    rank.

    jax2onnx 0.17 converts a broadcast such as keras-hub's position
    embeddings, `(10, 16) -> (batch, 10, 16)`, into a graph that records
    the static 10 as the batch size: a text classifier's ONNX graph then
    fails a Reshape in ONNX Runtime. The two steps compute the same values
    and convert correctly (`test_export`'s text test under JAX fails
    without them).
    """
    from jax import lax
    from jax.extend.core import DropVar
    from jax.extend.core import Literal

    env = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    def write(v, value):
        if not isinstance(v, DropVar):
            env[v] = value

    for v, value in zip(jaxpr.constvars, consts):
        write(v, value)
    for v, value in zip(jaxpr.invars, args):
        write(v, value)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name in ("jit", "pjit", "closed_call"):
            inner = eqn.params["jaxpr"]
            outs = _replay_jaxpr(inner.jaxpr, inner.consts, invals)
        elif name == "broadcast_in_dim" and _adds_symbolic_axis(eqn.params):
            shape = eqn.params["shape"]
            kept = eqn.params["broadcast_dimensions"]
            operand = invals[0]
            ones = [1] * len(shape)
            for i, axis in enumerate(kept):
                ones[axis] = operand.shape[i]
            operand = lax.reshape(operand, tuple(ones))
            outs = [lax.broadcast_in_dim(operand, shape, tuple(range(len(shape))))]
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            outs = eqn.primitive.bind(*invals, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, value in zip(eqn.outvars, outs):
            write(v, value)
    return [read(v) for v in jaxpr.outvars]


def _adds_symbolic_axis(params):
    kept = params["broadcast_dimensions"]
    return any(
        not isinstance(d, (int, np.integer))
        for axis, d in enumerate(params["shape"])
        if axis not in kept
    )


def torch_sample_and_dynamic_shapes(input_signature, named=True):
    """Sample inputs and `torch.export` dynamic shapes for a Keras layer,
    whose `forward` takes `*args`.

    `named=True`: every unknown size is a `torch.export.Dim` named by its
    axis (`"batch"`, `"d1"`, ...), shared by the inputs, from 1 up; each
    sample size is 2. `named=False`: every unknown size is
    `Dim.DYNAMIC`, and the axes get distinct sample sizes (2, 3, ...) so
    that torch does not take two different axes for one size.
    """
    import torch

    dims = {}

    def name(j):
        return "batch" if j == 0 else f"d{j}"

    def dim(j):
        if not named:
            return torch.export.Dim.DYNAMIC
        if name(j) not in dims:
            dims[name(j)] = torch.export.Dim(name(j), min=1, max=1 << 20)
        return dims[name(j)]

    def sample(spec):
        shape = [(2 if named else 2 + j) if d is None else d for j, d in enumerate(spec.shape)]
        return torch.zeros(shape, dtype=getattr(torch, str(spec.dtype)))

    def dynamic(spec):
        return {j: dim(j) for j, d in enumerate(spec.shape) if d is None}

    def by_name(structure):
        # torch flattens a dict in insertion order; the artifacts name their
        # inputs in sorted order, as TensorFlow and JAX flatten dicts.
        if isinstance(structure, dict):
            return {k: structure[k] for k in sorted(structure)}
        return structure

    samples = tuple(by_name(keras.tree.map_structure(sample, s)) for s in input_signature)
    dynamic_shapes = (
        tuple(by_name(keras.tree.map_structure(dynamic, s)) for s in input_signature),
    )
    return samples, dynamic_shapes


def export_torch_program(serving, input_signature, **kwargs):
    """`torch.export` with a dynamic batch size.

    Named dimensions first: torch proves every guard for all sizes from 1
    up, or names the one it cannot. Where that fails (BatchEnsemble and
    the subnetwork ensemble: merging `(members, batch)` into one axis
    gives a stride `Min(8, 8 * batch)` whose guard torch 2.13 cannot
    simplify, though it holds for every size), `Dim.DYNAMIC` lets torch
    keep the guards it needs. The export's verification runs the program
    at batch sizes 1 and 3 either way.
    """
    import torch

    serving.eval()
    kwargs.setdefault("strict", False)
    try:
        samples, dynamic_shapes = torch_sample_and_dynamic_shapes(input_signature)
        return torch.export.export(serving, samples, dynamic_shapes=dynamic_shapes, **kwargs)
    except Exception as error:  # noqa: BLE001 (torch.export's UserError)
        if "Constraints violated" not in str(error):
            raise
        samples, dynamic_shapes = torch_sample_and_dynamic_shapes(input_signature, named=False)
        return torch.export.export(serving, samples, dynamic_shapes=dynamic_shapes, **kwargs)


def _onnx_from_torch(serving, filepath, input_signature, opset):
    """`torch.onnx`'s dynamo exporter, from the `torch.export` program that
    the `"torch"` format writes; where that program cannot keep the batch
    size dynamic (BatchEnsemble's member tiling), from the module, with
    `torch.onnx`'s own export strategies. `name_onnx_io` then names the
    inputs and outputs, in the order torch flattens them."""
    import torch

    try:
        model, samples, dynamic_shapes = (export_torch_program(serving, input_signature), (), None)
    except Exception:  # noqa: BLE001 (torch.onnx tries its own strategies)
        samples, dynamic_shapes = torch_sample_and_dynamic_shapes(input_signature)
        model = serving
    serving.eval()
    program = torch.onnx.export(
        model,
        samples,
        dynamo=True,
        opset_version=opset,
        dynamic_shapes=dynamic_shapes,
        verbose=False,
    )
    program.optimize()
    program.save(filepath)


def name_onnx_io(filepath, inputs, outputs):
    """Renames the ONNX graph's inputs and outputs (in order) to `inputs`
    and `outputs`, in every node that reads or writes them."""
    import onnx

    model = onnx.load(filepath)
    graph = model.graph
    renames = {}
    for value, name in zip(graph.input, inputs):
        renames[value.name] = name
    for value, name in zip(graph.output, outputs):
        renames[value.name] = name
    renames = {k: v for k, v in renames.items() if k != v}
    if renames:
        for node in graph.node:
            node.input[:] = [renames.get(n, n) for n in node.input]
            node.output[:] = [renames.get(n, n) for n in node.output]
        for value in list(graph.input) + list(graph.output) + list(graph.value_info):
            value.name = renames.get(value.name, value.name)
        onnx.save(model, filepath)


# === PyTorch ExportedProgram ===


def write_torch(serving, filepath, input_signature, verbose=None, **kwargs):
    import torch

    torch.export.save(export_torch_program(serving, input_signature, **kwargs), filepath)


# === OpenVINO ===


def write_openvino(serving, filepath, input_signature, verbose=None, **kwargs):
    """OpenVINO's converter reads the PyTorch program under PyTorch and
    the ONNX export under TensorFlow and JAX (OpenVINO cannot read a JAX
    function's SavedModel, an `XlaCallModule`), and under PyTorch where
    `torch.export` cannot keep the batch size dynamic. Weights stay
    float32 (`compress_to_fp16=False`)."""
    import openvino as ov

    model = None
    if keras.config.backend() == "torch":
        try:
            program = export_torch_program(serving, input_signature)
        except Exception:  # noqa: BLE001 (the ONNX route below)
            program = None
        if program is not None:
            model = ov.convert_model(program)
            # The program's outputs come in the serving dict's order.
            for output, name in zip(model.outputs, serving.serving_names):
                output.get_tensor().set_names({name})
            for value, name in zip(model.inputs, input_names(input_signature)):
                value.get_tensor().set_names({name})
    if model is None:
        # The ONNX export's inputs and outputs are named already.
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.onnx")
            write_onnx(serving, path, input_signature)
            model = ov.convert_model(path)
        # A port may carry graph-internal names beside the exported one:
        # keep the exported one only.
        wanted = set(serving.serving_names) | set(input_names(input_signature))
        for port in list(model.outputs) + list(model.inputs):
            names = port.get_names() & wanted
            if len(names) == 1:
                port.get_tensor().set_names(names)
    ov.save_model(model, filepath, compress_to_fp16=False)


WRITERS = {
    "tf_saved_model": write_saved_model,
    "onnx": write_onnx,
    "litert": write_litert,
    "torch": write_torch,
    "openvino": write_openvino,
}
