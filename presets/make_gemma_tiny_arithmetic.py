"""Rebuilds the arithmetic presets: a tiny Gemma "pretrained" on sums, a
LoRA-Ensemble fine-tuned on it, and a per-token loss predictor.

The bundled task (`ensemble_zoo.datasets.arithmetic`) asks `"a+b="` with
`a, b` in 0-49 (2,000 `train` pairs, 500 held-out `test` pairs) and, out
of distribution, with `a, b` in 50-99 (`ood`). As an LLM is pretrained
on one corpus and fine-tuned on a task:

1. `gemma_tiny_arithmetic`: a 4-layer keras-hub `GemmaCausalLM` (hidden
   64, 4 query heads, 1 key-value head, character-level tokenizer)
   trained from scratch on the first `--pretrain-pairs` training pairs
   (loss on the answers only).
2. `lora_ensemble_gemma_tiny_arithmetic`: `--members` LoRA-Ensemble
   members of rank `--rank` on every attention and MLP projection of the
   frozen model, fine-tuned on all 2,000 training pairs (mean of the
   members' cross-entropies).
3. `loss_prediction_gemma_tiny_arithmetic`: the head of "Pretrained Visual
   Uncertainties" on the frozen pretrained model, trained to rank answer
   tokens by that model's own loss on the training pairs.

Then every uncertainty is scored on the answers
(`ensemble_zoo.evaluation.answer_evaluation`), and the numbers go into
the presets' metadata.

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_gemma_tiny_arithmetic.py
"""

import argparse
import os

import keras
import keras_hub
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.answer_evaluation import evaluate_answers

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = "gemma_tiny_arithmetic"
ENSEMBLE = "lora_ensemble_gemma_tiny_arithmetic"
LOSS = "loss_prediction_gemma_tiny_arithmetic"
SEQUENCE_LENGTH = 12
SCRIPT = "presets/make_gemma_tiny_arithmetic.py"


def optimizer(steps, learning_rate):
    warmup = max(1, steps // 20)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=steps - warmup, warmup_target=learning_rate, warmup_steps=warmup
    )
    return keras.optimizers.AdamW(schedule, weight_decay=0.01, global_clipnorm=1.0)


def fit(model, arrays, epochs, batch_size, learning_rate):
    """Fits on token arrays, the preprocessor detached (and put back)."""
    x, y, weights = arrays
    preprocessor = model.preprocessor
    steps = epochs * int(np.ceil(len(y) / batch_size))
    model.compile(optimizer=optimizer(steps, learning_rate), sampler="greedy")
    model.preprocessor = None
    try:
        history = model.fit(
            x,
            y,
            sample_weight=weights,
            batch_size=batch_size,
            epochs=epochs,
            shuffle=True,
            verbose=0,
        )
    finally:
        model.preprocessor = preprocessor
    return history.history["loss"][-1]


def subset(arrays, count):
    x, y, weights = arrays
    return {k: v[:count] for k, v in x.items()}, y[:count], weights[:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain-pairs", type=int, default=1000)
    parser.add_argument("--pretrain-epochs", type=int, default=100)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--a-gain", type=float, default=10.0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--loss-epochs", type=int, default=30)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    backend = keras.config.backend()

    keras.utils.set_random_seed(0)
    tokenizer = arithmetic.tokenizer()
    preprocessor = keras_hub.models.GemmaCausalLMPreprocessor(
        tokenizer, sequence_length=SEQUENCE_LENGTH
    )
    train = arithmetic.training_arrays("train", tokenizer, SEQUENCE_LENGTH)

    # 1. The pretrained model.
    base = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(
            vocabulary_size=tokenizer.vocabulary_size(),
            num_layers=4,
            num_query_heads=4,
            num_key_value_heads=1,
            hidden_dim=64,
            intermediate_dim=256,
            head_dim=16,
        ),
        preprocessor=preprocessor,
    )
    loss = fit(base, subset(train, args.pretrain_pairs), args.pretrain_epochs, 64, 0.003)
    print(BASE, "final training loss", loss)

    # 2. The LoRA-Ensemble, fine-tuned on every training pair.
    targets = ("query", "key", "value", "attention_output", "mlp_gate", "mlp_up", "mlp_down")
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        base, num_members=args.members, rank=args.rank, targets=targets, a_gain=args.a_gain, seed=0
    )
    loss = fit(ensemble, train, args.epochs, 64, args.learning_rate)
    print(ENSEMBLE, "final training loss", loss)

    # 3. The loss predictor on the frozen pretrained model.
    predictor = ez.models.TokenLossPredictor.from_keras_hub(base, hidden_units=(128, 128))
    x, y, weights = train
    steps = args.loss_epochs * int(np.ceil(len(weights) / 64))
    predictor.compile(optimizer=optimizer(steps, 0.001))
    predictor.preprocessor = None
    predictor.fit(  # ranked among the answer tokens (sample_weight)
        x, y, sample_weight=weights, batch_size=64, epochs=args.loss_epochs, shuffle=True, verbose=0
    )
    predictor.preprocessor = preprocessor

    ensemble.attach_loss_predictor(predictor)
    report = evaluate_answers(
        ensemble, single_model=ensemble.member_causal_lm(0), single_model_name="member_0"
    )
    print(ENSEMBLE, report, sep="\n")
    # The pretrained model on its own answers, with the loss predictor
    # trained on it (a one-member ensemble with zero adapters is the model).
    single = ez.models.LoRAEnsembleCausalLM.from_keras_hub(base, num_members=1, rank=1, seed=0)
    single.attach_loss_predictor(predictor)
    base_report = evaluate_answers(single)
    print(BASE, base_report, sep="\n")
    common = {"dataset": "arithmetic", "script": SCRIPT, "backend": backend}
    ez.presets.save_preset(
        base,
        os.path.join(args.output, BASE),
        metadata={
            **common,
            "method": "single model",
            "num_members": 1,
            "loss_predictor_preset": LOSS,
            "description": ez.presets.PRESETS[BASE]["description"],
            "training": (
                f"from scratch on the first {args.pretrain_pairs} training pairs, "
                f"{args.pretrain_epochs} epochs, batch 64, AdamW lr 0.003 (5% "
                "warm-up, cosine), weight decay 0.01, clipnorm 1.0, loss on the "
                f"answer tokens; backend {backend}"
            ),
            "metrics": base_report.metrics,
        },
    )
    ez.presets.save_preset(
        ensemble,
        os.path.join(args.output, ENSEMBLE),
        metadata={
            **common,
            "method": "lora_ensemble",
            "num_members": args.members,
            "base_preset": BASE,
            "loss_predictor_preset": LOSS,
            "description": ez.presets.PRESETS[ENSEMBLE]["description"],
            "training": (
                f"{BASE} frozen; {args.members} members, rank {args.rank} on "
                f"{', '.join(targets)}, A Xavier-uniform gain {args.a_gain}; "
                f"{args.epochs} epochs on the 2,000 training pairs, batch 64, "
                f"AdamW lr {args.learning_rate} (5% warm-up, cosine), weight decay "
                f"0.01, clipnorm 1.0, mean member cross-entropy on the answer "
                f"tokens; backend {backend}"
            ),
            "metrics": report.metrics,
        },
    )
    ez.presets.save_preset(
        predictor,
        os.path.join(args.output, LOSS),
        metadata={
            **common,
            "method": "loss_prediction",
            "num_members": 1,
            "base_preset": BASE,
            "metrics": base_report.metrics,
            "description": ez.presets.PRESETS[LOSS]["description"],
            "training": (
                f"{BASE} frozen; head (128, 128), {args.loss_epochs} epochs on "
                "the training pairs' answer tokens, ranking loss (margin 0.1), "
                "batch 64, AdamW lr 0.001 (5% warm-up, cosine); backend "
                f"{backend}"
            ),
        },
    )


if __name__ == "__main__":
    main()
