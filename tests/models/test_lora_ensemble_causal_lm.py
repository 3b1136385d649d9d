"""LoRA-Ensemble on keras-hub causal LMs: member logits against the
keras-hub model with each member's merged kernels, generation with zero
adapters against the keras-hub model's own, the decode engine's per-token
uncertainty against a NumPy decomposition of teacher-forced member logits
for every family and keras-hub sampler, the compiled PyTorch step against
the eager one, and generations that run inside one another. Tiny models of
every family (random weights)."""

import threading

import h5py
import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import families_this_run
from zoo_testing import np_token_figures
from zoo_testing import skip_on_alternate_days
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models import LoRAEnsembleCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import teacher_forcing
from ensemble_zoo.models.lora_ensemble.causal_lm.ensemble_causal_lm import (
    member_token_cross_entropy,
)

TINY = dict(
    vocabulary_size=50,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
)
FAMILIES = {
    "gemma": (
        keras_hub.models.GemmaCausalLM,
        keras_hub.models.GemmaBackbone,
        dict(TINY, head_dim=8),
        ("attention", "query_dense"),
    ),
    "llama": (
        keras_hub.models.LlamaCausalLM,
        keras_hub.models.LlamaBackbone,
        TINY,
        ("_self_attention_layer", "_query_dense"),
    ),
}
PROMPT = {
    "token_ids": np.array([[1, 5, 7, 0, 0, 0, 0], [1, 9, 4, 3, 0, 0, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0]], bool),
}


def base_model(family, seed=0):
    task_cls, backbone_cls, config, _ = FAMILIES[family]
    keras.utils.set_random_seed(seed)
    return task_cls(backbone=backbone_cls(**config), preprocessor=None)


def randomize_adapters(model, scale=0.5, seed=3):
    rng = np.random.default_rng(seed)
    for adapter in model.adapters:
        adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * scale)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pair(request):
    """(family, the keras-hub model, a 3-member ensemble on it)."""
    base = base_model(request.param)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=3, rank=2, a_gain=1.0, seed=0)
    return request.param, base, ensemble


def test_zero_adapters_generate_what_the_model_generates_and_leave_it_unchanged(pair):
    family, base, ensemble = pair
    before = [to_np(w) for w in base.weights]
    base.compile(sampler="greedy")  # Llama's default is top-k sampling
    ensemble.compile(sampler="greedy")
    expected = base.generate(PROMPT, stop_token_ids=None)
    out = ensemble.generate(PROMPT, stop_token_ids=None)
    np.testing.assert_array_equal(to_np(out["token_ids"]), to_np(expected["token_ids"]))
    # The user's model: same class, same weights, no adapter inside.
    attention_attr, projection = FAMILIES[family][3]
    block = base.backbone.transformer_layers[0]
    assert type(getattr(getattr(block, attention_attr), projection)) is keras.layers.EinsumDense
    assert type(base.backbone) is FAMILIES[family][1]
    for old, new in zip(before, base.weights):
        np.testing.assert_array_equal(old, to_np(new))
    assert len(ensemble.adapters) == 4 * TINY["num_layers"]
    assert all(not w.trainable for w in ensemble.backbone.weights if "lora" not in w.path)


#: Where each target sits in a decoder block, written out per layout (the
#: reference for the sites the ensemble finds by layer type and name).
GEMMA_SITES = {
    "query": ("attention", "query_dense"),
    "key": ("attention", "key_dense"),
    "value": ("attention", "value_dense"),
    "attention_output": ("attention", "output_dense"),
    "mlp_gate": ("gating_ffw",),
    "mlp_up": ("gating_ffw_2",),
    "mlp_down": ("ffw_linear",),
}
LLAMA_SITES = {
    "query": ("_self_attention_layer", "_query_dense"),
    "key": ("_self_attention_layer", "_key_dense"),
    "value": ("_self_attention_layer", "_value_dense"),
    "attention_output": ("_self_attention_layer", "_output_dense"),
    "mlp_gate": ("_feedforward_gate_dense",),
    "mlp_up": ("_feedforward_intermediate_dense",),
    "mlp_down": ("_feedforward_output_dense",),
}


def merged_copy(base, ensemble, member):
    """The keras-hub model with member `member`'s merged kernels."""
    copy = type(base).from_config(base.get_config())
    copy.set_weights(base.get_weights())
    adapters = iter(ensemble.adapters)
    gemma = (keras_hub.models.GemmaCausalLM, keras_hub.models.Gemma3CausalLM)
    sites = GEMMA_SITES if isinstance(base, gemma) else LLAMA_SITES
    for block in copy.backbone.transformer_layers:
        for target in ensemble.targets:
            layer = block
            for attribute in sites[target]:
                layer = getattr(layer, attribute)
            layer.kernel.assign(next(adapters).merged_kernel(member))
    return copy


def test_member_logits_equal_the_model_with_each_members_merged_kernels(pair):
    family, base, ensemble = pair
    randomize_adapters(ensemble)
    inputs = {"token_ids": PROMPT["token_ids"], "padding_mask": np.ones((2, 7), bool)}
    logits = to_np(ensemble(inputs))
    assert logits.shape == (2, 3, 7, 50)
    for member in range(3):
        expected = to_np(merged_copy(base, ensemble, member)(inputs))
        np.testing.assert_allclose(logits[:, member], expected, atol=1e-5)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-2
    # One member as a plain keras-hub model of the family.
    single = ensemble.member_causal_lm(2)
    assert type(single) is type(base) and type(single.backbone) is type(base.backbone)
    np.testing.assert_allclose(to_np(single(inputs)), logits[:, 2], atol=1e-5)
    with pytest.raises(ValueError, match="member"):
        ensemble.member_causal_lm(3)
    # The frozen model alone: the keras-hub model the ensemble was built on.
    frozen = ensemble.base_causal_lm()
    assert type(frozen) is type(base)
    np.testing.assert_allclose(to_np(frozen(inputs)), to_np(base(inputs)), atol=1e-6)


#: The per-position figures of `generate` and `score_uncertainty`.
EP_FIGURES = (
    "ep_total",
    "ep_aleatoric",
    "ep_epistemic",
    "ep_expected_pairwise_kl",
    "ep_reverse_mutual_information",
)
POSITION_FIGURES = (
    "total",
    "aleatoric",
    "epistemic",
    "expected_pairwise_kl",
    "reverse_mutual_information",
    "max_probability",
    "log_prob",
) + EP_FIGURES


def with_ep_reference(ref, member_logits, tokens, counted):
    """Adds the expectation-of-products figures to a reference: members
    weighted by the softmax of their log-likelihoods of the counted
    tokens before each position."""
    taken = np.where(counted[:, None], ref["member_log_probs"], 0.0)
    prefix = np.cumsum(taken, axis=-1) - taken
    weights = np.exp(prefix - prefix.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    ep = np_token_figures(member_logits, tokens, weights=weights)
    for name in EP_FIGURES:
        ref[name] = ep[name[len("ep_") :]]
    return ref


MEMBER_FIGURES = ("member_log_probs", "member_entropy")


def test_decode_loop_uncertainty_equals_a_teacher_forced_decomposition(pair):
    """The figures computed inside the compiled decode loop, and
    `score_uncertainty` in chunks of 2 positions, equal a NumPy
    decomposition of one teacher-forced pass over the generated text."""
    family, base, ensemble = pair
    randomize_adapters(ensemble)
    ensemble.compile(sampler="greedy")
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    tokens = out["token_ids"]
    generated = out["generated_mask"]
    np.testing.assert_array_equal(generated, ~PROMPT["padding_mask"])
    member_logits = to_np(
        ensemble({"token_ids": tokens, "padding_mask": np.ones_like(tokens, bool)})
    )
    ref = np_token_figures(member_logits[:, :, :-1], tokens[:, 1:])
    ref = with_ep_reference(ref, member_logits[:, :, :-1], tokens[:, 1:], generated[:, 1:])
    scored = ensemble.score_uncertainty(tokens, chunk_size=2, prompt_mask=PROMPT["padding_mask"])
    for name in POSITION_FIGURES + MEMBER_FIGURES:
        mask = generated[:, None, 1:] if name in MEMBER_FIGURES else generated[:, 1:]
        expected = np.where(mask, ref[name], 0.0)
        np.testing.assert_allclose(out[name][..., 1:], expected, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(scored[name][..., 1:], ref[name], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(out["total"], out["aleatoric"] + out["epistemic"], atol=1e-6)
    for prefix in ("", "ep_"):
        np.testing.assert_allclose(
            out[prefix + "expected_pairwise_kl"],
            out[prefix + "epistemic"] + out[prefix + "reverse_mutual_information"],
            atol=1e-5,
        )
    assert out["epistemic"][generated].min() > 0.0
    # The first generated token: no prefix yet, both ensembles agree.
    first = generated & ~np.roll(generated, 1, axis=1)
    np.testing.assert_allclose(out["ep_epistemic"][first], out["epistemic"][first], atol=1e-6)
    assert np.abs(out["ep_epistemic"] - out["epistemic"])[generated].max() > 1e-6
    # Sequence level: sums over the generated tokens.
    np.testing.assert_allclose(out["log_likelihood"], out["log_prob"].sum(-1), rtol=1e-6)
    ll = out["member_log_likelihoods"].astype("float64")
    seq = np.log(np.exp(ll).mean(axis=1)) - ll.mean(axis=1)
    np.testing.assert_allclose(out["sequence_epistemic"], seq, atol=1e-4)
    # Greedy from the ensemble: every generated token is the argmax of p̄.
    mean = np.exp(member_logits - member_logits.max(-1, keepdims=True))
    mean = (mean / mean.sum(-1, keepdims=True)).mean(axis=1)
    # lm-polygraph's distance estimators and BoostedProb from the loop's
    # per-token figures equal the array functions on the whole
    # distributions.
    log_mean = np.log(mean.astype("float64"))[:, :-1]
    shifted = member_logits.astype("float64")[:, :, :-1]
    member_log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    for who, log_p, member in (("ensemble", log_mean, None), ("member 1", member_log_p[:, 1], 1)):
        for figures in (out, {**scored, "generated_mask": generated}):
            seq = ez.metrics.sequence_uncertainty(figures, member=member)
            for name in ("fisher_rao", "renyi_negentropy", "self_certainty", "boosted_probability"):
                taken = (tokens[:, 1:],) if name == "boosted_probability" else ()
                expected = getattr(ez.metrics, name)(log_p, *taken, generated[:, 1:])
                np.testing.assert_allclose(seq[name], expected, atol=1e-5, err_msg=f"{who} {name}")
    np.testing.assert_array_equal(
        mean.argmax(-1)[:, :-1][generated[:, 1:]], tokens[:, 1:][generated[:, 1:]]
    )


@pytest.mark.skipif(
    keras.config.backend() != "jax", reason="config arithmetic is backend-independent"
)
def test_config_round_trip_and_clear_errors(pair):
    family, base, ensemble = pair
    restored = type(ensemble).from_config(ensemble.get_config())
    restored.set_weights(ensemble.get_weights())
    inputs = {"token_ids": PROMPT["token_ids"], "padding_mask": PROMPT["padding_mask"]}
    np.testing.assert_allclose(to_np(restored(inputs)), to_np(ensemble(inputs)), atol=1e-6)
    assert restored.method_config == ensemble.method_config
    with pytest.raises(TypeError, match="causal_lm"):
        LoRAEnsembleCausalLM.from_keras_hub(base.backbone, num_members=2, rank=2)
    with pytest.raises(ValueError, match="targets"):
        LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, targets=["gate"])
    with pytest.raises(ValueError, match="one entry per target"):
        LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank={"query": 2})
    with pytest.raises(TypeError, match="backbone"):
        LoRAEnsembleCausalLM(backbone=base.backbone)
    assert ez.models.LoRAEnsembleGemmaCausalLM is LoRAEnsembleCausalLM  # the old name
    with pytest.raises(TypeError, match="return_uncertainty"):
        ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty="yes")
    assert ez.models.LoRAEnsembleCausalLM is LoRAEnsembleCausalLM
    tokens = PROMPT["token_ids"]
    for bad, match in [
        (tokens + 50, r"\[0, 50\)"),
        (tokens[0], r"shape \(batch, length\)"),
        (tokens[:, :1], "length >= 2"),
        (tokens + 0.5, "integer"),
        ("abc", "token_ids"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            ensemble.score_uncertainty(bad)
    with pytest.raises(ValueError, match="padding_mask"):
        ensemble.score_uncertainty(tokens, np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="chunk_size"):
        ensemble.score_uncertainty(tokens, chunk_size=0)
    with pytest.raises(TypeError, match="attention"):
        ensemble.score_uncertainty(tokens, attention="yes")


def test_scoring_chunks_are_sized_by_the_vocabulary_and_record_no_gradients(pair):
    """The default chunk keeps `members x positions x vocabulary` within
    the budget (16 positions of 4 Gemma 3 members); the compiled scoring
    returns a tensor without an autograd graph (under PyTorch an eager
    pass with one kept every chunk's tensors: 70 MB per token on Gemma 3
    270M), and scoring in chunks that do not divide the length gives the
    figures of one chunk."""
    assert teacher_forcing.positions_per_chunk(4, 262_144) == 16
    assert teacher_forcing.positions_per_chunk(8, 10**8) == 1
    _, _, ensemble = pair
    tokens = np.concatenate([PROMPT["token_ids"], PROMPT["token_ids"]], axis=1)
    figures = ensemble._scoring_function()(
        tokens, np.ones_like(tokens, bool), np.zeros_like(tokens, bool), 3, False
    )
    assert not getattr(figures, "requires_grad", False)
    whole = ensemble.score_uncertainty(tokens)
    for name, value in ensemble.score_uncertainty(tokens, chunk_size=4).items():
        np.testing.assert_allclose(value, whole[name], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(to_np(figures)[:, 1:, 0], whole["total"][:, 1:], atol=1e-5)


SAMPLERS = {
    "greedy": lambda: "greedy",
    "random": lambda: keras_hub.samplers.RandomSampler(seed=1),
    "top_k": lambda: keras_hub.samplers.TopKSampler(k=3, seed=1),
    "top_p": lambda: keras_hub.samplers.TopPSampler(p=0.9, seed=1),
    "beam": lambda: keras_hub.samplers.BeamSampler(num_beams=2),
    "contrastive": lambda: keras_hub.samplers.ContrastiveSampler(k=2),
}


def check_figures_against_teacher_forcing(ensemble, out, atol=1e-5):
    """The figures `generate` returned equal `score_uncertainty` on the
    ids it returned, at every generated position, and zero elsewhere."""
    generated = out["generated_mask"]
    scored = ensemble.score_uncertainty(out["token_ids"], prompt_mask=~generated)
    assert generated.any()
    for name in POSITION_FIGURES + MEMBER_FIGURES:
        mask = generated[:, None] if name in MEMBER_FIGURES else generated
        expected = np.where(mask, scored[name], 0.0)
        np.testing.assert_allclose(out[name], expected, atol=atol, err_msg=name)


def test_every_sampler_records_the_teacher_forced_figures(pair):
    """Greedy, random, top-k and top-p run in the engine's loop; beam and
    contrastive search run keras-hub's own loops on the ensemble's
    log-probabilities. Every one returns figures equal to teacher-forced
    scoring of the ids it returned (the cache paths of every family are
    checked in `test_other_families_...`)."""
    family, base, ensemble = pair
    if family != "gemma":
        pytest.skip("one family suffices: the sampler paths are family-independent")
    randomize_adapters(ensemble)
    try:
        for name, make in SAMPLERS.items():
            ensemble.compile(sampler=make())
            out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
            assert out["token_ids"].shape == PROMPT["token_ids"].shape, name
            np.testing.assert_array_equal(
                out["token_ids"][PROMPT["padding_mask"]],
                PROMPT["token_ids"][PROMPT["padding_mask"]],
            )
            check_figures_against_teacher_forcing(ensemble, out, atol=2e-4)
    finally:
        ensemble.compile(sampler="greedy")


OTHER_FAMILIES = {
    "gemma2": (
        keras_hub.models.GemmaCausalLM,
        keras_hub.models.GemmaBackbone,
        dict(
            TINY,
            head_dim=8,
            query_head_dim_normalize=False,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
            final_logit_soft_cap=30.0,
            attention_logit_soft_cap=50.0,
            use_sliding_window_attention=True,
            sliding_window_size=4,
        ),
    ),
    "gemma3": (
        keras_hub.models.Gemma3CausalLM,
        keras_hub.models.Gemma3Backbone,
        dict(TINY, head_dim=8, image_size=16, vision_encoder=None),
    ),
    "qwen3": (
        keras_hub.models.Qwen3CausalLM,
        keras_hub.models.Qwen3Backbone,
        dict(TINY, head_dim=8),
    ),
}
ALL_TARGETS = ("query", "key", "value", "attention_output", "mlp_gate", "mlp_up", "mlp_down")


class CallbackSampler(keras_hub.samplers.GreedySampler):
    """Greedy, and calls `callback()` at every step (at run time under
    PyTorch and eager TensorFlow)."""

    def __init__(self, callback):
        super().__init__()
        self.callback = callback

    def get_next_token(self, probabilities):
        self.callback()
        return super().get_next_token(probabilities)


def test_generations_share_no_state_nested_or_in_threads(pair):
    """A generation inside another's sampler callback, and two models
    generating in two threads at once, return what each returns alone,
    the attention weights that keras-hub's thread-local attention route
    hands over included."""
    family, base, ensemble = pair
    if family != "gemma":
        pytest.skip("one family suffices: the engine is family-independent")
    other = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, a_gain=1.0, seed=1)
    randomize_adapters(ensemble, seed=3)
    randomize_adapters(other, seed=4)
    for model in (ensemble, other):
        model.compile(sampler="greedy")
    alone = [
        m.generate(PROMPT, stop_token_ids=None, return_uncertainty=True) for m in (ensemble, other)
    ]

    results = {}

    def run(name, model):
        results[name] = model.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)

    threads = [threading.Thread(target=run, args=(i, m)) for i, m in enumerate((ensemble, other))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(2):
        np.testing.assert_array_equal(results[i]["token_ids"], alone[i]["token_ids"])
        np.testing.assert_allclose(results[i]["total"], alone[i]["total"], atol=1e-6)
        np.testing.assert_allclose(
            results[i]["member_self_attention"], alone[i]["member_self_attention"], atol=1e-6
        )

    if keras.config.backend() == "jax":
        return  # JAX traces the sampler once: a callback does not run per step
    inner = []
    ensemble.compile(
        sampler=CallbackSampler(
            lambda: inner.append(
                other.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
            )
        ),
        run_eagerly=True,
    )
    try:
        nested = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    finally:
        ensemble.compile(sampler="greedy")
    assert len(inner) == 4  # one per generated position
    np.testing.assert_array_equal(nested["token_ids"], alone[0]["token_ids"])
    np.testing.assert_allclose(nested["epistemic"], alone[0]["epistemic"], atol=1e-6)
    np.testing.assert_allclose(
        nested["member_self_attention"], alone[0]["member_self_attention"], atol=1e-6
    )
    for result in inner:
        np.testing.assert_array_equal(result["token_ids"], alone[1]["token_ids"])
        np.testing.assert_allclose(
            result["member_self_attention"], alone[1]["member_self_attention"], atol=1e-6
        )


@pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch graphs")
def test_eager_torch_decode_replays_its_recorded_step(monkeypatch):
    """PyTorch's default decode records a step's operations once a
    signature has run `CAPTURE_AFTER` eager steps and replays them: tokens
    and figures equal those of `run_eagerly=True` (the model's Python at
    every step) exactly, in a second call and after the adapters are
    written in place (replayed from the first step, not recorded again),
    and over a shared trunk; stop tokens end the loop as eagerly. Gemma 3
    (a cache of per-layer pairs) with a sliding window of 4 positions. A
    top-k sampler draws from its seed: it decodes eagerly, with the seed's
    tokens."""
    from ensemble_zoo.utils import captured_steps

    recorded = []
    record = captured_steps.record

    def counting(function, args):
        graph, outputs = record(function, args)
        recorded.append(graph is not None)
        return graph, outputs

    monkeypatch.setattr(captured_steps, "record", counting)
    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]
    keras.utils.set_random_seed(0)
    config = dict(config, num_layers=2, use_sliding_window_attention=True, sliding_window_size=4)
    base = task_cls(backbone=backbone_cls(**config), preprocessor=None)
    # 11 or 12 new tokens: more steps of one signature than CAPTURE_AFTER.
    prompt = {k: np.pad(v, ((0, 0), (0, 8))) for k, v in PROMPT.items()}
    assert prompt["token_ids"].shape[1] - 4 > captured_steps.CAPTURE_AFTER

    def generate_both(model, sampler="greedy", **kwargs):
        out = []
        for eagerly in (True, False):
            model.compile(sampler=sampler() if callable(sampler) else sampler, run_eagerly=eagerly)
            out.append(model.generate(prompt, **kwargs))
        return out  # compiled as the second call was: later calls reuse it

    for layers in (None, [-1]):
        ensemble = LoRAEnsembleCausalLM.from_keras_hub(
            base, num_members=2, rank=2, a_gain=1.0, seed=0, layers=layers
        )
        randomize_adapters(ensemble)
        count = len(recorded)
        eager, replayed = generate_both(ensemble, stop_token_ids=None, return_uncertainty=True)
        assert recorded[count:] == [True], recorded  # recorded once, at step 9
        calls = [ensemble.generate(prompt, stop_token_ids=None, return_uncertainty=True)]
        randomize_adapters(ensemble, seed=5)
        calls.append(ensemble.generate(prompt, stop_token_ids=None, return_uncertainty=True))
        # Neither a second call nor weights written in place record again.
        assert len(recorded) == count + 1, recorded
        ensemble.compile(sampler="greedy", run_eagerly=True)
        written = ensemble.generate(prompt, stop_token_ids=None, return_uncertainty=True)
        for got, expected in ((replayed, eager), (calls[0], eager), (calls[1], written)):
            np.testing.assert_array_equal(got["token_ids"], expected["token_ids"])
            for name in POSITION_FIGURES + MEMBER_FIGURES:
                np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert np.abs(written["epistemic"] - eager["epistemic"]).max() > 1e-3
        stop = int(written["token_ids"][0, 8])
        eager, replayed = generate_both(ensemble, stop_token_ids=(stop,))
        np.testing.assert_array_equal(replayed["token_ids"], eager["token_ids"])
    assert all(recorded), recorded
    count = len(recorded)
    eager, replayed = generate_both(
        ensemble, sampler=lambda: keras_hub.samplers.TopKSampler(k=5, seed=7), stop_token_ids=None
    )
    assert len(recorded) == count
    ensemble.compile(sampler="greedy")
    np.testing.assert_array_equal(replayed["token_ids"], eager["token_ids"])


@pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch graphs")
@skip_on_alternate_days("torch_compile")
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a step refused by inductor_steps
def test_compiled_torch_decode_is_one_program_over_lengths_equal_to_the_eager_decode(monkeypatch):
    """With `jit_compile=True` under PyTorch on a CPU, the greedy decode
    step and the prompts' pass are each recorded once per shape and
    compiled with the weights as inputs: tokens equal the eager decode's
    and figures agree within 1e-5 (Gemma 3, whose step needs every
    PyTorch workaround; over a shared trunk too). A second generation,
    and adapters written in place (as training writes them), compile
    nothing more, and the generation follows the new adapters; so does
    another length (the length is a symbol of the programs). The
    compiler here runs the recorded
    graph as it is, for the budget (inductor's C++ compiles this model in
    about 50 s): `tests/utils/test_inductor_steps.py` compiles with
    inductor, `benchmarks/llm_decoding.py` the decode."""
    from ensemble_zoo.utils import inductor_steps

    programs = []

    def compile_graph(graph, inputs, mode, compiler):
        programs.append(len(inputs))
        return graph

    monkeypatch.setattr(inductor_steps, "_compile_graph", compile_graph)
    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]

    def ensemble(layers):
        keras.utils.set_random_seed(0)
        base = task_cls(backbone=backbone_cls(**dict(config, num_layers=2)), preprocessor=None)
        return LoRAEnsembleCausalLM.from_keras_hub(
            base, num_members=2, rank=2, a_gain=1.0, seed=0, layers=layers
        )

    def generate(model, prompt=PROMPT):
        return model.generate(prompt, stop_token_ids=None, return_uncertainty=True)

    def equal_to_eager(model, compiled, prompt=PROMPT):
        model.compile(sampler="greedy", run_eagerly=True)
        eager = generate(model, prompt)
        np.testing.assert_array_equal(compiled["token_ids"], eager["token_ids"])
        for name in POSITION_FIGURES + MEMBER_FIGURES:
            np.testing.assert_allclose(compiled[name], eager[name], atol=1e-5, err_msg=name)
        return eager

    whole = ensemble(None)
    randomize_adapters(whole, scale=0.5)
    whole.compile(sampler="greedy", jit_compile=True)
    first = generate(whole)
    np.testing.assert_array_equal(generate(whole)["token_ids"], first["token_ids"])
    assert len(programs) == 2, programs  # the prompts' pass and the step
    randomize_adapters(whole, scale=2.0)  # written in place
    changed = generate(whole)
    padded = {k: np.pad(v, ((0, 0), (0, 3))) for k, v in PROMPT.items()}
    longer = generate(whole, padded)
    assert len(programs) == 2, programs
    eager = equal_to_eager(whole, changed)
    assert np.abs(eager["epistemic"] - first["epistemic"]).max() > 1e-3
    equal_to_eager(whole, longer, padded)
    # Prompts whose bucket covers the padded length: the pass runs over
    # every position, one program for both lengths.
    whole.compile(sampler="greedy", jit_compile=True)
    full = {
        "token_ids": np.array([[1, 5, 7, 2, 3, 4, 0], [1, 9, 4, 3, 2, 5, 0]], "int32"),
        "padding_mask": np.array([[1] * 6 + [0]] * 2, bool),
    }
    # 11 of 12 positions (a bucket of 16); 8, the head size, would take a
    # step program of its own.
    wider = {k: np.pad(v, ((0, 0), (0, 5))) for k, v in full.items()}
    wider["token_ids"][:, 6:11], wider["padding_mask"][:, 6:11] = 6, True
    outputs = [generate(whole, prompt) for prompt in (full, wider)]
    assert len(programs) == 4, programs  # this function's pass and step
    equal_to_eager(whole, outputs[1], wider)
    randomize_adapters(whole, scale=0.5)
    equal_to_eager(whole, first)
    trunk = ensemble([-1])
    assert trunk.trunk_blocks == 1
    randomize_adapters(trunk)
    trunk.compile(sampler="greedy", jit_compile=True)
    eager = equal_to_eager(trunk, generate(trunk))
    assert len(programs) == 6, programs
    assert np.abs(eager["epistemic"]).max() > 1e-4


@pytest.mark.skipif(keras.config.backend() != "torch", reason="torch.compile")
@skip_on_alternate_days("torch_compile")
def test_compiled_torch_step_of_a_drawing_sampler_is_one_dynamo_graph(monkeypatch):
    """A sampler that draws reads its seed on the host, which a recording
    on fake tensors cannot: with `jit_compile=True` its step is one
    `torch.compile` graph (no graph break, no recompilation over steps and
    generations), here top-k with `k=1`, whose tokens and figures equal
    the greedy eager decode's. The graph runs through AOT autograd
    (`aot_eager`) rather than inductor's C++ code, for the budget."""
    import functools

    import torch
    from torch._dynamo.utils import counters

    from ensemble_zoo.utils import inductor_steps

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    # The prompts' pass is recorded (`inductor_steps`) and runs as recorded.
    monkeypatch.setattr(inductor_steps, "_compile_graph", lambda graph, *_: graph)
    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]
    keras.utils.set_random_seed(0)
    base = task_cls(backbone=backbone_cls(**dict(config, num_layers=1)), preprocessor=None)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, a_gain=1.0, seed=0)
    randomize_adapters(ensemble)
    ensemble.compile(sampler="greedy")
    eager = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    ensemble.compile(sampler=keras_hub.samplers.TopKSampler(k=1, seed=0), jit_compile=True)
    torch._dynamo.reset()
    counters.clear()
    try:
        for _ in range(2):
            compiled = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
        graphs, breaks = counters["stats"]["unique_graphs"], dict(counters["graph_break"])
    finally:
        torch._dynamo.reset()
    assert (graphs, breaks) == (1, {}), (graphs, breaks)
    np.testing.assert_array_equal(compiled["token_ids"], eager["token_ids"])
    for name in POSITION_FIGURES + MEMBER_FIGURES:
        np.testing.assert_allclose(compiled[name], eager[name], atol=1e-5, err_msg=name)


@pytest.mark.skipif(keras.config.backend() != "torch", reason="torch's FLOP counter")
def test_the_forward_pass_computes_the_trunk_once_per_row():
    """With the top block adapted, `call` and the training forward run the
    three blocks below once per input row (`member_forward`): the
    products they save against the all-block ensemble are at least the
    trunk's on `members - 1` copies, counted by PyTorch's FLOP counter
    (their values are checked against the all-block ensemble for every
    family in `test_causal_lm_families`)."""
    from torch.utils.flop_counter import FlopCounterMode

    def flops(function):
        with FlopCounterMode(display=False) as counter:
            function()
        return counter.get_total_flops()

    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]
    keras.utils.set_random_seed(0)
    base = task_cls(backbone=backbone_cls(**dict(config, num_layers=4)), preprocessor=None)
    whole = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=4, rank=2, seed=0)
    upper = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=4, rank=2, seed=0, layers=[-1])
    assert upper.trunk_blocks == 3
    trunk = 3 / 4 * flops(lambda: base.backbone(PROMPT))
    for ensemble in (whole, upper):
        ensemble.compile(optimizer="sgd")
    for training in (False, True):
        saved = flops(lambda: whole(PROMPT, training=training)) - flops(
            lambda: upper(PROMPT, training=training)
        )
        assert saved >= 0.99 * 3 * trunk, (training, saved, trunk)


@pytest.mark.skipif(keras.config.backend() != "jax", reason="host arithmetic; runs once")
def test_the_prompts_pass_stops_at_the_longest_prompt_rounded_to_a_power_of_two():
    """The prompts' pass covers the longest prompt (rounded up to a power
    of two: one compiled program per bucket), every position where that
    is all of them, and every position for beam and contrastive search
    (their loops read the prompt's hidden states). The generations it
    prefills are checked against keras-hub's full pass above."""
    from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import prefill_length

    def mask(lengths, length):
        return np.arange(length)[None, :] < np.array(lengths)[:, None]

    greedy = keras_hub.samplers.GreedySampler()
    assert prefill_length(greedy, mask([3, 4], 7)) == 4
    assert prefill_length(greedy, mask([3, 5], 16)) == 8
    assert prefill_length(greedy, mask([32], 48)) == 32
    assert prefill_length(greedy, mask([5], 7)) is None  # 8 would pass the end
    assert prefill_length(greedy, mask([0, 0], 7)) == 1
    assert prefill_length(keras_hub.samplers.BeamSampler(num_beams=2), mask([3], 16)) is None


def keras_hub_greedy(base, prompt):
    """The keras-hub model's own greedy generation of `prompt`. Gemma 3's
    `generate` without a preprocessor fails on its `images: None` output
    (keras-hub 0.32), so its compiled `generate_step` is called."""
    base.compile(sampler="greedy")
    if isinstance(base, keras_hub.models.Gemma3CausalLM):
        tensors = {k: keras.ops.convert_to_tensor(v) for k, v in prompt.items()}
        return to_np(base.make_generate_function()(tensors, stop_token_ids=None)["token_ids"])
    return to_np(base.generate(prompt, stop_token_ids=None)["token_ids"])


# One family a day under JAX and TensorFlow, which compile every sampler's
# loop per family (`test_causal_lm_families.py` runs every family).
@pytest.mark.parametrize("family", families_this_run(OTHER_FAMILIES, 1))
def test_other_families_decode_as_keras_hub_and_members_equal_their_merged_models(family):
    """Per family, with attention and MLP projections adapted (Dense in
    the Llama family, EinsumDense in Gemma's): zero adapters generate the
    keras-hub model's own tokens with zero epistemic uncertainty; with
    trained adapters each member equals the merged keras-hub model, and
    the decode loop (greedy) and keras-hub's beam search return figures
    equal to teacher-forced scoring. keras-hub 0.32's own
    `Gemma3CausalLM` fails with beam and contrastive search (its step
    slices the prompts' mask at the batch size before the sampler repeats
    rows into beams; no upstream issue found): the ensemble runs both."""
    task_cls, backbone_cls, config = OTHER_FAMILIES[family]
    keras.utils.set_random_seed(0)
    base = task_cls(backbone=backbone_cls(**config), preprocessor=None)
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(
        base, num_members=2, rank=2, targets=ALL_TARGETS, a_gain=1.0, seed=0
    )
    assert type(ensemble.backbone.decoder) is backbone_cls
    assert len(ensemble.adapters) == 7 * TINY["num_layers"]
    expected = keras_hub_greedy(base, PROMPT)
    ensemble.compile(sampler="greedy")
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    np.testing.assert_array_equal(out["token_ids"], expected)
    np.testing.assert_allclose(out["epistemic"], 0.0, atol=1e-6)

    inputs = {"token_ids": PROMPT["token_ids"], "padding_mask": np.ones((2, 7), bool)}
    randomize_adapters(ensemble)
    logits = to_np(ensemble(inputs))
    expected = to_np(merged_copy(base, ensemble, 1)(inputs))
    np.testing.assert_allclose(logits[:, 1], expected, atol=1e-5)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-2
    samplers = ["greedy", keras_hub.samplers.BeamSampler(num_beams=2)]
    if family == "gemma3":  # keras-hub's own Gemma 3 fails with both
        samplers.append(keras_hub.samplers.ContrastiveSampler(k=2))
    for sampler in samplers:
        ensemble.compile(sampler=sampler)
        out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
        check_figures_against_teacher_forcing(ensemble, out, atol=2e-4)


@pytest.mark.skipif(keras.config.backend() != "jax", reason="a check before anything is built")
def test_multimodal_gemma3_is_refused():
    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]
    encoder = keras_hub.models.Gemma3VisionEncoder(
        image_size=16,
        patch_size=4,
        num_heads=2,
        hidden_dim=8,
        num_layers=1,
        intermediate_dim=16,
        output_dim=32,
        pool_size=2,
    )
    base = task_cls(
        backbone=backbone_cls(**dict(config, vision_encoder=encoder)), preprocessor=None
    )
    with pytest.raises(ValueError, match="multimodal"):
        LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2)


def test_gemma3_with_its_preprocessor_owns_a_copy_and_names_wrong_inputs():
    """With Gemma 3's own preprocessor (text only): the ensemble holds a
    copy of it (changing the ensemble's `sequence_length` left the user's
    model changed), generates the keras-hub model's text with zero
    adapters, and token ids given to `generate` or plain text given to
    `fit` are clear errors (they failed with `KeyError: 'prompts'` and
    deep inside the data pipeline)."""
    from ensemble_zoo.datasets import arithmetic

    task_cls, backbone_cls, config = OTHER_FAMILIES["gemma3"]
    tokenizer = keras_hub.models.Gemma3Tokenizer(
        proto=arithmetic.tokenizer().proto, has_vision_tokens=False
    )
    preprocessor = keras_hub.models.Gemma3CausalLMPreprocessor(
        tokenizer=tokenizer, image_converter=None, sequence_length=10
    )
    keras.utils.set_random_seed(0)
    base = task_cls(
        backbone=backbone_cls(**dict(config, vocabulary_size=tokenizer.vocabulary_size())),
        preprocessor=preprocessor,
    )
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, seed=0)
    assert ensemble.preprocessor is not preprocessor
    assert ensemble.preprocessor.tokenizer is tokenizer
    ensemble.preprocessor.sequence_length = 6
    assert preprocessor.sequence_length == 10
    ensemble.preprocessor.sequence_length = 10
    base.compile(sampler="greedy")
    ensemble.compile(sampler="greedy")
    prompts = ["1+2=", "37+5="]
    assert ensemble.generate(prompts, max_length=10) == base.generate(prompts, max_length=10)
    with pytest.raises(ValueError, match="holds token ids, but the model has a preprocessor"):
        ensemble.generate(PROMPT, max_length=10)
    with pytest.raises(ValueError, match=r'takes a dict of `\{"prompts"'):
        ensemble.fit(["1+2=3"], epochs=1)
    with pytest.raises(TypeError, match="a list holding an int"):
        ensemble.generate(["1+2=", 3], max_length=10)


KERAS_HUB_LORA_LAYERS = {
    "gemma": None,  # keras-hub's default: query and value
    "llama": ["query", "value", "feedforward_gate_dense"],  # and a Dense
}


def test_keras_hub_lora_files_import_as_members_and_adapters_round_trip(pair, tmp_path):
    """Each keras-hub `.lora.h5` (per-head factors, rank 2) is one member,
    equal to the keras-hub model with that adapter loaded; the ensemble's
    own adapter files load back exactly and refuse a model they do not fit."""
    family, base, _ = pair
    inputs = {"token_ids": PROMPT["token_ids"], "padding_mask": np.ones((2, 7), bool)}
    rng = np.random.default_rng(0)
    paths, expected = [], []
    for member in range(2):
        lora = type(base).from_config(base.get_config())
        lora.set_weights(base.get_weights())
        lora.backbone.enable_lora(2, target_layer_names=KERAS_HUB_LORA_LAYERS[family])
        for variable in lora.backbone.trainable_weights:
            variable.assign(rng.normal(size=variable.shape) * 0.3)
        paths.append(str(tmp_path / f"member_{member}.lora.h5"))
        lora.backbone.save_lora_weights(paths[-1])
        expected.append(to_np(lora(inputs)))
    ensemble = LoRAEnsembleCausalLM.from_keras_hub_lora(base, paths)
    targets = ["query", "value"] + (["mlp_gate"] if family == "llama" else [])
    assert list(ensemble.targets) == targets
    logits = to_np(ensemble(inputs))
    for member in range(2):
        np.testing.assert_allclose(logits[:, member], expected[member], atol=1e-5)
    # Adapters only: save, load into a fresh ensemble built alike.
    path = str(tmp_path / "ensemble.lora_ensemble.h5")
    ensemble.save_adapters(path)
    fresh = LoRAEnsembleCausalLM.from_keras_hub(
        base, num_members=2, rank=ensemble.rank, targets=targets, seed=5
    )
    fresh.load_adapters(path)
    np.testing.assert_array_equal(to_np(fresh(inputs)), logits)
    other = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=3, rank=2, targets=targets)
    with pytest.raises(ValueError, match="num_members: file 2, model 3"):
        other.load_adapters(path)
    h5py.File(tmp_path / "x.lora_ensemble.h5", "w").close()
    with pytest.raises(ValueError, match="not a LoRA-Ensemble adapter file"):
        other.load_adapters(str(tmp_path / "x.lora_ensemble.h5"))
    with pytest.raises(ValueError, match="must end in `.lora.h5`"):
        LoRAEnsembleCausalLM.from_keras_hub_lora(base, [path])
    with pytest.raises(ValueError, match="enable_lora"):
        LoRAEnsembleCausalLM.from_keras_hub(lora, num_members=2, rank=2)


def test_fit_trains_the_adapters_only(pair):
    """`fit` on token ids (the preprocessor's x, y, sample_weight) lowers
    the mean member cross-entropy and leaves every frozen weight
    bit-identical."""
    family, base, ensemble = pair
    if family != "llama":
        pytest.skip("one family suffices: training is family-independent")
    model = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, a_gain=1.0, seed=0)
    frozen = {w.path: to_np(w) for w in model.weights if "lora" not in w.path}
    rng = np.random.default_rng(0)
    tokens = np.tile(rng.integers(4, 50, size=(2, 9)), (4, 1)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((8, 8), bool)}
    y, weights = tokens[:, 1:], np.ones((8, 8), "float32")
    model.compile(optimizer=keras.optimizers.Adam(3e-2))
    history = model.fit(x, y, sample_weight=weights, batch_size=2, epochs=5, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0] - 0.08, losses
    for w in model.weights:
        if "lora" not in w.path:
            np.testing.assert_array_equal(to_np(w), frozen[w.path], err_msg=w.path)
    assert {w.path for w in model.trainable_weights} == {
        w.path for a in model.adapters for w in (a.lora_a, a.lora_b)
    }


def test_fit_computes_the_loss_in_blocks_equal_to_the_logits_loss(pair):
    """Under the default loss the training forward stops at the hidden
    states (each decoder block rematerialised or not)
    and the loss projects them in blocks (of 3 positions, one ragged);
    one epoch of SGD gives the loss and the adapters that the loss on the
    whole member logits gives."""
    family, base, _ = pair
    if family != "gemma":
        pytest.skip("one family suffices: the loss is family-independent")
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 50, size=(4, 9)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((4, 8), bool)}
    weights = np.ones((4, 8), "float32")
    weights[1, 5:] = 0.0
    results = []
    runs = ({"loss_chunk_size": 3, "remat": True}, {"loss_chunk_size": 3, "remat": False})
    for options in runs + ({"loss": member_token_cross_entropy},):
        model = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, seed=0)
        randomize_adapters(model, scale=0.2)
        model.compile(optimizer=keras.optimizers.SGD(0.5), **options)
        history = model.fit(
            x, tokens[:, 1:], sample_weight=weights, batch_size=2, shuffle=False, verbose=0
        )
        factors = [to_np(f) for a in model.adapters for f in (a.lora_a, a.lora_b)]
        results.append((history.history["loss"][0], factors))
        if "loss_chunk_size" in options:
            assert model(x, training=True).shape == (4, 2, 8, 32)  # hidden states
            assert model(x).shape == (4, 2, 8, 50)
    full_loss, full = results[-1]
    for blocked_loss, blocked in results[:-1]:
        np.testing.assert_allclose(blocked_loss, full_loss, rtol=1e-5)
        for ours, theirs in zip(blocked, full, strict=True):
            # Two SGD steps at 0.5 amplify float32 round-off: up to 2.6e-4 of
            # factors near 4 under TensorFlow's XLA (a wrong gradient: ~0.1).
            np.testing.assert_allclose(ours, theirs, atol=5e-4)
    with pytest.raises(ValueError, match="`loss_chunk_size` sizes the default loss"):
        model.compile(loss_chunk_size=4, metrics=["accuracy"])
    with pytest.raises(ValueError, match="`remat` rematerialises the training forward"):
        model.compile(remat=True, metrics=["accuracy"])
    with pytest.raises(TypeError, match="`remat` must be a bool"):
        model.compile(remat="blocks")
    if keras.config.backend() == "jax":  # one checkpoint per decoder block in the forward
        import jax

        for remat, count in ((None, len(base.backbone.transformer_layers)), (False, 0)):
            model.compile(remat=remat)
            jaxpr = str(jax.make_jaxpr(lambda t: model(t, training=True))(x))
            assert jaxpr.count("custom_vjp_call[") == count, remat
    # Blocks that draw random numbers (dropout) run as they are, and train.
    keras.utils.set_random_seed(0)
    noisy = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(**FAMILIES["gemma"][2], dropout=0.1),
        preprocessor=None,
    )
    model = LoRAEnsembleCausalLM.from_keras_hub(noisy, num_members=2, rank=2, seed=0)
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    history = model.fit(x, tokens[:, 1:], batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    if keras.config.backend() == "jax":
        jaxpr = str(jax.make_jaxpr(lambda t: model(t, training=True))(x))
        assert jaxpr.count("custom_vjp_call[") == 0


def test_temperature_tempers_the_ensembles_predictive_not_its_figures(pair):
    """At temperature T the sampler draws from `p̄^(1/T)` renormalized: with
    equal members (zero adapters) that is the model's own tempered
    sampling, so a seeded `RandomSampler` draws the same tokens as
    keras-hub's; the figures stay those of `p̄` at T = 1."""
    family, base, _ = pair
    if family != "gemma":
        pytest.skip("one family suffices: the sampler path is family-independent")
    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, seed=0)
    base.compile(sampler=keras_hub.samplers.RandomSampler(temperature=0.3, seed=7))
    ensemble.compile(sampler=keras_hub.samplers.RandomSampler(temperature=0.3, seed=7))
    expected = base.generate(PROMPT, stop_token_ids=None)
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    np.testing.assert_array_equal(out["token_ids"], to_np(expected["token_ids"]))
    tokens = out["token_ids"]
    logits = to_np(base({"token_ids": tokens, "padding_mask": np.ones_like(tokens, bool)}))
    ref = np_token_figures(logits[:, None, :-1], tokens[:, 1:])  # one member, T = 1
    generated = out["generated_mask"][:, 1:]
    np.testing.assert_allclose(
        out["total"][:, 1:], np.where(generated, ref["total"], 0.0), atol=2e-4
    )
    np.testing.assert_allclose(
        out["log_prob"][:, 1:], np.where(generated, ref["log_prob"], 0.0), atol=2e-4
    )
    np.testing.assert_allclose(out["epistemic"], 0.0, atol=1e-6)
    ensemble.compile(sampler="greedy")


def test_token_loss_predictor_trains_on_its_own_models_losses_and_joins_the_figures(pair):
    """The predictor's targets are keras-hub's own per-token losses
    (`score(scoring_mode="loss")`), `fit` trains its head only, and
    attached to an ensemble its prediction is a figure of the decode loop
    (equal to the predictor's own with zero adapters) and of
    `score_uncertainty` (equal to the loop's with trained adapters)."""
    family, base, _ = pair
    if family != "gemma":
        pytest.skip("one family suffices: the head reads any backbone's hidden states")
    predictor = ez.models.TokenLossPredictor.from_keras_hub(base, hidden_units=(16,))
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 50, size=(8, 7)).astype("int32")
    mask = np.ones((8, 7), bool)
    mask[:4, 5:] = False
    x = {"token_ids": tokens, "padding_mask": mask}
    out = predictor.predict(x, verbose=0)
    expected = to_np(
        base.score(
            tokens, padding_mask=mask, scoring_mode="loss", target_ids=np.roll(tokens, -1, axis=1)
        )
    )
    valid = mask[:, 1:]
    np.testing.assert_allclose(out["token_loss"][:, :-1][valid], expected[:, :-1][valid], atol=1e-5)
    np.testing.assert_array_equal(out["token_loss"][:, :-1][~valid], 0.0)
    frozen = [to_np(w) for w in predictor.backbone.weights]
    predictor.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = predictor.fit(x, batch_size=8, epochs=20, verbose=0).history["loss"]
    assert history[-1] < history[0]
    for old, new in zip(frozen, predictor.backbone.weights):
        np.testing.assert_array_equal(old, to_np(new))

    ensemble = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=2, rank=2, a_gain=1.0, seed=0)
    ensemble.attach_loss_predictor(predictor)
    ensemble.compile(sampler="greedy")
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    generated = out["generated_mask"]
    full = {"token_ids": out["token_ids"], "padding_mask": np.ones_like(generated)}
    own = predictor.predict(full, verbose=0)["predicted_loss"]
    np.testing.assert_allclose(
        out["loss_prediction"][:, 1:][generated[:, 1:]], own[:, :-1][generated[:, 1:]], atol=1e-5
    )
    assert out["mean_loss_prediction"].shape == (2,)
    randomize_adapters(ensemble)
    out = ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=True)
    scored = ensemble.score_uncertainty(out["token_ids"], chunk_size=3)
    generated = out["generated_mask"]
    np.testing.assert_allclose(
        out["loss_prediction"][generated], scored["loss_prediction"][generated], atol=1e-5
    )
    with pytest.raises(TypeError, match="TokenLossPredictor"):
        ensemble.attach_loss_predictor(base)
    ensemble.attach_loss_predictor(None)
    assert "loss_prediction" not in ensemble.score_uncertainty(out["token_ids"])


def test_token_ranking_loss_equals_a_loop_over_pairs():
    """Position j of the flattened batch pairs with j + n // 2; pairs with
    an invalid token do not count; the hinge is the one of "Pretrained
    Visual Uncertainties"."""
    from ensemble_zoo.models.loss_prediction.token_loss_predictor import token_ranking_loss

    rng = np.random.default_rng(0)
    losses, predicted = rng.random((3, 5)), rng.random((3, 5))
    valid = rng.random((3, 5)) > 0.3
    half = 15 // 2
    l, u, v = losses.ravel(), predicted.ravel(), valid.ravel()
    terms = [
        max(0.0, -(1.0 if l[j] > l[j + half] else -1.0) * (u[j] - u[j + half]) + 0.1)
        for j in range(half)
        if v[j] and v[j + half]
    ]
    value = to_np(token_ranking_loss(losses, predicted, valid, margin=0.1))
    np.testing.assert_allclose(value, np.mean(terms), rtol=1e-5)
    assert to_np(token_ranking_loss(losses, predicted, np.zeros((3, 5)))) == 0.0


@pytest.mark.skipif(keras.config.backend() != "jax", reason="file reading is backend-independent")
def test_bfloat16_adapter_files_read_as_their_values(tmp_path):
    """Keras writes bfloat16 variables as tagged 2-byte opaque data; the
    keras-hub LoRA reader and the ensemble's own files give their values."""
    from ensemble_zoo.models.lora_ensemble.causal_lm import keras_hub_lora

    keras.utils.set_random_seed(0)
    lm = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(**TINY, head_dim=8, dtype="bfloat16"),
        preprocessor=None,
    )
    lm.backbone.enable_lora(2)
    for variable in lm.backbone.trainable_weights:
        variable.assign(np.random.default_rng(0).normal(size=variable.shape))
    path = str(tmp_path / "bf16.lora.h5")
    lm.backbone.save_lora_weights(path)
    rank, layers = keras_hub_lora.read_keras_hub_lora(path)
    first = lm.backbone.trainable_weights[0]
    a = next(a for a, _ in layers.values() if a.shape == tuple(first.shape))
    assert rank == 2 and a.dtype == np.float32
    values = {
        tuple(np.round(to_np(keras.ops.cast(w, "float32")).ravel()[:3], 4))
        for w in lm.backbone.trainable_weights
    }
    assert tuple(np.round(a.ravel()[:3], 4)) in values


def test_sample_uncertainty_draws_per_prompt_and_scores_as_brute_force(pair):
    """Answers are drawn per prompt in one decode; their log-likelihoods are
    the ensemble's teacher-forced ones, and semantic entropy, the number of
    sets, lexical similarity, SentenceSAR, SAR, the Monte-Carlo entropies
    and the NLI-graph estimators (a toy NLI model on the answers' lengths)
    equal brute-force computations on them."""
    family, base, ensemble = pair
    if family != "gemma":
        pytest.skip("one family suffices: sampling reuses the engine's loop")
    randomize_adapters(ensemble, scale=2.0)
    stop = 11

    def nli(first, second):  # entailment when as long, contradiction when much longer
        gap = abs(len(first) - len(second))
        return (1.0, 0.0, 0.0) if gap == 0 else (0.1, 0.2, 0.7) if gap > 1 else (0.3, 0.5, 0.2)

    out = ensemble.sample_uncertainty(
        PROMPT,
        num_samples=6,
        stop_token_ids=(stop,),
        sampler=keras_hub.samplers.RandomSampler(seed=0),
        nli=nli,
    )
    prompts, samples, length = out["token_ids"].shape
    assert (prompts, samples, length) == (2, 6, 7)
    for p in range(prompts):
        mask = PROMPT["padding_mask"][p]
        np.testing.assert_array_equal(
            out["token_ids"][p][:, mask], np.tile(PROMPT["token_ids"][p][mask], (6, 1))
        )
    flat = out["token_ids"].reshape(prompts * samples, length)
    generated = out["generated_mask"].reshape(prompts * samples, length)
    scored = ensemble.score_uncertainty(flat, prompt_mask=~generated)
    expected_ll = np.where(generated, scored["log_prob"], 0.0).sum(-1).reshape(prompts, samples)
    np.testing.assert_allclose(out["log_likelihoods"], expected_ll, atol=1e-4)
    assert len({a for row in out["answers"] for a in row}) > 2  # the samples differ
    for p, row in enumerate(out["answers"]):
        for ids, answer, mask in zip(out["token_ids"][p], row, out["generated_mask"][p]):
            assert answer == tuple(int(t) for t in ids[mask] if t != stop)
        distinct = sorted(set(row))
        probability = {
            a: sum(np.exp(out["log_likelihoods"][p][i]) for i, b in enumerate(row) if b == a)
            for a in distinct
        }
        entropy = -np.mean([np.log(probability[a]) for a in row])
        np.testing.assert_allclose(out["semantic_entropy"][p], entropy, rtol=1e-6)
        assert out["number_of_semantic_sets"][p] == len(distinct)
        lcs = [ez.metrics.rouge_l(a, b) for i, a in enumerate(row) for b in row[i + 1 :]]
        np.testing.assert_allclose(out["lexical_similarity"][p], -np.mean(lcs))
        ll = out["log_likelihoods"][p]
        rouge = np.array([[ez.metrics.rouge_l(a, b) for b in row] for a in row])
        relevance = [sum(np.exp(ll[j]) * rouge[i, j] for j in range(6) if j != i) for i in range(6)]
        expected = np.mean([-np.log(r / 1e-3 + np.exp(ll[i])) for i, r in enumerate(relevance)])
        np.testing.assert_allclose(out["sentence_sar"][p], expected, rtol=1e-6)
        # SAR: each answer's tokens weighed by how much dropping them
        # changes it (ROUGE-L of the ids without the token).
        token_sar = []
        for i in range(6):
            ids = out["token_ids"][p][i][out["generated_mask"][p][i]]
            log_p = scored["log_prob"].reshape(prompts, samples, length)[p][i][
                out["generated_mask"][p][i]
            ]
            whole = tuple(int(t) for t in ids if t != stop)
            relevance = np.array(
                [
                    1.0
                    - ez.metrics.rouge_l(
                        tuple(int(t) for j, t in enumerate(ids) if j != k and t != stop), whole
                    )
                    if tuple(int(t) for j, t in enumerate(ids) if j != k and t != stop) != whole
                    else 0.0
                    for k in range(len(ids))
                ]
            )
            token_sar.append(np.sum(-log_p * relevance) / relevance.sum())
        weight = np.exp(-np.array(token_sar))
        relevance = [sum(weight[j] * rouge[i, j] for j in range(6) if j != i) for i in range(6)]
        expected = np.mean([-np.log(r / 1e-3 + weight[i]) for i, r in enumerate(relevance)])
        np.testing.assert_allclose(out["sar"][p], expected, rtol=1e-4)
        np.testing.assert_allclose(out["monte_carlo_sequence_entropy"][p], -np.mean(ll))
        lengths = out["generated_mask"][p].sum(-1)
        np.testing.assert_allclose(
            out["monte_carlo_normalized_sequence_entropy"][p], -np.mean(ll / lengths)
        )
        probabilities = np.array([[nli(a, b) for b in row] for a in row])
        np.testing.assert_array_equal(out["nli_probabilities"][p], probabilities)
        entail = probabilities[None, ..., 0]
        for name, expected in (
            ("degree_matrix", ez.metrics.degree_matrix(entail)),
            ("eccentricity", ez.metrics.eccentricity(entail)),
            (
                "kernel_language_entropy",
                ez.metrics.kernel_language_entropy(entail, probabilities[None, ..., 2]),
            ),
        ):
            np.testing.assert_allclose(out[name][p], expected[0], rtol=1e-6, err_msg=name)
        similar = probabilities[..., 0] / (probabilities[..., 0] + probabilities[..., 2])
        np.testing.assert_allclose(
            out["luq"][p], 1 - np.mean((similar.sum(1) - 1.0) / 5), rtol=1e-6
        )
    # A callable equivalence: every answer the same meaning -> one set, entropy
    # the negative log of the total probability.
    same = ensemble.sample_uncertainty(
        PROMPT,
        num_samples=2,
        equivalence=lambda a, b: True,
        stop_token_ids=None,
        sampler=keras_hub.samplers.RandomSampler(seed=1),
    )
    np.testing.assert_array_equal(same["number_of_semantic_sets"], [1, 1])
    np.testing.assert_allclose(
        same["semantic_entropy"], -np.log(np.exp(same["log_likelihoods"]).sum(1)), rtol=1e-6
    )
    with pytest.raises(ValueError, match="num_samples"):
        ensemble.sample_uncertainty(PROMPT, num_samples=1)
    with pytest.raises(TypeError, match="equivalence"):
        ensemble.sample_uncertainty(PROMPT, num_samples=2, equivalence="nli")
    with pytest.raises(TypeError, match="prompts"):
        ensemble.sample_uncertainty(np.ones((2, 3)), num_samples=2)
    with pytest.raises(TypeError, match="`nli` must be callable"):
        ensemble.sample_uncertainty(PROMPT, num_samples=2, nli="deberta")
    with pytest.raises(ValueError, match="three values summing to 1"):
        ensemble.sample_uncertainty(
            PROMPT, num_samples=2, stop_token_ids=None, nli=lambda a, b: (0.5, 0.5, 0.5)
        )


@pytest.mark.skipif(
    keras.config.backend() != "torch",
    reason="eager PyTorch runs the loop in Python, so calls can be counted",
)
def test_figures_add_no_second_pass_over_the_model(pair):
    """Every transformer block runs once for the prompt and once per
    generated token, with or without the figures (and the loss predictor's
    head reads the hidden states the step already has)."""
    family, base, ensemble = pair
    if family != "gemma":
        pytest.skip("one family suffices")
    block = ensemble.backbone.transformer_layers[0]
    calls = []
    original = block.call

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    ensemble.compile(sampler="greedy", jit_compile=False)
    block.call = counted
    try:
        counts = {}
        for figures in (False, True):
            calls.clear()
            ensemble.generate(PROMPT, stop_token_ids=None, return_uncertainty=figures)
            counts[figures] = len(calls)
    finally:
        del block.call
        ensemble.compile(sampler="greedy")
    steps = PROMPT["token_ids"].shape[1] - PROMPT["padding_mask"].sum(1).min()
    assert counts == {False: 1 + steps, True: 1 + steps}
