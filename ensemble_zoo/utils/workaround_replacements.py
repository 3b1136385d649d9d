"""The replacements that `workarounds.WORKAROUNDS` installs while a zoo
model computes: each takes Keras' original function and returns the one
used in its place. The module docstring of `workarounds` gives each one's
reason, its test and the upstream fix that removes it."""

from ensemble_zoo.utils.devices import accelerator
from ensemble_zoo.utils.onednn_products import onednn_einsum
from ensemble_zoo.utils.onednn_products import onednn_matmul
from ensemble_zoo.utils.onednn_products import onednn_pays
from ensemble_zoo.utils.onednn_products import pure_contraction


def _is_cpu():
    return accelerator() == "cpu"


def float32_attention_for_float16_on_cpu(original):
    def dot_product_attention(query, key, value, *args, **kwargs):
        import jax.numpy as jnp

        query = jnp.asarray(query)
        if query.dtype != jnp.float16 or not _is_cpu():
            return original(query, key, value, *args, **kwargs)
        out = original(
            query.astype(jnp.float32),
            jnp.asarray(key).astype(jnp.float32),
            jnp.asarray(value).astype(jnp.float32),
            *args,
            **kwargs,
        )
        return out.astype(jnp.float16)

    return dot_product_attention


def cudnn_attention_only_where_it_traces(original, platform=None):
    import functools

    import jax

    platform = platform or (lambda: jax.devices()[0].platform)
    verdicts = {}  # (shapes and dtypes of query, key, value, bias) -> bool

    def _can_use_flash_attention(query, key, value, bias, raise_error=False):
        usable = original(query, key, value, bias, raise_error=raise_error)
        if not usable or raise_error or platform() != "gpu":
            return usable
        operands = [x for x in (query, key, value, bias) if x is not None]
        signature = tuple((tuple(x.shape), str(x.dtype)) for x in operands) + (bias is not None,)
        if signature not in verdicts:
            cudnn = functools.partial(jax.nn.dot_product_attention, implementation="cudnn")
            specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (query, key, value)]
            bias_spec = None if bias is None else jax.ShapeDtypeStruct(bias.shape, bias.dtype)
            try:
                jax.eval_shape(lambda q, k, v, b: cudnn(q, k, v, bias=b), *specs, bias_spec)
                verdicts[signature] = True
            except Exception:
                verdicts[signature] = False
        return verdicts[signature]

    return _can_use_flash_attention


def no_forced_flash_attention_while_compiling(original):
    import torch

    def _can_use_flash_attention(*args, raise_error=False, **kwargs):
        if not raise_error and torch.compiler.is_compiling():
            return False
        return original(*args, raise_error=raise_error, **kwargs)

    return _can_use_flash_attention


def global_generator_while_compiling(original):
    import torch

    def torch_seed_generator(seed):
        if torch.compiler.is_compiling():
            return None  # torch's global generator
        return original(seed)

    return torch_seed_generator


def numpy_scalars_as_python_numbers_while_compiling(original):
    import numpy as np
    import torch

    def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
        if isinstance(x, (np.ndarray, np.generic)) and torch.compiler.is_compiling():
            x = torch.as_tensor(x)
        return original(x, dtype=dtype, sparse=sparse, ragged=ragged)

    return convert_to_tensor


def gathered_slices_while_compiling(original):
    import torch

    def slice(inputs, start_indices, shape):
        if not torch.compiler.is_compiling() or not any(
            isinstance(s, torch.Tensor) for s in start_indices
        ):
            return original(inputs, start_indices, shape)
        result = torch.as_tensor(inputs)
        for axis, (start, size) in enumerate(zip(start_indices, shape)):
            if isinstance(start, int) and start == 0 and size == result.shape[axis]:
                continue
            index = torch.arange(int(size), device=result.device) + start
            result = torch.index_select(result, axis, index)
        return result

    return slice


def tensordot_einsum(subscripts, a, b):
    """A two-operand einsum as `torch.tensordot` and a permutation, or
    `None` where the equation is not a pure contraction (a label shared by
    both operands kept in the output, a repeated label, an ellipsis, a
    label summed within one operand)."""
    import torch

    labels = pure_contraction(subscripts, a.dim(), b.dim())
    if labels is None:
        return None
    left, right, output, shared = labels
    contracted = [c for c in left if c in shared]
    out = torch.tensordot(
        a, b, dims=([left.index(c) for c in contracted], [right.index(c) for c in contracted])
    )
    labels = [c for c in left if c not in shared] + [c for c in right if c not in shared]
    return out.permute([labels.index(c) for c in output])


def cpu_einsum_contractions(original):
    import torch
    from keras.src.backend.torch.core import convert_to_tensor

    def einsum(subscripts, *operands, **kwargs):
        if len(operands) == 2 and (torch.compiler.is_compiling() or onednn_pays()):
            a, b = (convert_to_tensor(x) for x in operands)  # Keras variables
            if a.device.type == "cpu" and a.dtype == b.dtype and a.dtype.is_floating_point:
                if torch.compiler.is_compiling():
                    out = tensordot_einsum(subscripts, a, b)
                else:
                    out = onednn_einsum(subscripts, a, b)
                if out is not None:
                    return out
        return original(subscripts, *operands, **kwargs)

    return einsum


def onednn_matmul_on_cpu(original):
    import torch
    from keras.src.backend.torch.core import convert_to_tensor

    def matmul(x1, x2):
        if not torch.compiler.is_compiling() and onednn_pays():
            out = onednn_matmul(convert_to_tensor(x1), convert_to_tensor(x2))
            if out is not None:
                return out
        return original(x1, x2)

    return matmul
