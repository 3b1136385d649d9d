"""Rebuilds the `laplace_lora_vit_tiny_digits` preset (Laplace-LoRA; Yang
et al. 2024, the LoRA-Ensemble paper's Bayes-LoRA baseline, appendix W).

The standard LoRA fine-tune is member 0 of `lora_ensemble_vit_tiny_digits`
(rank 4 on the query, key, value and output projections of the frozen
`vit_tiny_digits`, its own head): each LoRA-Ensemble member is trained as
one LoRA model. `ez.training.laplace_lora` then fits the Kronecker-factored
Laplace approximation over its adapters on the training split and draws
the posterior samples as the members of one LoRA-Ensemble. The prior
variance is chosen on the validation split's NLL (the paper's 1e-3 is one
of the candidates), as laplace-torch's grid search does; `n_kfac` = 10.

On these data the weight samples never beat the fine-tune (test NLL
0.0976, ECE 0.0247): the test NLL grows with the prior variance (0.0981 at
1e-6, the validation's choice, 0.1177 at 1e-4, 0.4033 at the paper's
1e-3, ECE 0.249), and the marginal likelihood picks a prior so broad that the samples of the
barely constrained adapter directions (A starts at 10x Xavier and the
curvature is low rank) predict uniformly (test accuracy 0.14). The
weight-space predictive is known to underfit where the linearised one
does not (Immer et al. 2021, "Improving predictions of Bayesian neural
nets via local linearization"), which the authors' code uses.

Run from the repository root (about a minute on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_laplace_lora_vit_tiny_digits.py
"""

import argparse
import os

import keras
import numpy as np
from make_vit_tiny_digits import test_metrics  # noqa: E402 (same folder)

import ensemble_zoo as ez
from ensemble_zoo.training.member_stacking import with_members

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "laplace_lora_vit_tiny_digits"
PRIOR_VARIANCES = (1e-6, 1e-5, 1e-4, 1e-3)


def fine_tune():
    """Member 0 of the LoRA-Ensemble preset, as a one-member model."""
    ensemble = ez.models.EnsembleClassifier.from_preset("lora_ensemble_vit_tiny_digits")
    return with_members(
        ensemble,
        1,
        lambda source, member_axis: (
            keras.ops.convert_to_numpy(source)[:1]
            if member_axis
            else keras.ops.convert_to_numpy(source)
        ),
    )


def validation_nll(model):
    """The validation NLL (raw digits for a model with the image converter)."""
    raw = getattr(model, "preprocessor", None) is not None
    x, y = ez.datasets.load_arrays("digits", "validation", raw=raw)
    probs = ez.ops.predictive_probabilities(model.predict(x, verbose=0))
    return ez.metrics.negative_log_likelihood(np.asarray(probs), y)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()

    lora = fine_tune()
    x, y = ez.datasets.load_arrays("digits", "train")
    print("fine-tune", test_metrics(lora), "validation NLL", round(validation_nll(lora), 4))
    best = None
    for variance in PRIOR_VARIANCES:
        model = ez.training.laplace_lora(
            lora, x, num_samples=args.samples, prior_variance=variance, seed=0, name=NAME
        )
        nll = validation_nll(model)
        print(f"prior variance {variance:g}: validation NLL {nll:.4f}", test_metrics(model))
        if best is None or nll < best[0]:
            best = (nll, variance, model)
    evidence = ez.training.laplace_lora(
        lora, x, num_samples=args.samples, prior_variance="marginal_likelihood", y=y, seed=0
    )
    print("prior by marginal likelihood:", test_metrics(evidence))
    _, variance, model = best
    metrics = test_metrics(model)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "laplace-lora",
            "base_preset": "lora_ensemble_vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                "member 0 of lora_ensemble_vit_tiny_digits (a rank-4 LoRA fine-tune); "
                "Kronecker-factored Laplace over its adapters on the training split "
                f"(exact GGN K-FAC, n_kfac 10), prior variance {variance:g} of "
                f"{list(PRIOR_VARIANCES)} by validation NLL, {args.samples} posterior "
                f"samples (seed 0) as members; backend {keras.config.backend()}"
            ),
            "prior_variance": variance,
            "script": "presets/make_laplace_lora_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )
    print(NAME, ez.presets.preset_metadata(os.path.join(args.output, NAME))["metrics"])


if __name__ == "__main__":
    main()
