"""What the decode loop's attention weights and BoostedProb cost per token.

    KERAS_BACKEND=jax python benchmarks/decode_estimator_cost.py --without route
    KERAS_BACKEND=jax python benchmarks/decode_estimator_cost.py --without boosted

`llm_decoding.py`'s setting (Gemma-2B layer shapes, 2 layers, a 16,384-token
vocabulary, a 32-token prompt) with 8 rank-8 members and
`return_uncertainty=True`, in one process: two ensembles on the same
frozen model, one as shipped and one without the part measured, decode
alternately (`--rounds` times, 16 and 8 new tokens each), and the median
per-token time (the difference of the two calls over 8 tokens) of each is
printed with their ratio and whether their tokens agree.

- `--without route`: the second ensemble decodes through keras-hub's own
  attention step, not the attention route that records RAUQ's weights
  (`attention_route`; the model's cached `_recorded_attention` set to
  `None` before its first call);
- `--without boosted`: the second ensemble's BoostedProb figure is its
  taken token's probability (the module function that `token_figures`
  calls is swapped for the duration of its calls only; under JAX and
  TensorFlow its first call traces it so).

`--jit-compile true` compiles the PyTorch step (`compile(jit_compile=True)`);
the default runs each backend's default.
"""

import argparse
import contextlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import llm_decoding  # noqa: E402  (imports its backend on first use only)

VOCABULARY = 16_384
PROMPT = 32


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without", choices=("route", "boosted"), required=True)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jit-compile", choices=("default", "true", "false"), default="default")
    args = parser.parse_args(argv)
    llm_decoding._imports()
    keras, np, ez = llm_decoding.keras, llm_decoding.np, llm_decoding.ez
    from ensemble_zoo.models.lora_ensemble.causal_lm import token_uncertainty

    shipped = token_uncertainty.boosted_probability

    @contextlib.contextmanager
    def without_boosted():
        token_uncertainty.boosted_probability = lambda probabilities, taken: taken
        try:
            yield
        finally:
            token_uncertainty.boosted_probability = shipped

    base = llm_decoding.build_base(2, VOCABULARY, False)
    kwargs = {} if args.jit_compile == "default" else {"jit_compile": args.jit_compile == "true"}
    models = {}
    for name in ("with", "without"):
        model = ez.models.LoRAEnsembleCausalLM.from_keras_hub(base, num_members=8, rank=8, seed=0)
        if name == "without" and args.without == "route":
            model.__dict__["_attention"] = None
        model.compile(sampler="greedy", **kwargs)
        models[name] = model

    def run(name, new):
        inputs = llm_decoding.prompt_inputs(PROMPT, new, VOCABULARY)
        off = name == "without" and args.without == "boosted"
        with without_boosted() if off else contextlib.nullcontext():
            start = time.perf_counter()
            out = models[name].generate(inputs, stop_token_ids=None, return_uncertainty=True)
        return (time.perf_counter() - start) * 1000, out

    for name in models:  # compile
        run(name, 16)
        run(name, 8)
    per_token = {name: [] for name in models}
    for _ in range(args.rounds):
        for name in models:
            whole, _ = run(name, 16)
            half, _ = run(name, 8)
            per_token[name].append((whole - half) / 8)
    same = np.array_equal(run("with", 16)[1]["token_ids"], run("without", 16)[1]["token_ids"])
    with_ms, without_ms = (float(np.median(per_token[n])) for n in ("with", "without"))
    print(
        f"{keras.config.backend()} {args.jit_compile}: ms per token with {args.without} "
        f"{with_ms:.2f}, without {without_ms:.2f}, ratio {with_ms / without_ms:.3f}, "
        f"same tokens {same} (median of {args.rounds} alternating rounds)"
    )


if __name__ == "__main__":
    main()
