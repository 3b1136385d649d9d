"""The attention weights the decode loop records (`attention_route`) are
keras-hub's own: each member's weight on the step's own position equals
the softmax that keras-hub's standard attention path computes in a
teacher-forced forward pass of the member's merged model over the
returned tokens, and RAUQ and the attention score of
`sequence_uncertainty` equal `ez.metrics.rauq` and `attention_score` on
those reference weights. A Gemma 2 configuration (a logit soft cap on
every layer, a sliding window on alternate ones): keras-hub's Gemma attention runs its
softmax layer on a CPU under every backend. That the route's logits are
keras-hub's in every family that takes it is `test_causal_lm_families`'
greedy check."""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import keras_hub_attention

import ensemble_zoo as ez
from ensemble_zoo.metrics.token_arrays import all_but_last_counted
from ensemble_zoo.models import LoRAEnsembleCausalLM

GEMMA2 = dict(
    vocabulary_size=50,
    num_layers=3,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    head_dim=8,
    query_head_dim_normalize=False,
    use_post_ffw_norm=True,
    use_post_attention_norm=True,
    attention_logit_soft_cap=5.0,
    final_logit_soft_cap=30.0,
    use_sliding_window_attention=True,
    sliding_window_size=3,
)
PROMPT = {
    "token_ids": np.array([[1, 5, 7, 9, 0, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0, 0]], bool),
}


def keras_hub_self_attention(causal_lm, token_ids, monkeypatch):
    """`(batch, layers, heads, length)`: the weight each position gives to
    itself in each block, from the softmax of keras-hub's own attention
    layers in a full forward pass."""
    weights = keras_hub_attention(causal_lm, token_ids, monkeypatch)
    return np.diagonal(weights, axis1=-2, axis2=-1)


def test_recorded_attention_is_keras_hubs_softmax_and_feeds_rauq(monkeypatch):
    keras.utils.set_random_seed(0)
    base = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(**GEMMA2), preprocessor=None
    )
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, seed=0)
    rng = np.random.default_rng(0)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.1)
    ensemble.compile(sampler="greedy")
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    # RAUQ's layers of 3 blocks: range(1, ceil(2) + 1); the score's: 3 // 2.
    np.testing.assert_array_equal(out["attention_layers"], [1, 2])
    assert out["attention_score_layer"] == 1
    recorded = out["member_self_attention"]  # (batch, members, layers, heads, length)
    assert recorded.shape == (2, 2, 2, 4, 9)
    mask = out["generated_mask"]
    assert np.abs(recorded[:, 0] - recorded[:, 1]).max() > 1e-3
    # The reference is each member's merged model: the merged kernels'
    # round-off bounds the tolerance.
    member_rauq = []
    for m in range(2):
        member = ensemble.member_causal_lm(m)
        reference = keras_hub_self_attention(member, out["token_ids"], monkeypatch)[:, 1:]
        # The step that generates token t attends from position t - 1.
        expected = np.zeros_like(reference)
        expected[..., 1:] = reference[..., :-1]
        where = np.broadcast_to(mask[:, None, None], expected.shape)
        np.testing.assert_allclose(recorded[:, m][where], expected[where], atol=2e-5)
        assert np.all(recorded[:, m][~where] == 0.0)

        scores = ez.metrics.sequence_uncertainty(out, member=m)
        np.testing.assert_allclose(
            scores["rauq"],
            ez.metrics.rauq(expected, out["member_log_probs"][:, m], mask, layers=[0, 1]),
            rtol=1e-4,
        )
        np.testing.assert_allclose(
            scores["attention_score"],
            ez.metrics.attention_score(reference[:, 0], all_but_last_counted(mask)),
            rtol=1e-4,
        )
        entropy = out["member_entropy"][:, m]
        np.testing.assert_allclose(
            scores["rauq_entropy"],
            ez.metrics.rauq(
                expected,
                out["member_log_probs"][:, m],
                mask,
                layers=[0, 1],
                entropies=entropy,
                vocabulary_size=50,
            ),
            rtol=1e-4,
        )
        member_rauq.append(scores["rauq"])
    # The ensemble's: the members' mean weights, its predictive probability
    # and entropy; the Bernoulli mutual information of the members' RAUQ
    # confidences.
    scores = ez.metrics.sequence_uncertainty(out)
    mean = recorded.mean(axis=1)
    np.testing.assert_allclose(
        scores["rauq"], ez.metrics.rauq(mean, out["log_prob"], mask, layers=[0, 1]), rtol=1e-6
    )
    np.testing.assert_allclose(
        scores["rauq_entropy"],
        ez.metrics.rauq(
            mean, out["log_prob"], mask, layers=[0, 1], entropies=out["total"], vocabulary_size=50
        ),
        rtol=1e-6,
    )
    c = np.exp(1.0 - np.stack(member_rauq, axis=1))

    def h(p):
        return -p * np.log(p) - (1 - p) * np.log(1 - p)

    np.testing.assert_allclose(
        scores["rauq_mutual_information"], h(c.mean(axis=1)) - h(c).mean(axis=1), rtol=1e-6
    )
    assert np.all(scores["rauq_mutual_information"] > 0)
    shifted = np.roll(mean[:, 0], -1, axis=-1)
    np.testing.assert_allclose(
        scores["attention_score"],
        ez.metrics.attention_score(shifted, all_but_last_counted(mask)),
        rtol=1e-6,
    )


@pytest.mark.skipif(keras.config.backend() != "jax", reason="output checks: backend-independent")
def test_attention_outputs_are_checked():
    batch, members, length = 2, 2, 5
    mask = np.zeros((batch, length), bool)
    mask[:, 2:] = True
    outputs = {
        "generated_mask": mask,
        "log_prob": np.full((batch, length), -0.5),
        "member_log_probs": np.full((batch, members, length), -0.5),
        "member_entropy": np.ones((batch, members, length)),
        **{
            k: np.zeros((batch, length))
            for k in ("total", "aleatoric", "epistemic", "expected_pairwise_kl")
            + ("reverse_mutual_information",)
        },
        **{
            "ep_" + k: np.zeros((batch, length))
            for k in ("total", "aleatoric", "epistemic", "expected_pairwise_kl")
            + ("reverse_mutual_information",)
        },
        "member_self_attention": np.full((batch, members, 2, 3, length), 0.5),
        "attention_layers": np.array([1, 2]),
        "attention_score_layer": 1,
    }
    scores = ez.metrics.sequence_uncertainty(outputs)
    assert np.all(np.isfinite(scores["rauq"])) and np.all(np.isfinite(scores["attention_score"]))
    assert "rauq" not in ez.metrics.sequence_uncertainty(
        {k: v for k, v in outputs.items() if "attention" not in k}
    )
    with pytest.raises(ValueError, match="lacks"):
        ez.metrics.sequence_uncertainty(
            {k: v for k, v in outputs.items() if k != "attention_layers"}
        )
    bad = dict(outputs, member_self_attention=np.zeros((batch, members, 3, 3, length)))
    with pytest.raises(ValueError, match="member_self_attention"):
        ez.metrics.sequence_uncertainty(bad)
    with pytest.raises(ValueError, match="attention_score_layer"):
        ez.metrics.sequence_uncertainty(dict(outputs, attention_score_layer=0))
