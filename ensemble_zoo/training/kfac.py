"""Kronecker-factored curvature (K-FAC) of a LoRA model's adapters.

For a linear map `y = x W` (`W`: `(d_in, d_out)`) K-FAC approximates the
loss curvature over `W` by a Kronecker product of an input factor (the
inputs' second moment) and an output factor (the output gradients'). This
module computes both for the two matrices of every `LoRAEnsembleAdapter`
of a one-member LoRA model, `A` (`d_in -> rank`) and `B` (`rank -> d_out`),
as laplace-torch's `KronLaplace` does for `torch.nn.Linear` layers with its
default curvature (curvlinops' exact generalized Gauss-Newton K-FAC): for
the softmax cross-entropy, each example's output-gradient outer products
are summed over the `C` columns of the square root of the logits'
Hessian `diag(p) - p p^T` (`sqrt(p_c) (e_c - p)`, one backward pass each),
which is the Fisher the Laplace-LoRA authors' code estimates from one
sampled label per example. A layer applied at several positions (tokens,
patches) counts every position: curvlinops' K-FAC-expand (Eschenhagen et
al. 2023, "Kronecker-Factored Approximate Curvature for Modern Neural
Network Architectures"), the input factor the mean over examples and
positions, the output factor the sum, as laplace-torch holds them (their
product is the curvature of the summed loss).

Keras has no hooks: the factors come from an analysis copy of the model
whose adapters are wrapped so that each records its input and adds a zero
"probe" variable to its output, whose gradient is the output gradient of
every row (`utils.gradients.loss_gradients`, on every backend). The
caller's model is not changed.
"""

import math

import keras
import numpy as np
from keras import ops

from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.models.member_sites import layers_in_order
from ensemble_zoo.models.wrapped_models_backbone import copy_wrapped_model
from ensemble_zoo.utils.gradients import loss_gradients
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.sublayers import sublayers
from ensemble_zoo.utils.validation import check_positive_int


class AdapterProbe(keras.layers.Layer):
    """An adapter of the analysis copy: records its input rows and adds a
    zero, trainable `probe` `(rows, d_out)` to its output (the gradient of
    the loss with respect to `probe` is each row's output gradient)."""

    def __init__(self, adapter, **kwargs):
        super().__init__(name=f"{adapter.name}_probe", **kwargs)
        self.adapter = adapter

    def build(self, input_shape):
        adapter = self.adapter
        rows = math.prod(input_shape[: len(input_shape) - adapter.n_in])
        self.recorded = self.add_weight(
            shape=(rows, adapter.d_in), initializer="zeros", trainable=False, name="recorded"
        )
        self.probe = self.add_weight(shape=(rows, adapter.d_out), initializer="zeros", name="probe")

    def call(self, inputs):
        outputs = self.adapter(inputs)
        rows = ops.reshape(ops.cast(inputs, self.recorded.dtype), self.recorded.shape)
        self.recorded.assign(ops.stop_gradient(rows))
        return outputs + ops.cast(ops.reshape(self.probe, ops.shape(outputs)), outputs.dtype)


def lora_adapters(model):
    """Every `LoRAEnsembleAdapter` under `model`, in layer order, with its
    parent and attribute: `[(parent, attribute, adapter)]`."""
    found = []
    for parent in layers_in_order(model):
        for attribute, layer in sublayers(parent):
            if isinstance(layer, LoRAEnsembleAdapter):
                found.append((parent, attribute, layer))
    return found


def logits_of(output):
    """`(batch, classes)` logits of a classifier's output, a one-member
    LoRA-Ensemble's `(batch, 1, classes)` included, or a one-member causal
    LM's token logits `(batch, length, vocabulary)` from `(batch, 1,
    length, vocabulary)`."""
    output = np.asarray(ops.convert_to_numpy(output), np.float64)
    if output.ndim in (3, 4) and output.shape[1] == 1:
        return output[:, 0]
    if output.ndim != 2:
        raise ValueError(
            "K-FAC needs a classifier returning logits (batch, classes) or one member's "
            "(batch, 1, classes), or a one-member causal LM's (batch, 1, length, "
            f"vocabulary); got shape {output.shape}."
        )
    return output


def _probed_copy(model):
    copy = copy_wrapped_model(model)
    probes = []
    for parent, attribute, adapter in lora_adapters(copy):
        probe = AdapterProbe(adapter)
        replace_sublayer(parent, attribute, probe)
        probes.append(probe)
    return copy, probes


def _sampled_tokens_loss(targets, y_pred):
    """The summed cross-entropy of sampled next tokens: `targets` is
    `(token ids, weights)`, each `(batch, length)`."""
    ids, weights = targets
    logits = ops.cast(y_pred[:, 0], "float32")
    taken = ops.take_along_axis(logits, ops.expand_dims(ops.cast(ids, "int32"), -1), axis=-1)
    loss = ops.logsumexp(logits, axis=-1) - taken[..., 0]
    return ops.sum(loss * ops.cast(weights, loss.dtype))


def _contracted(weights, y_pred):
    """The sum of the logits times `weights` (a column of the square root
    of the logits' Hessian): its gradient is that column pulled back."""
    logits = y_pred[:, 0] if len(y_pred.shape) == 3 else y_pred
    return ops.sum(logits * ops.cast(weights, logits.dtype))


def kfac_factors(model, x, batch_size=32, seed=None):
    """The K-FAC factors of every adapter matrix of a one-member LoRA model.

    Args:
        model: a built Keras classifier returning logits (a one-member
            LoRA-Ensemble classifier, `(batch, 1, classes)`, or any model
            with `LoRAEnsembleAdapter` layers of one member inside its
            layers, `(batch, classes)`). It is not changed.
        x: the inputs it takes (an array, or a dict of arrays), the
            examples the curvature is summed over (the training set).
        batch_size: int, examples per backward pass.
        seed: optional int, for a causal LM's sampled tokens.

    A one-member `LoRAEnsembleCausalLM` (token logits) takes the Fisher of
    its next-token distributions with one token sampled per position from
    the model itself (the Laplace-LoRA authors' estimate; the exact GGN
    would take a backward pass per vocabulary entry), counting the
    positions of `x["padding_mask"]`. A classifier's positions all count,
    padded tokens included, as laplace-torch counts a layer's positions
    (their output gradients are near 0 where attention masks them).

    Returns:
        A list with one dict per adapter (`lora_adapters` order): `"a"` and
        `"b"`, each `(input_factor, output_factor)` float64 arrays of the
        matrix `A` `(d_in, rank)` resp. `B` `(rank, d_out)` (the input
        factor the mean over examples and positions, the output factor the
        sum, so that the curvature of the summed loss is their Kronecker
        product), and `"num_examples"`.

    Raises:
        ValueError: the model has no adapter, or one with more than one
            member (Laplace-LoRA starts from one standard LoRA fine-tune).
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    adapters = [adapter for _, _, adapter in lora_adapters(model)]
    if not adapters:
        raise ValueError(
            f"`{model.name}` has no LoRAEnsembleAdapter: K-FAC over LoRA adapters needs a "
            "LoRA model (e.g. a one-member LoRA-Ensemble classifier)."
        )
    for adapter in adapters:
        if adapter.num_members != 1:
            raise ValueError(
                "K-FAC takes a model with one member (one standard LoRA fine-tune); its "
                f"adapter '{adapter.name}' has {adapter.num_members} members."
            )
    lead = x[next(iter(x))] if isinstance(x, dict) else x
    count = len(lead)
    kernels = [
        (
            np.asarray(ops.convert_to_numpy(a.lora_a[0]), np.float64),
            np.asarray(ops.convert_to_numpy(a.lora_b[0]), np.float64),
            a.scale,
        )
        for a in adapters
    ]
    sums = [
        {k: np.zeros((n, n)) for k, n in (("a_in", a.d_in), ("a_out", a.rank),
                                           ("b_in", a.rank), ("b_out", a.d_out))}
        for a in adapters
    ]  # fmt: skip
    copies = {}
    positions = [0.0] * len(adapters)  # each adapter's counted rows (examples x tokens)
    rng = np.random.default_rng(seed)
    for start in range(0, count, batch_size):
        batch = (
            {k: v[start : start + batch_size] for k, v in x.items()}
            if isinstance(x, dict)
            else x[start : start + batch_size]
        )
        size = min(batch_size, count - start)
        if size not in copies:
            copies[size] = _probed_copy(model)
        copy, probes = copies[size]
        logits = logits_of(copy(batch, training=False))
        inputs = [np.asarray(ops.convert_to_numpy(p.recorded), np.float64) for p in probes]
        if logits.ndim == 3:  # token logits: sampled next tokens
            mask = batch.get("padding_mask") if isinstance(batch, dict) else None
            weights = np.ones(logits.shape[:2]) if mask is None else np.asarray(mask, np.float64)
            gumbel = rng.gumbel(size=logits.shape)
            targets = (np.argmax(logits + gumbel, -1).astype("int32"), weights.astype("float32"))
            passes = [(_sampled_tokens_loss, targets)]
            row_weights = weights.reshape(-1)
        else:
            shifted = np.exp(logits - logits.max(-1, keepdims=True))
            p = shifted / shifted.sum(-1, keepdims=True)
            # The columns of the square root of diag(p) - p p^T.
            passes = [
                (_contracted, (np.sqrt(p[:, c : c + 1]) * (np.eye(p.shape[1])[c] - p)))
                for c in range(p.shape[1])
            ]
            passes = [(f, t.astype("float32")) for f, t in passes]
            row_weights = None
        for loss_fn, targets in passes:
            grads = loss_gradients(copy, loss_fn, batch, targets, [q.probe for q in probes])
            for total, (a, b, scale), g in zip(sums, kernels, grads, strict=True):
                g = scale * np.asarray(g, np.float64)
                g_z = g @ b.T
                total["a_out"] += g_z.T @ g_z
                total["b_out"] += g.T @ g
        for i, (total, (a, _, _), rows) in enumerate(zip(sums, kernels, inputs, strict=True)):
            if row_weights is None:
                weights = np.ones(len(rows))
            else:  # the member-major rows of a causal LM: (batch, length)
                weights = row_weights
            z = rows @ a
            total["a_in"] += (rows * weights[:, None]).T @ rows
            total["b_in"] += (z * weights[:, None]).T @ z
            positions[i] += float(weights.sum())
    return [
        {
            "a": (total["a_in"] / rows, total["a_out"]),
            "b": (total["b_in"] / rows, total["b_out"]),
            "num_examples": count,
        }
        for total, rows in zip(sums, positions, strict=True)
    ]
