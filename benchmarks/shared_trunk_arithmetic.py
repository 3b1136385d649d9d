"""What adapting only the upper blocks costs in uncertainty quality, on
the arithmetic task.

    KERAS_BACKEND=jax python benchmarks/shared_trunk_arithmetic.py
        [--epochs 30] [--members 4] [--rank 8] [--quick]

The bundled `gemma_tiny_arithmetic` (a 4-block keras-hub `GemmaCausalLM`)
gets three LoRA-Ensembles, each fine-tuned with the recipe of
`presets/make_gemma_tiny_arithmetic.py` (its `fit`: AdamW, warm-up and
cosine decay, the members' mean cross-entropy on the answer tokens, the
same seed): `--members` rank-`--rank` members on every attention and MLP
projection of every block (the `lora_ensemble_gemma_tiny_arithmetic`
recipe), of the upper half of the blocks, and of the upper quarter
(`from_keras_hub(..., layers=...)`; the blocks below decode once as a
shared trunk). Each is scored on the 500 test and 500 OOD sums
(`evaluate_generation`, greedy, as `evaluate_answers` scores the
preset): test accuracy, and the wrong-answer and OOD
AUROC of the ensemble's epistemic (`pe_mutual_information`) and total
(`mean_token_entropy`) uncertainty; and, from the arrays' shapes, the
adapter parameters and the decode's KV cache relative to every block
adapted. `--quick` (the test suite's smoke run) trains two epochs on 128
sums and scores 32 questions.
"""

import argparse
import os
import sys

import keras
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.answer_evaluation import RECORDED
from ensemble_zoo.evaluation.answer_evaluation import arithmetic_checker

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "presets"))
import make_gemma_tiny_arithmetic as recipe  # noqa: E402 (the presets' folder)

TARGETS = ("query", "key", "value", "attention_output", "mlp_gate", "mlp_up", "mlp_down")


def variants(num_blocks):
    """`(name, layers)`: every block, the upper half, the upper quarter."""
    return [
        ("every block", None),
        ("upper 1/2", range(num_blocks - num_blocks // 2, num_blocks)),
        ("upper 1/4", range(num_blocks - max(num_blocks // 4, 1), num_blocks)),
    ]


def score(ensemble, count=None):
    """`evaluate_generation`'s metrics on the first `count` (default:
    all 500) test and OOD sums, greedy, no sampling."""
    test_q, test_a = arithmetic.load_questions("test")
    ood_q, ood_a = arithmetic.load_questions("ood")
    return ez.evaluation.evaluate_generation(
        ensemble,
        test_q[:count],
        test_a[:count],
        checker=arithmetic_checker,
        ood_prompts=ood_q[:count],
        ood_references=ood_a[:count],
        single_models=None,
        num_samples=0,
        max_length=12,
        progress=False,
    ).metrics


def run(epochs=30, members=4, rank=8, quick=False):
    """The rows (see the module docstring)."""
    base = ez.presets.load_preset(recipe.BASE)
    train = arithmetic.training_arrays("train", base.preprocessor.tokenizer, recipe.SEQUENCE_LENGTH)
    if quick:
        epochs, train = 2, recipe.subset(train, 128)
    num_blocks = len(base.backbone.transformer_layers)
    rows = []
    for name, layers in variants(num_blocks):
        keras.utils.set_random_seed(0)
        ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
            base, num_members=members, rank=rank, targets=TARGETS, seed=0, layers=layers
        )
        loss = recipe.fit(ensemble, train, epochs, 64, 0.003)
        metrics = score(ensemble, 32 if quick else None)
        shared = ensemble.trunk_blocks
        rows.append(
            {
                "variant": name,
                "layers": None if layers is None else list(layers),
                "shared_blocks": shared,
                "training_loss": float(loss),
                "test_accuracy": metrics["accuracy"],
                **{
                    f"{kind}_{measure}": metrics["estimators"][RECORDED[kind]][measure]
                    for kind in ("epistemic", "total")
                    for measure in ("wrong_answer_auroc", "ood_auroc")
                },
                "adapter_parameters": int(
                    sum(np.prod(w.shape) for w in ensemble.trainable_weights)
                ),
                "kv_cache_ratio": (shared + members * (num_blocks - shared))
                / (members * num_blocks),
            }
        )
        print(_line(rows[-1]), flush=True)
    return rows


def _line(row):
    return (
        f"{row['variant']:<12} accuracy {row['test_accuracy']:.3f}  wrong-answer AUROC "
        f"epistemic {row['epistemic_wrong_answer_auroc']:.3f} total "
        f"{row['total_wrong_answer_auroc']:.3f}  OOD AUROC epistemic "
        f"{row['epistemic_ood_auroc']:.3f} total {row['total_ood_auroc']:.3f}  adapter "
        f"parameters {row['adapter_parameters']:,}  KV cache {row['kv_cache_ratio']:.2f}x"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(f"backend {keras.config.backend()}; {recipe.BASE}, {args.members} members")
    return run(args.epochs, args.members, args.rank, args.quick)


if __name__ == "__main__":
    main()
