"""
Title: The papers' baselines: BatchEnsemble, Packed-Ensembles, MIMO and Masksembles
Author: ensemble_zoo developers
Date created: 2026/11/23
Last modified: 2026/11/23
Description: Build the four efficient-ensemble baselines of the Hydra, LoRA-Ensemble and E³ papers on a keras-hub ViT, train one, and compare them with Hydra, LoRA-Ensemble, E³ and deep ensembles.
"""

"""
## Introduction

Every paper behind this zoo measures its method against the same
efficient-ensemble baselines: Hydra (the Hydra paper, "Ensembling Pruned
Attention Heads for Uncertainty-Aware Efficient Transformers", Table 1)
against Packed-Ensembles, MIMO and BatchEnsemble; LoRA-Ensemble (the
LoRA-Ensemble paper, "LoRA-Ensemble: Efficient Uncertainty Modelling for
Self-Attention Networks") against BatchEnsemble, MIMO and Masksembles; E³
(the E³ paper, "Sparse MoEs meet Efficient Ensembles", Table 5) against
BatchEnsemble and MIMO. Here they are as keras-hub ViT classifiers. Each
runs all of its members in one forward pass and returns member logits
`(batch, members, classes)`, like every model in the zoo:

| baseline | what the members share | what is per member |
|---|---|---|
| BatchEnsemble | every kernel `W` | rank-1 fast weights `r_m`, `s_m`, biases |
| Packed-Ensembles | nothing (grouped layers) | a narrow ViT, `alpha / M` of the width |
| MIMO | the whole network | its input channels and its head |
| Masksembles | every weight | a fixed binary mask on the hidden units |

This guide:

1. builds the four from the shipped tiny keras-hub ViT and checks that
   each member is a plain keras-hub ViT (`member_model`);
2. trains MIMO on its own batches with `fit`;
3. compares the trained presets with Hydra, LoRA-Ensemble, E³ and a deep
   ensemble;
4. reads the costs of the papers' ViT-B/16 configurations.

It runs in under a minute on a laptop CPU with any Keras backend.
"""

"""
## Setup
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import numpy as np

from ensemble_zoo.utils.parameters import parameter_count

x_train, y_train = ez.datasets.load_arrays("digits", "train")
x_test, y_test = ez.datasets.load_arrays("digits", "test")

# The pretrained model: a keras_hub.models.ViTImageClassifier.
vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]

"""
## Four baselines from one keras-hub ViT

BatchEnsemble, MIMO and Masksembles convert a copy of a pretrained ViT
(`from_keras_hub`; the ViT itself is not changed). Packed-Ensembles
members are narrower than the base model, so they train from scratch;
`like_keras_hub` takes the base model's geometry and packs it with the
Hydra paper's `M = 3`, `alpha = 2`.
"""

baselines = {
    "BatchEnsemble": ez.models.BatchEnsembleImageClassifier.from_keras_hub(
        vit, num_members=4, seed=0
    ),
    "Packed-Ensembles": ez.models.PackedEnsembleImageClassifier.like_keras_hub(
        vit, num_members=3, alpha=2, gamma=1
    ),
    "MIMO": ez.models.MIMOImageClassifier.from_keras_hub(vit, num_members=3),
    "Masksembles": ez.models.MasksemblesImageClassifier.from_keras_hub(
        vit, num_members=4, scale=2.0, seed=0
    ),
}

"""
Each model's `member_model(m)` is member `m` alone as a plain
`keras_hub.models.ViTImageClassifier` (BatchEnsemble: kernels
`W * outer(r_m, s_m)`; Packed-Ensembles: a ViT of width 32 with 4 heads;
MIMO: the channel-summed patch kernel and head `m`; Masksembles: the mask
folded into the layers that read it). Running the members one at a time
gives the fused pass's logits:
"""

x = x_test[:32]
print(f"{'baseline':18s} {'members':>7s} {'parameters':>10s} {'max |fused - member|':>22s}")
for name, model in baselines.items():
    fused = model.predict(x, verbose=0)
    gap = max(
        np.abs(fused[:, m] - keras.ops.convert_to_numpy(model.member_model(m)(x))).max()
        for m in range(model.num_members)
    )
    print(f"{name:18s} {model.num_members:7d} {parameter_count(model):10,d} {gap:22.2e}")
print(f"{'single ViT':18s} {1:7d} {vit.count_params():10,d}")

"""
## Training MIMO

MIMO trains each member on its own examples: `fit` stacks `M` images on
the channel axis, shows a share `input_repetition` of every batch to all
members alike, repeats each batch `batch_repetition` times (Havasi et al.;
the Hydra paper uses 0.5 and 4) and gives the loss per-member labels
`(batch, members)`. At test time the same image goes to every input.
"""

mimo = baselines["MIMO"]
mimo.compile(
    optimizer=keras.optimizers.Adam(1e-3, global_clipnorm=1.0),
    jit_compile=keras.config.backend() != "torch",
)
history = mimo.fit(x_train, y_train, epochs=2, batch_size=64, verbose=2)
probs = mimo.predict_uncertainty(x_test)["probabilities"]
print("MIMO accuracy after 2 epochs:", round(ez.metrics.accuracy(probs, y_test), 4))

"""
## The trained presets side by side

Each baseline has a trained preset on the bundled digits, from the same
base ViT as the papers' methods (`presets/make_*_vit_tiny_digits.py`).
We score all of them with the same metrics: accuracy, NLL and ECE on the
test set, and how well the mutual information (epistemic uncertainty)
separates far-OOD photo patches from digits (AUROC).
"""

# The presets carry their image converter: `predict` takes raw images
# (the digits' 0-16 pixel scale), as every keras-hub task does.
raw_test, _ = ez.datasets.load_arrays("digits", "test", raw=True)
far_ood, _ = ez.datasets.load_arrays("digits", "far_ood", raw=True)
names = {
    "single ViT": "vit_tiny_digits",
    "deep ensemble (3)": "deep_ensemble_vit_tiny_digits",
    "Hydra (circuit, 3)": "hydra_circuit_vit_tiny_digits",
    "LoRA-Ensemble (8)": "lora_ensemble_vit_tiny_digits",
    "E3 (2)": "e3_vit_tiny_digits",
    "BatchEnsemble (4)": "batch_ensemble_vit_tiny_digits",
    "Packed-Ensembles (3)": "packed_ensemble_vit_tiny_digits",
    "MIMO (3)": "mimo_vit_tiny_digits",
    "Masksembles (4)": "masksembles_vit_tiny_digits",
}
print(f"{'model':22s} {'accuracy':>8s} {'NLL':>7s} {'ECE':>7s} {'AUROC far':>9s} {'params':>8s}")
for label, preset in names.items():
    model = ez.models.EnsembleClassifier.from_preset(preset)
    test = model.predict_uncertainty(raw_test, batch_size=256)
    ood = model.predict_uncertainty(far_ood, batch_size=256)
    p = test["probabilities"]
    auroc = (
        ez.metrics.ood_auroc(test["epistemic"], ood["epistemic"])
        if model.num_members > 1
        else float("nan")
    )
    print(
        f"{label:22s} {ez.metrics.accuracy(p, y_test):8.4f} "
        f"{ez.metrics.negative_log_likelihood(p, y_test):7.4f} "
        f"{ez.metrics.expected_calibration_error(p, y_test):7.4f} {auroc:9.4f} "
        f"{ez.presets.preset_metadata(preset)['parameter_count']:8,d}"
    )

"""
On this 77k-parameter ViT every method reaches 97.6-99.0% accuracy, so
the differences are in calibration and in how much the members disagree
off the data. The members that share the least, the deep ensemble's and
LoRA-Ensemble's (own heads, own adapters), separate photo patches best
by their mutual information; among the baselines Packed-Ensembles'
independent narrow ViTs and Masksembles' masks come next, while MIMO's
members, which share every weight but their inputs and heads, disagree
least. Packed-Ensembles' narrow members are the least calibrated before
temperature scaling. `ensemble-zoo compare` runs the full evaluation
(temperature scaling, near OOD, the MSP score, FPR95, latency) for every
preset; its table is on the documentation site (docs/methods/baselines.md).

## At the papers' scale

The architecture presets hold the papers' ViT-B/16 configurations
(random weights; `from_preset` builds them). Their metadata records the
parameter and multiply-add counts, read here without building anything:
"""

for preset in (
    "hydra_vit_b16_8x3",
    "packed_ensemble_vit_b16_3x2",
    "batch_ensemble_vit_b16_3",
    "mimo_vit_b16_3",
    "masksembles_vit_b16_4",
):
    meta = ez.presets.preset_metadata(preset)
    print(
        f"{preset:28s} members {meta['num_members']}  parameters "
        f"{meta['parameter_count'] / 1e6:6.1f}M  multiply-adds "
        f"{meta['multiply_adds'] / 1e9:6.1f}G"
    )

"""
A single ViT-B/16 is 86.6M parameters and 17.6G multiply-adds. MIMO costs
barely more than one model; BatchEnsemble and Masksembles store one
model but compute M of them; Packed-Ensembles at `alpha = 2` stores and
computes `alpha^2 / M` of the projections of one model, but none of its
members is as wide as the base.
"""
