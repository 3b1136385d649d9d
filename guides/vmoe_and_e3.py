"""
Title: V-MoE and E³: sparse mixtures of experts and the efficient ensemble of experts
Author: ensemble_zoo developers
Date created: 2026/11/22
Last modified: 2026/11/27
Description: Upcycle a keras-hub ViT into a sparse mixture of experts, fine-tune V-MoE and E³, compare them with an ensemble of two V-MoEs, and export.
"""

"""
## Introduction

A sparse mixture-of-experts ViT (V-MoE, Riquelme et al.) replaces the MLP
of a few transformer blocks by E expert MLPs; a router sends every token
to K of them, so the parameters grow with E but the compute only with K.
Allingham et al. (the E³ paper, "Sparse MoEs meet Efficient Ensembles")
turn one V-MoE into an ensemble almost for free, **E³** (efficient
ensemble of experts):

- the E experts are split into M groups, one per ensemble member;
- the tokens are copied M times right before the first MoE block, so
  everything before it runs once;
- copy m of each token is routed only to experts of group m, and every
  other weight is shared.

E³ has exactly the V-MoE's parameters (its routers are slices of the
V-MoE router), so it fine-tunes straight from a V-MoE checkpoint, and with
K = 1, M = 2 it costs much less than two V-MoE models.

This guide uses `ensemble_zoo`'s `ViTMoEImageClassifier` on the bundled
digits data. It runs in a few minutes on a CPU with any backend.
"""

"""
## Setup
"""

import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import numpy as np

from ensemble_zoo.models import ViTMoEImageClassifier
from ensemble_zoo.models.vit_moe import vit_moe_flops

x_train, y_train = ez.datasets.load_arrays("digits", "train")
x_test, y_test = ez.datasets.load_arrays("digits", "test")
x_far, _ = ez.datasets.load_arrays("digits", "far_ood")
jit = keras.config.backend() != "torch"


def logits_of(*models):
    """Member logits `(batch, members, classes)` of one or more models."""
    return np.concatenate([m.predict(x_test, verbose=0) for m in models], axis=1)


def report(name, member_logits, far_logits):
    probs = ez.ops.predictive_probabilities(member_logits)
    probs = np.asarray(keras.ops.convert_to_numpy(probs))
    far = np.asarray(keras.ops.convert_to_numpy(ez.ops.predictive_probabilities(far_logits)))
    auroc = ez.metrics.ood_auroc(1 - probs.max(-1), 1 - far.max(-1))
    diversity = ez.metrics.disagreement(far_logits) if far_logits.shape[1] > 1 else 0.0
    print(
        f"{name:24} accuracy {ez.metrics.accuracy(probs, y_test):.4f}  "
        f"NLL {ez.metrics.negative_log_likelihood(probs, y_test):.4f}  "
        f"ECE {ez.metrics.expected_calibration_error(probs, y_test):.4f}  "
        f"far-OOD AUROC {auroc:.3f}  far-OOD disagreement {diversity:.3f}"
    )


"""
## Upcycling a dense keras-hub ViT

We start from the shipped `vit_tiny_digits`, a 4-block keras-hub
`ViTImageClassifier`. `from_keras_hub` copies every weight and puts a
`SparseMoE` into the chosen blocks (by default the paper's "last-2", the
last two odd blocks: here 1 and 3), every expert a copy of the block's
MLP; the router is new.

V-MoE combines the chosen experts with their softmax gates, *not*
renormalised. So when a token uses every expert (K = E) and no token is
dropped, the gates sum to 1 and the upcycled model is exactly the dense
one:
"""

vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
check = ViTMoEImageClassifier.from_keras_hub(
    vit, num_experts=4, num_selected_experts=4, capacity_factor=1.0, eval_capacity_factor=1.0
)
difference = np.abs(check.predict(x_test, verbose=0)[:, 0] - vit.predict(x_test, verbose=0)).max()
print(f"upcycled (K = E) vs dense ViT: max |difference| {difference:.1e}")
assert difference < 1e-4

"""
With fewer experts per token the MoE output is scaled by the chosen gates
until the model is fine-tuned. The router's capacity rule decides which
tokens each expert takes: every expert has a buffer of `C = ceil(cf * K *
S / E)` slots per group of S tokens (here, one image's 17 tokens); top-1
choices fill buffers before top-2 choices, and a token that finds its
expert full gets no MoE output (the residual carries it). The paper
fine-tunes at capacity factor 1.5 and evaluates at 8, our defaults.

## Fine-tuning V-MoE and E³

The paper's comparison, scaled down. We fine-tune the upcycled model as a
V-MoE with E = 4 experts and K = 2 per token; from that checkpoint we then
fine-tune

- an ensemble of two V-MoE with K = 1 (two runs, different seeds),
- E³ with M = 2 members of K = 1 (`from_vmoe`: the same weights, each
  member routing among its own 2 experts).

`fit` minimizes the mean of the members' cross-entropies plus the routers'
auxiliary load-balancing losses (importance and load, 0.005 each), which
the layers add in training. Upcycled experts are identical copies; a
little noise (`expert_noise`) lets them, and so the E³ members, differ
from the start.
"""

keras.utils.set_random_seed(0)
vmoe_k2 = ViTMoEImageClassifier.from_keras_hub(
    vit, num_experts=4, num_selected_experts=2, dropout_rate=0.1, seed=0, expert_noise=0.1
)


def fine_tune(model, epochs=2):
    model.compile(optimizer=keras.optimizers.Adam(5e-4), jit_compile=jit)
    model.fit(x_train, y_train, batch_size=64, epochs=epochs, verbose=0)
    return model


fine_tune(vmoe_k2)
vmoe_a, vmoe_b = [
    fine_tune(
        ViTMoEImageClassifier.from_vmoe(vmoe_k2, ensemble_size=1, num_selected_experts=1, seed=seed)
    )
    for seed in (1, 2)
]
e3 = fine_tune(
    ViTMoEImageClassifier.from_vmoe(vmoe_k2, ensemble_size=2, num_selected_experts=1, seed=3)
)
assert e3.count_params() == vmoe_k2.count_params()


def far_logits_of(*models):
    return np.concatenate([m.predict(x_far, verbose=0) for m in models], axis=1)


report("dense ViT", vit.predict(x_test, verbose=0)[:, None], vit.predict(x_far, verbose=0)[:, None])
report("V-MoE K=2", logits_of(vmoe_k2), far_logits_of(vmoe_k2))
report("2 x V-MoE K=1", logits_of(vmoe_a, vmoe_b), far_logits_of(vmoe_a, vmoe_b))
report("E3 K=1 M=2", logits_of(e3), far_logits_of(e3))

"""
On 8x8 digits, after a few epochs, all of them are close in accuracy and
NLL (the paper's gains are small at its smallest scale too). E³'s members
disagree on far-OOD images, as an ensemble's should, though less than two
separately fine-tuned V-MoEs do here: with only two experts per member
and a few epochs they stay close to their shared upstream checkpoint. The
paper's diversity gap (KL 0.217 for E³ vs under 0.05 for other efficient
ensembles) comes from long fine-tuning at scale; `e3_vit_tiny_digits`,
trained longer, disagrees on 5% of far-OOD images.

## Each member routes within its own experts

`route` exposes the router's decisions. The dispatch tensor has a member
axis; member m's tokens only ever reach experts of group m:
"""

block = e3.backbone.moe_blocks[0]
tokens = keras.Model(e3.backbone.input, block.input)(x_test[:32])
routing = block.moe.route(block.layer_norm_2(tokens))
dispatch = np.asarray(keras.ops.convert_to_numpy(routing["token_dispatch"]))
# (members * batch, tokens, experts, capacity), rows member-major.
per_member = dispatch.reshape(2, -1, *dispatch.shape[1:]).sum(axis=(1, 2, 4))
print("tokens per expert, member 0:", per_member[0], " member 1:", per_member[1])
assert per_member[0, 2:].sum() == 0 and per_member[1, :2].sum() == 0

"""
## What it costs

`vit_moe_flops` counts multiply-adds analytically, router and the
dispatch / combine einsums included. (It reproduces the dense ViT rows of
the paper's Table 20 within 1%; a test checks it.) Expert MLPs run on
every slot of their buffers, so the cost follows the capacity; we count
at the training capacity factor 1.5. E³ tiles only the last three of the
four blocks, so at K = 1 it costs less than two V-MoE models:
"""

tiny = dict(
    image_size=8,
    patch_size=2,
    hidden_dim=48,
    num_layers=4,
    mlp_dim=96,
    num_classes=8,
    num_channels=1,
    moe_layers=(1, 3),
    num_experts=4,
    capacity_factor=1.5,
    group_size=17,
    capacity_multiple_of=1,
)
dense_cost = vit_moe_flops(**{**tiny, "moe_layers": (), "num_experts": 0})["total"]
cost = {
    "V-MoE K=1": vit_moe_flops(**tiny, num_selected_experts=1)["total"],
    "V-MoE K=2": vit_moe_flops(**tiny, num_selected_experts=2)["total"],
    "E3 K=1 M=2": vit_moe_flops(**tiny, num_selected_experts=1, ensemble_size=2)["total"],
}
print(f"dense ViT: {dense_cost / 1e6:.2f}M multiply-adds per image")
for name, value in cost.items():
    print(f"{name}: {value / 1e6:.2f}M")
print(f"E3 / (2 x V-MoE K=1): {cost['E3 K=1 M=2'] / (2 * cost['V-MoE K=1']):.2f}")

"""
At the evaluation capacity 8 every buffer here holds all 17 tokens of an
image, so inference costs more than these numbers; `benchmarks/moe.py` measures wall times, and
the architecture presets (`vmoe_b16_e32_k2`, `e3_b16_e32_k1_m2`, ...) hold
the paper's full-size configurations.
"""

"""
## Three routers: top-K, Experts Choice and Soft MoE

The router decides which tokens each expert sees. `ViTMoEBackbone` (and
`from_keras_hub`, `from_vmoe_checkpoint`) take three, all as in
google-research/vmoe and equal to vmoe's code on its own checkpoints:

- `router="top_k"` (V-MoE): each token picks its K best experts; a full
  buffer drops the token.
- `router="experts_choice"` (Zhou et al. 2022): each expert picks its
  `C = cf * S / E` best tokens of a group. Buffers are always full, so the
  load is balanced without auxiliary losses, and a token gets any number
  of experts, possibly none.
- `router="soft"` (Soft MoE, Puigcerver et al. 2023): each of an expert's
  `num_slots` slots is a softmax-weighted mix of all tokens, and each token
  a softmax-weighted mix of all slot outputs. Nothing is dropped, and
  everything is differentiable.

The shipped presets were all upcycled from `vit_tiny_digits` and trained
with the recipe of `vmoe_vit_tiny_digits`
(`presets/make_vmoe_routers_vit_tiny_digits.py`), at about the same
compute: K = 2 (34 token-expert pairs per image and block), Experts Choice
with capacity factor 2 (4 experts x 9 tokens), and Soft MoE with 8 slots
per expert (32 slots). They take the raw digits:
"""

import time

raw_test, _ = ez.datasets.load_arrays("digits", "test", raw=True)
raw_far, _ = ez.datasets.load_arrays("digits", "far_ood", raw=True)
routers = {
    "top-K (K=2)": "vmoe_vit_tiny_digits",
    "Experts Choice": "experts_choice_vit_tiny_digits",
    "Soft MoE": "soft_moe_vit_tiny_digits",
}
for name, preset in routers.items():
    model = ez.models.EnsembleClassifier.from_preset(preset)
    model.predict(raw_test, batch_size=256, verbose=0)  # compile
    start = time.perf_counter()
    test_logits = model.predict(raw_test, batch_size=256, verbose=0)
    seconds = time.perf_counter() - start
    report(name, test_logits, model.predict(raw_far, batch_size=256, verbose=0))
    print(f"{'':24} {1e3 * seconds:.0f} ms for the {len(raw_test)} test images")

"""
Their multiply-adds per image (one routing group per image; Soft MoE adds
its logits against every slot and its dense dispatch and combine einsums):
"""

digits_moe = dict(
    image_size=8,
    patch_size=2,
    hidden_dim=48,
    num_layers=4,
    mlp_dim=96,
    num_classes=8,
    num_channels=1,
    moe_layers=(1, 3),
    num_experts=4,
    group_size=17,
    capacity_multiple_of=1,
)
router_cost = {
    "top-K (K=2)": vit_moe_flops(**digits_moe, num_selected_experts=2, capacity_factor=8.0)[
        "total"
    ],
    "Experts Choice": vit_moe_flops(**digits_moe, router="experts_choice", capacity_factor=2.0)[
        "total"
    ],
    "Soft MoE": vit_moe_flops(**digits_moe, router="soft", num_slots=8)["total"],
}
for name, value in router_cost.items():
    print(f"{name}: {value / 1e6:.2f}M multiply-adds per image")

"""
On these 8x8 digits the three are within about 1% of each other in
accuracy. Soft MoE has the lowest NLL, and it is the only one whose cost
does not depend on a capacity factor: the top-K preset evaluates at
capacity factor 8, so every buffer holds all 17 tokens of an image.
`benchmarks/run_all.py --only moe` compares their speed with the dense ViT
at equal active multiply-adds.

## Save and export

Presets round-trip the whole model. `export` writes every format its
backend supports; the artifact returns the averaged probabilities, the
member logits and the uncertainty decomposition. The router's top-K is
built from argmax steps, which every converter carries.
"""

directory = tempfile.mkdtemp()
e3.save_to_preset(os.path.join(directory, "my_e3"))
reloaded = ez.models.EnsembleClassifier.from_preset(os.path.join(directory, "my_e3"))
same = np.abs(reloaded.predict(x_test, verbose=0) - e3.predict(x_test, verbose=0)).max()
print(f"reloaded preset: max |difference| {same:.1e}")

e3.export(os.path.join(directory, "e3.onnx"), format="onnx")
served = ez.export.ExportedModel(os.path.join(directory, "e3.onnx"))  # ONNX Runtime
print("served epistemic uncertainty:", np.round(served(x_test[:8])["epistemic"], 4))

"""
The shipped presets `vmoe_vit_tiny_digits` and `e3_vit_tiny_digits` were
trained the same way for longer
(`presets/make_vmoe_vit_tiny_digits.py`); `ensemble-zoo compare` ranks
them against the other methods.
"""
