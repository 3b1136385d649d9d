"""Eager PyTorch matrix products through oneDNN on CPUs where MKL is slow.

PyTorch multiplies float32 matrices on a CPU with MKL's SGEMM. MKL picks
its kernels by CPU vendor and has no AVX2 / AVX-512 SGEMM path for AMD
processors (pytorch/builder#504: an SSE kernel on Zen): on an AMD EPYC
with 2 cores (torch 2.13) an `(8, 2048) x (2048, 16384)` product takes
13.1 ms where reading the matrix bounds it near 5, and every product of
two or more rows runs about 2x slower than oneDNN's (which PyTorch also
ships, `torch.ops.mkldnn._linear_pointwise`) on the same weights,
from 2 rows to 512 (`benchmarks/cpu_matmul.py`). A decode step multiplies
`members x batch` rows by every weight, so eager PyTorch decoding paid it
in every projection.

`onednn_einsum` and `onednn_matmul` compute a product of activations and
a weight through oneDNN's linear, reading the weight in place (a
transposed view, no copy), where that pays: eager (not while dynamo
traces, nor on the fake tensors of a recording for inductor,
`inductor_steps`: inductor has its own kernels), float32 on a CPU whose vendor is
not Intel (`onednn_pays`; on Intel CPUs MKL has its fast kernels and is
left alone, not measured here), no gradient needed (oneDNN's linear has
no backward), at least two rows or a weight whose rows are contiguous
(the tied output embedding: one row 3.3 ms against MKL's 5.9), and
`ONEDNN_MIN_MULTIPLY_ADDS` or more (oneDNN's fixed cost is about 12 µs a
call). They return `None` elsewhere and the caller runs Keras' function.
The results differ from MKL's by float32 round-off only.
"""

import functools

#: Below this many multiply-adds a product stays with MKL: oneDNN's fixed
#: cost per call (about 12 µs on 2 cores) exceeds what it saves.
ONEDNN_MIN_MULTIPLY_ADDS = 1 << 20


@functools.lru_cache(maxsize=None)
def onednn_pays():
    """Whether this process multiplies eager float32 products through
    oneDNN: PyTorch has oneDNN's linear and MKL is its BLAS on a CPU whose
    vendor is not Intel."""
    import torch

    if not (
        torch.backends.mkldnn.is_available()
        and torch.backends.mkl.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    ):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            vendors = {line.split(":")[1].strip() for line in f if line.startswith("vendor_id")}
    except OSError:
        return False
    return bool(vendors) and "GenuineIntel" not in vendors


def _applies(a, b):
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    return (
        a.dtype == torch.float32
        and b.dtype == torch.float32
        and a.device.type == "cpu"
        and b.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and not isinstance(a, FakeTensor)
        and not isinstance(b, FakeTensor)
        and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad))
    )


def _linear(x, weight):
    """`x (rows, k) @ weight (n, k).T` through oneDNN, or `None` where it
    does not pay or oneDNN refuses."""
    import torch

    rows, k = x.shape
    n = weight.shape[0]
    if rows * k * n < ONEDNN_MIN_MULTIPLY_ADDS:
        return None
    if weight.stride(1) != 1 and (rows < 2 or weight.stride(0) != 1):
        return None  # one row against a column-major weight: MKL's GEMV wins
    try:
        return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
    except RuntimeError:
        return None


def onednn_matmul(x1, x2):
    """`x1 @ x2` for `x1 (..., k)` and a 2-D `x2 (k, n)` through oneDNN, or
    `None` where it does not apply (see the module docstring).

    Args:
        x1: torch tensor, at least 2-D.
        x2: torch tensor `(k, n)`.

    Returns:
        A tensor `(..., n)` or `None`.
    """
    if x1.dim() < 2 or x2.dim() != 2 or x1.shape[-1] != x2.shape[0] or not _applies(x1, x2):
        return None
    out = _linear(x1.reshape(-1, x1.shape[-1]), x2.t())
    return None if out is None else out.reshape(*x1.shape[:-1], x2.shape[1])


def pure_contraction(subscripts, left_rank, right_rank):
    """The labels of a two-operand einsum that is a pure contraction:
    `(left, right, output, shared)` (the operands' and the output's label
    strings and the set of contracted labels), or `None` for any other
    equation (a label shared by both operands kept in the output, a
    repeated label, an ellipsis, a label summed within one operand, or
    label counts that do not match the operands' ranks)."""
    if "->" not in subscripts or "." in subscripts:
        return None
    inputs, output = subscripts.replace(" ", "").split("->")
    if inputs.count(",") != 1:
        return None
    left, right = inputs.split(",")
    shared = set(left) & set(right)
    free = (set(left) | set(right)) - shared
    if (
        len(set(left)) != len(left)
        or len(set(right)) != len(right)
        or set(output) != free
        or len(output) != len(free)
        or len(left) != left_rank
        or len(right) != right_rank
    ):
        return None
    return left, right, output, shared


def onednn_einsum(subscripts, a, b):
    """A two-operand pure contraction of activations `a` and a weight `b`
    (`EinsumDense`'s `"btd,df->btf"`, `"btnh,nhd->btd"`, ...) through
    oneDNN, or `None` where it does not apply (see the module docstring;
    also where the equation is not a pure contraction, or the weight
    cannot be read as an `(outputs, contracted)` matrix without a copy
    and its outer axis is contracted: where that axis is an output axis,
    one product per slice of it).

    Args:
        subscripts: str, the einsum equation.
        a: torch tensor, the activations (their free axes are the rows).
        b: torch tensor, the weight.

    Returns:
        A tensor or `None`.
    """
    labels = pure_contraction(subscripts, a.dim(), b.dim())
    if labels is None or not labels[3] or not _applies(a, b):
        return None
    left, right, output, shared = labels
    if any(a.shape[left.index(c)] != b.shape[right.index(c)] for c in shared):
        return None  # a broadcast contracted axis: torch.einsum's
    contracted = [c for c in right if c in shared]
    rows_labels = [c for c in left if c not in shared]
    out_labels = [c for c in right if c not in shared]
    k = 1
    for c in contracted:
        k *= b.shape[right.index(c)]
    n = b.numel() // max(k, 1)
    try:
        weight = b.permute([right.index(c) for c in out_labels + contracted]).view(n, k)
    except RuntimeError:
        # Not viewable as (n, k) without a copy, as Gemma's query kernel
        # `(heads, model, head_dim)` in "btd,ndh->btnh": one product per
        # slice of the weight's outer axis where that is an output axis
        # (each slice reads in place), instead of torch.einsum's copy of
        # the whole weight at every call.
        return _per_outer_slice(subscripts, a, b, labels)
    x = a.permute([left.index(c) for c in rows_labels + contracted]).reshape(-1, k)
    out = _linear(x, weight)
    if out is None:
        return None
    shape = [a.shape[left.index(c)] for c in rows_labels]
    shape += [b.shape[right.index(c)] for c in out_labels]
    labels = rows_labels + out_labels
    return out.reshape(shape).permute([labels.index(c) for c in output])


def _per_outer_slice(subscripts, a, b, labels):
    """`onednn_einsum` of each slice `b[i]` of the weight's outer axis,
    stacked on that axis's place in the output, or `None` where that axis
    is contracted or a slice does not apply."""
    import torch

    left, right, output, shared = labels
    outer = right[0]
    if outer in shared:
        return None
    sliced = f"{left},{right[1:]}->{output.replace(outer, '')}"
    parts = []
    for i in range(b.shape[0]):
        parts.append(onednn_einsum(sliced, a, b[i]))
        if parts[-1] is None:
            return None
    return torch.stack(parts, dim=output.index(outer)) if parts else None
