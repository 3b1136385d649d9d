"""Rebuilds the `blob_lora_vit_tiny_digits` preset (BLoB; Wang et al. 2024,
"BLoB: Bayesian Low-Rank Adaptation by Backpropagation for Large Language
Models", arXiv 2406.11675, cited by the LoRA-Ensemble paper beside
Laplace-LoRA).

One LoRA model on the frozen `vit_tiny_digits` (rank 4 on the query, key,
value and output projections, a fresh head), its `A` matrices BLoB's
Gaussians (the authors' `eps` 0.05 and prior standard deviation 0.2),
trained with `fit` on the LoRA-Ensemble preset's recipe (Adam, 5% warm-up
then cosine, global clipnorm 1.0, +-1 pixel translations) with the KL term
weighted by `kl_weight`, chosen among `KL_SCALES` / training examples by
validation NLL
(`1 / training examples` is the per-example evidence bound). `A` starts
at Xavier-uniform gain 1 (PEFT's LoRA starts near it; the LoRA-Ensemble's
gain 10 is a diversity device of that method). `ez.training.blob_samples`
then draws the posterior samples (the authors evaluate with 10) as the
members of one LoRA-Ensemble.

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_blob_lora_vit_tiny_digits.py
"""

import argparse
import os

import keras
from make_laplace_lora_vit_tiny_digits import validation_nll  # noqa: E402 (same folder)
from make_lora_ensemble_vit_tiny_digits import train  # noqa: E402
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "blob_lora_vit_tiny_digits"


KL_SCALES = (0.1, 1.0, 10.0, 100.0, 1000.0)


def blob_model(base, kl_weight, rank, a_gain):
    keras.utils.set_random_seed(0)
    return ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        base,
        num_members=1,
        rank=rank,
        a_gain=a_gain,
        reuse_head=False,
        num_classes=base.num_classes,
        seed=0,
        blob={"kl_weight": kl_weight},
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--a-gain", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    count = len(ez.datasets.load_arrays("digits", "train")[0])
    best = None
    for scale in KL_SCALES:
        kl_weight = scale / count
        model = blob_model(base, kl_weight, args.rank, args.a_gain)
        train(model, args.epochs, args.batch_size, args.learning_rate, seed=0)
        samples = ez.training.blob_samples(model, args.samples, seed=0, name=NAME)
        nll = validation_nll(samples)
        print(
            f"kl_weight {scale:g} / {count}: validation NLL {nll:.4f}; mean",
            test_metrics(model),
            "samples",
            test_metrics(samples),
        )
        if best is None or nll < best[0]:
            best = (nll, scale, samples)
    _, scale, trained = best
    # As the other digits presets: with the image converter, taking raw
    # digits (the weights unchanged).
    config = {**trained.get_config(), "preprocessor": ez.datasets.image_preprocessor("digits")}
    samples = type(trained).from_config(config)
    samples.set_weights(trained.get_weights())
    metrics = test_metrics(samples)
    samples.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "blob",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"vit_tiny_digits frozen; one LoRA of rank {args.rank} on "
                "query/key/value/output with BLoB's Gaussian A (eps 0.05, prior std 0.2, "
                f"A mean Xavier-uniform gain {args.a_gain}), a fresh head; KL weight "
                f"{scale:g} / {count} training examples of {list(KL_SCALES)} by validation "
                "NLL; "
                f"{args.epochs} epochs, batch {args.batch_size}, Adam lr "
                f"{args.learning_rate} (5% warm-up, cosine), global clipnorm 1.0, +-1 pixel "
                f"translation; {args.samples} posterior samples (seed 0) as members; "
                "backend " + keras.config.backend()
            ),
            "kl_weight": scale / count,
            "script": "presets/make_blob_lora_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )
    print(NAME, ez.presets.preset_metadata(os.path.join(args.output, NAME))["metrics"])


if __name__ == "__main__":
    main()
