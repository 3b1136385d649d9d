"""What each generation estimator costs on the tiny arithmetic preset.

    KERAS_BACKEND=jax python benchmarks/estimator_cost.py [--questions 100]
        [--samples 5]

`ez.evaluation.evaluate_generation` on `lora_ensemble_gemma_tiny_arithmetic`
(4 members) over the first `--questions` test and OOD sums, `--samples`
answers drawn per question, greedy answers of at most 12 tokens; prints
keras-hub's plain greedy decode of the base model in milliseconds per
generated token, and each estimator's extra milliseconds per token over
it (`ensemble_zoo.evaluation.estimator_cost`: the members' decode with
figures, and the draws for the sampling-based ones and CoCoA), with its
wrong-answer and OOD AUROC. One run, each stage timed on the first batch
of prompts after the evaluation.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402

import ensemble_zoo as ez  # noqa: E402
from ensemble_zoo.datasets import arithmetic  # noqa: E402
from ensemble_zoo.evaluation.answer_evaluation import arithmetic_checker  # noqa: E402


def run(questions=100, samples=5):
    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    test_q, test_a = arithmetic.load_questions("test")
    ood_q, _ = arithmetic.load_questions("ood")
    report = ez.evaluation.evaluate_generation(
        model,
        test_q[:questions],
        test_a[:questions],
        checker=arithmetic_checker,
        ood_prompts=ood_q[:questions],
        single_models=None,
        num_samples=samples,
        max_length=12,
        progress=False,
        name=f"{keras.config.backend()}, {questions} questions, {samples} samples",
    )
    print(report)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args(argv)
    return run(args.questions, args.samples)


if __name__ == "__main__":
    main()
