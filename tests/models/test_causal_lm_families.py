"""LoRA-Ensemble on every text-only causal-LM family keras-hub ships: the
adapters go where `families.decoder_sites` finds each block's projections,
with no code per family. For each family (a tiny random model,
`fixtures/tiny_causal_lms.py`): zero adapters give the keras-hub model's
logits and greedy tokens with zero epistemic uncertainty, and with trained
adapters a member equals the plain keras-hub model with its merged kernels,
the prompts' pass in blocks equals one pass, and the per-token loss
predictor's token loss is the model's cross-entropy;
a refused family names why. The whole list runs under PyTorch (eager, the
quickest to build); JAX and TensorFlow, which compile each family's decode
loop, run a slice that rotates with the day (the suite's time budget)."""

import warnings

import keras
import keras_hub
import numpy as np
import pytest
from conftest import BACKEND
from fixtures.tiny_causal_lms import FAMILIES
from fixtures.tiny_causal_lms import build_causal_lm
from zoo_testing import families_this_run
from zoo_testing import to_np

from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExpertKernel
from ensemble_zoo.layers.lora_ensemble_experts import expert_kernels
from ensemble_zoo.models import LoRAEnsembleCausalLM
from ensemble_zoo.models import LoRAEnsembleDecoderBackbone
from ensemble_zoo.models import TokenLossPredictor
from ensemble_zoo.models.lora_ensemble.causal_lm import decode_engine
from ensemble_zoo.models.lora_ensemble.causal_lm import families
from ensemble_zoo.models.lora_ensemble.causal_lm import trunk_step
from ensemble_zoo.models.lora_ensemble.causal_lm.member_forward import member_block_input

#: keras-hub classes the decode engine does not take yet, each refused by
#: name (`families.FAMILIES`).
REFUSED = ("gemma3n", "rwkv7")
SUPPORTED = sorted(set(FAMILIES) - set(REFUSED))
#: Families per run under JAX and TensorFlow, chosen by the day.
SLICE = 3
#: The families whose attention layers take keras-hub 0.32's attention
#: route (`attention_route`): their decode records RAUQ's weights.
ROUTE_FAMILIES = ("gemma", "gemma3", "gpt2", "llama", "llama3", "mistral", "opt", "qwen", "qwen3")


PROMPT = {
    "token_ids": np.array([[1, 5, 7, 9, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]], bool),
}


def keras_hub_inputs(causal_lm):
    """`PROMPT` as the keras-hub model takes it: Gemma 4's also takes
    `position_ids`, which its preprocessor makes `0 .. length - 1`."""
    if "position_ids" not in causal_lm.backbone.input:
        return PROMPT
    return {**PROMPT, "position_ids": np.tile(np.arange(8, dtype="int32"), (2, 1))}


def keras_hub_greedy(causal_lm):
    """keras-hub's own greedy tokens; Gemma 3's `generate` without a
    preprocessor fails on its `images: None` output (keras-hub 0.32), so
    its compiled `generate_step` is called."""
    causal_lm.compile(sampler="greedy")
    if isinstance(causal_lm, keras_hub.models.Gemma3CausalLM):
        tensors = {k: keras.ops.convert_to_tensor(v) for k, v in PROMPT.items()}
        return to_np(causal_lm.make_generate_function()(tensors, stop_token_ids=None)["token_ids"])
    return to_np(causal_lm.generate(PROMPT, stop_token_ids=None)["token_ids"])


@pytest.mark.parametrize("family", families_this_run(SUPPORTED, SLICE))
def test_every_family_decodes_as_keras_hub_and_members_equal_merged_models(family):
    causal_lm = build_causal_lm(family)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2, seed=0)
    assert ensemble.keras_hub_class is type(causal_lm)
    # One adapter per attention projection, or one on a fused query-key-value.
    per_block = 2 if family == "gpt_neox" else 4
    # Qwen 3.5's Gated DeltaNet blocks (`layer_type="linear_attention"`)
    # have no attention projections.
    blocks = causal_lm.backbone.transformer_layers
    blocks = [b for b in blocks if getattr(b, "layer_type", None) != "linear_attention"]
    assert len(ensemble.adapters) == per_block * len(blocks)
    np.testing.assert_allclose(
        to_np(ensemble(PROMPT)),
        np.stack([to_np(causal_lm(keras_hub_inputs(causal_lm)))] * 2, axis=1),
        atol=1e-5,
    )
    ensemble.compile(sampler="greedy")
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    np.testing.assert_array_equal(out["token_ids"], keras_hub_greedy(causal_lm))
    np.testing.assert_allclose(out["epistemic"], 0.0, atol=1e-6)
    assert ("member_self_attention" in out) == (family in ROUTE_FAMILIES)
    if family in ROUTE_FAMILIES:
        # The teacher-forced pass through the route (one token per row,
        # each at its position) records the decode loop's weights.
        scored = ensemble.score_uncertainty(
            out["token_ids"], prompt_mask=PROMPT["padding_mask"], attention=True
        )
        generated = out["generated_mask"][:, None, None, None]
        np.testing.assert_allclose(
            np.where(generated, scored["member_self_attention"], 0.0),
            out["member_self_attention"],
            atol=1e-5,
        )
        # Its figures are those of keras-hub's own attention path.
        plain = ensemble.score_uncertainty(out["token_ids"], prompt_mask=PROMPT["padding_mask"])
        assert "member_self_attention" not in plain
        np.testing.assert_allclose(scored["log_prob"], plain["log_prob"], atol=1e-5)

    rng = np.random.default_rng(0)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.3)
    logits = to_np(ensemble(PROMPT))
    np.testing.assert_allclose(
        logits[:, 1], to_np(ensemble.member_causal_lm(1)(keras_hub_inputs(causal_lm))), atol=1e-4
    )
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3

    # The prompts' pass in blocks (an eager pass's memory bound), the last
    # shorter, gives the one pass's cache and hidden states.
    ids = keras.ops.convert_to_tensor(PROMPT["token_ids"])
    mask = keras.ops.convert_to_tensor(PROMPT["padding_mask"])
    for length in (None, 4):
        whole = decode_engine.prefill(ensemble, ids, mask, length)
        blocks = decode_engine.prefill(ensemble, ids, mask, length, block=3)
        for a, b in zip(keras.tree.flatten(whole), keras.tree.flatten(blocks)):
            # Round-off of other summation orders, relative to values near
            # 10 (OPT's under MKL differ by 2e-4).
            np.testing.assert_allclose(to_np(b), to_np(a), rtol=1e-4, atol=1e-4)

    # The per-token loss predictor reads every family the ensemble takes:
    # its token loss is the keras-hub model's next-token cross-entropy.
    predictor = TokenLossPredictor.from_keras_hub(causal_lm, hidden_units=(4,))
    z = to_np(causal_lm(keras_hub_inputs(causal_lm))).astype("float64")[:, :-1]
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    taken = np.take_along_axis(log_p, PROMPT["token_ids"][:, 1:, None], -1)[..., 0]
    expected = np.pad(np.where(PROMPT["padding_mask"][:, 1:], -taken, 0.0), ((0, 0), (0, 1)))
    np.testing.assert_allclose(to_np(predictor(PROMPT)["token_loss"]), expected, atol=1e-4)


@pytest.mark.skipif(BACKEND != "jax", reason="a check before anything runs: backend-independent")
@pytest.mark.parametrize("family", REFUSED)
def test_a_refused_family_says_why(family):
    causal_lm = build_causal_lm(family)
    with pytest.raises(ValueError, match=f"cannot wrap a {type(causal_lm).__name__}: "):
        LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2)
    with pytest.raises(TypeError, match="reversible token embedding"):
        TokenLossPredictor.from_keras_hub(causal_lm)


#: The mixture-of-experts families (keras-hub's stacked expert banks).
MOE = ("gpt_oss", "mixtral", "qwen3_5_moe", "qwen3_moe", "qwen_moe")
EXPERT_TARGETS = families.ATTENTION_TARGETS + ("experts",)


@pytest.mark.parametrize("family", families_this_run(MOE, 1))
def test_experts_take_members_equal_to_models_with_merged_expert_kernels(family, tmp_path):
    """`targets` with `"experts"`: zero adapters give keras-hub's logits;
    with trained factors each member equals the plain keras-hub model
    whose stacked expert kernels (and attention kernels) are that
    member's merged ones, set in the model itself; `fit` trains the expert
    factors and nothing frozen; a preset round trip keeps the members."""
    causal_lm = build_causal_lm(family)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(
        causal_lm, num_members=2, rank=2, targets=EXPERT_TARGETS, seed=0
    )
    expert_factors = [a for a in ensemble.adapters if isinstance(a, LoRAEnsembleExpertKernel)]
    assert expert_factors and all(k.lora_a.shape[:2] == (2, 4) for k in expert_factors)
    reference = to_np(causal_lm(keras_hub_inputs(causal_lm)))
    np.testing.assert_allclose(to_np(ensemble(PROMPT)), np.stack([reference] * 2, 1), atol=1e-5)

    rng = np.random.default_rng(0)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.3)
    logits = to_np(ensemble(PROMPT))
    for member in range(2):
        plain = build_causal_lm(family)
        for ours, theirs in zip(
            ensemble.backbone.transformer_layers, plain.backbone.transformer_layers
        ):
            sites = families.block_sites(ours, EXPERT_TARGETS, required=False)
            plain_sites = families.block_sites(theirs, EXPERT_TARGETS, required=False)
            for (role, (parent, name)), (_, (plain_parent, plain_name)) in zip(sites, plain_sites):
                layer, plain_layer = getattr(parent, name), getattr(plain_parent, plain_name)
                if role != "experts":
                    plain_layer.kernel.assign(layer.merged_kernel(member))
                    continue
                # W[e] + A[m, e] @ B[m, e] in NumPy, into the expert bank.
                _, kernels = expert_kernels(plain_layer)
                for (_, variable), factors in zip(kernels, layer.kernel_adapters, strict=True):
                    a, b = to_np(factors.lora_a)[member], to_np(factors.lora_b)[member]
                    variable.assign(to_np(variable) + np.einsum("eir,ero->eio", a, b))
        np.testing.assert_allclose(
            logits[:, member], to_np(plain(keras_hub_inputs(plain))), atol=1e-4
        )
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3

    preset = str(tmp_path / "preset")
    ensemble.save_to_preset(preset)
    np.testing.assert_array_equal(to_np(LoRAEnsembleCausalLM.from_preset(preset)(PROMPT)), logits)
    adapters = str(tmp_path / "experts.lora_ensemble.h5")
    ensemble.save_adapters(adapters)
    loaded = LoRAEnsembleCausalLM.from_adapters(build_causal_lm(family), adapters)
    np.testing.assert_array_equal(to_np(loaded(PROMPT)), logits)

    frozen = {w.path: to_np(w) for w in ensemble.weights if "lora" not in w.path}
    before = [to_np(k.lora_b) for k in expert_factors]
    tokens = rng.integers(4, 50, size=(4, 9)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((4, 8), bool)}
    ensemble.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = ensemble.fit(x, tokens[:, 1:], batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert all(np.abs(to_np(k.lora_b) - b).max() > 0 for k, b in zip(expert_factors, before))
    for w in ensemble.weights:
        if "lora" not in w.path:
            np.testing.assert_array_equal(to_np(w), frozen[w.path], err_msg=w.path)


@pytest.mark.skipif(BACKEND != "jax", reason="site finding is backend-independent")
def test_mlp_targets_of_a_mixture_of_experts_and_experts_of_a_dense_model_are_refused():
    causal_lm = build_causal_lm("mixtral")
    with pytest.raises(ValueError, match="0 projections for target 'mlp_gate'.*'experts'"):
        LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2, targets=["mlp_gate"])
    sites, roles = families.decoder_sites(causal_lm.backbone, families.ATTENTION_TARGETS)
    assert roles == list(families.ATTENTION_TARGETS) * 2
    with pytest.raises(ValueError, match="no block of `backbone` .* is a mixture of experts"):
        LoRAEnsembleCausalLM.from_keras_hub(
            build_causal_lm("llama"), num_members=2, rank=2, targets=EXPERT_TARGETS
        )


@pytest.mark.skipif(BACKEND != "jax", reason="weights copied across dtypes: backend-independent")
def test_a_backbone_under_another_dtype_is_a_copy_with_the_adapters_values():
    """keras-hub's loaders and harness pass `dtype`: the decoder is copied
    under it, and a decoder that holds adapters gives them its values."""
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(
        build_causal_lm("llama"), num_members=2, rank=2, seed=0
    )
    rng = np.random.default_rng(1)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape))
    decoder = ensemble.backbone.decoder
    copy = LoRAEnsembleDecoderBackbone(decoder, **ensemble.method_config, dtype="bfloat16")
    assert copy.decoder is not decoder and copy.decoder.dtype_policy.name == "bfloat16"
    for ours, theirs in zip(copy._adapters, ensemble.adapters, strict=True):
        np.testing.assert_allclose(
            to_np(ours.lora_b).astype("float32"), to_np(theirs.lora_b), rtol=1e-2
        )
    embeddings = to_np(copy.token_embedding.embeddings).astype("float32")
    np.testing.assert_allclose(embeddings, to_np(decoder.token_embedding.embeddings), rtol=1e-2)


#: Families whose cached step cannot run a shared trunk
#: (`families.Family.trunk_refused`): their blocks run on every member's
#: rows, with or without `layers`.
TRUNK_REFUSED = ("gemma4", "qwen3_5", "qwen3_5_moe")


def _layer_cache(cache, i):
    """Block `i`'s cache of a whole model's member cache: Gemma 3's pair,
    or the stacked layout's slice (its layer axis after the members')."""
    return cache[i] if isinstance(cache, tuple) else cache[:, :, i]


@pytest.mark.parametrize("family", families_this_run(SUPPORTED, SLICE))
def test_the_top_block_adapted_decodes_over_a_shared_trunk_as_every_block_adapted(family):
    """`layers=[-1]`: the lower block runs once per prompt row with its
    cache held once (no member axis), and the ensemble gives the tokens,
    figures and top-block cache of the all-block ensemble whose lower
    adapters are zero (float32 round-off: the trunk's products run on
    fewer rows)."""
    causal_lm = build_causal_lm(family)
    whole = LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2, seed=0)
    refused = family in TRUNK_REFUSED
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        upper = LoRAEnsembleCausalLM.from_keras_hub(
            causal_lm, num_members=2, rank=2, seed=0, layers=[-1]
        )
    assert any("shared trunk" in str(w.message) for w in caught) == refused, caught
    count = len(upper.adapters)
    # Qwen 3.5's lower block is linear attention, without adapters.
    assert count == len(whole.adapters) // (1 if family.startswith("qwen3_5") else 2)
    rng = np.random.default_rng(0)
    for ours, theirs in zip(upper.adapters, whole.adapters[-count:], strict=True):
        ours.lora_a.assign(theirs.lora_a)
        b = rng.normal(size=ours.lora_b.shape) * 0.3
        ours.lora_b.assign(b)
        theirs.lora_b.assign(b)
    shared = upper.trunk_blocks
    assert shared == (0 if refused else 1)

    outputs, beams = [], []
    for ensemble in (whole, upper):
        ensemble.compile(sampler="greedy")
        outputs.append(ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True))
        # Beam search repeats and reorders the cache's rows (axis 0).
        ensemble.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=2))
        beam = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
        assert ("member_self_attention" in beam) == (family in ROUTE_FAMILIES)
        beams.append(beam["token_ids"])
    np.testing.assert_array_equal(beams[1], beams[0])
    np.testing.assert_array_equal(outputs[1]["token_ids"], outputs[0]["token_ids"])
    for name, value in outputs[0].items():
        if np.asarray(value).dtype.kind == "f":
            # The Fisher-Rao angle's arccos magnifies float32 round-off
            # near the uniform distribution, where these tiny models'
            # next-token distributions lie (distances under 0.01).
            atol = 5e-5 if name.endswith("fisher_rao_distance") else 1e-5
            np.testing.assert_allclose(outputs[1][name], value, atol=atol, err_msg=name)
    assert np.abs(outputs[0]["epistemic"]).max() > 1e-5

    ids = keras.ops.convert_to_tensor(PROMPT["token_ids"])
    # The forward pass over the trunk (`member_forward`): the member
    # logits, teacher-forced figures, and the training forward of the
    # default loss (the members' hidden states).
    np.testing.assert_allclose(to_np(upper(PROMPT)), to_np(whole(PROMPT)), atol=1e-5)
    np.testing.assert_allclose(
        to_np(upper._teacher_forced_figures(ids)),
        to_np(whole._teacher_forced_figures(ids)),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        to_np(upper(PROMPT, training=True)), to_np(whole(PROMPT, training=True)), atol=1e-5
    )
    # A block's input (EigenScore's embeddings), below and above the trunk.
    for block in (0, len(causal_lm.backbone.transformer_layers) - 1):
        np.testing.assert_allclose(
            to_np(member_block_input(upper, PROMPT, block)),
            to_np(member_block_input(whole, PROMPT, block)),
            atol=1e-5,
        )
    mask = keras.ops.convert_to_tensor(PROMPT["padding_mask"])
    hidden, cache = decode_engine.prefill(whole, ids, mask, 4)
    trunk_hidden, trunk_cache = decode_engine.prefill(upper, ids, mask, 4)
    np.testing.assert_allclose(to_np(trunk_hidden), to_np(hidden), atol=1e-5)
    if not shared:
        return
    # The prompts' pass in blocks (where it runs eagerly) over the trunk.
    blocked = decode_engine.prefill(upper, ids, mask, 4, block=3)
    for a, b in zip(
        keras.tree.flatten((trunk_hidden, trunk_cache)), keras.tree.flatten(blocked), strict=True
    ):
        np.testing.assert_allclose(to_np(b), to_np(a), atol=1e-5)
    for ours, theirs in zip(
        keras.tree.flatten(trunk_cache["trunk"][0]),
        keras.tree.flatten(_layer_cache(cache, 0)),
        strict=True,
    ):
        # Held once: the whole model's cache of that block without its
        # member axis, equal to each member's.
        ours, theirs = to_np(ours), to_np(theirs)
        assert ours.shape == theirs.shape[:1] + theirs.shape[2:]
        for member in range(2):
            np.testing.assert_allclose(ours, theirs[:, member], atol=1e-5)
    for ours, theirs in zip(
        keras.tree.flatten(trunk_cache["members"][0]),
        keras.tree.flatten(_layer_cache(cache, 1)),
        strict=True,
    ):
        np.testing.assert_allclose(to_np(ours), to_np(theirs), atol=1e-5)


@pytest.mark.skipif(BACKEND != "jax", reason="argument checks and configs: backend-independent")
def test_layers_are_checked_and_kept_by_presets_and_adapter_files(tmp_path):
    causal_lm = build_causal_lm("llama")
    for bad, error in (
        ("1", TypeError),
        ([1.0], TypeError),
        ([True], TypeError),
        ([2], ValueError),
        ([-3], ValueError),
        ([0, 0], ValueError),
        ([], ValueError),
    ):
        with pytest.raises(error, match="`layers`"):
            LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2, layers=bad)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(
        causal_lm, num_members=2, rank=2, seed=0, layers=np.array([-1])
    )
    assert ensemble.backbone.adapted_blocks == (1,) and ensemble.method_config["layers"] == [1]
    # A family entry the decoder's graph contradicts runs no shared trunk.
    assert trunk_step.trunk_refusal(ensemble.backbone, ensemble.family) is None
    assert "not `norm`" in trunk_step.trunk_refusal(
        ensemble.backbone, families.Family(final_norm="norm")
    )
    gemma = LoRAEnsembleCausalLM.from_keras_hub(build_causal_lm("gemma"), 2, 2, layers=[1])
    assert "more than the token embedding" in trunk_step.trunk_refusal(
        gemma.backbone, families.Family()
    )
    assert [a.base_layer.path.split("/")[0] for a in ensemble.adapters] == [
        "transformer_layer_1"
    ] * 4
    rng = np.random.default_rng(0)
    for adapter in ensemble.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.3)
    logits = to_np(ensemble(PROMPT))
    np.testing.assert_allclose(logits[:, 1], to_np(ensemble.member_causal_lm(1)(PROMPT)), atol=1e-5)

    preset = str(tmp_path / "preset")
    ensemble.save_to_preset(preset)
    loaded = LoRAEnsembleCausalLM.from_preset(preset)
    assert loaded.backbone.adapted_blocks == (1,)
    np.testing.assert_array_equal(to_np(loaded(PROMPT)), logits)
    adapters = str(tmp_path / "top.lora_ensemble.h5")
    ensemble.save_adapters(adapters)
    loaded = LoRAEnsembleCausalLM.from_adapters(build_causal_lm("llama"), adapters)
    np.testing.assert_array_equal(to_np(loaded(PROMPT)), logits)
    every_block = LoRAEnsembleCausalLM.from_keras_hub(causal_lm, num_members=2, rank=2)
    with pytest.raises(ValueError, match="layers: file \\[1\\], model None"):
        every_block.load_adapters(adapters)
