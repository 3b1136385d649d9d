"""Laplace-LoRA: the adapters' K-FAC factors and posterior against
laplace-torch 0.3's `KronLaplace` on the same network
(`tests/fixtures/laplace_torch/make_fixture.py` runs its code), and the
members of the posterior-sample ensemble against the fine-tuned model with
each sample's adapters."""

import os

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.layers import LoRAEnsembleAdapter
from ensemble_zoo.training.laplace_lora import factor_eigen
from ensemble_zoo.training.laplace_lora import log_marginal_likelihood
from ensemble_zoo.training.laplace_lora import posterior_samples

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "laplace_torch", "kfac.npz")


@keras.saving.register_keras_serializable(package="laplace_lora_test")
class TinyLoRANet(keras.Model):
    """laplace-torch's network: `x -> base(x) + scale * B A x -> tanh ->
    head`, one member, the adapter inside a layer as keras-hub holds it."""

    def __init__(self, lora_alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self.lora_alpha = lora_alpha
        base = keras.layers.Dense(5, name="base")
        base.build((None, 4))
        self.projection = LoRAEnsembleAdapter(base, num_members=1, rank=2, lora_alpha=lora_alpha)
        self.head = keras.layers.Dense(3, name="head")

    def call(self, x, training=None):
        return self.head(keras.ops.tanh(self.projection(x)))

    def get_config(self):
        return {**super().get_config(), "lora_alpha": self.lora_alpha}


def test_kfac_factors_and_posterior_equal_laplace_torch():
    fixture = dict(np.load(FIXTURE))
    net = TinyLoRANet(lora_alpha=2 * float(fixture["scale"]))  # scale = alpha / rank
    net(fixture["x"][:1].astype("float32"))
    net.projection.base_layer.kernel.assign(fixture["base_kernel"])
    net.projection.base_layer.bias.assign(fixture["base_bias"])
    net.head.kernel.assign(fixture["head_kernel"])
    net.head.bias.assign(fixture["head_bias"])
    net.projection.lora_a.assign(fixture["lora_a"][None])
    net.projection.lora_b.assign(fixture["lora_b"][None])
    before = [to_np(w).copy() for w in net.weights]
    (factors,) = ez.training.kfac_factors(net, fixture["x"].astype("float32"), batch_size=10)
    for name in ("a", "b"):
        inputs, outputs = factors[name]
        np.testing.assert_allclose(inputs, fixture[f"{name}_input_factor"], atol=1e-6)
        np.testing.assert_allclose(outputs, fixture[f"{name}_output_factor"], atol=1e-6)
    for w, value in zip(net.weights, before, strict=True):
        np.testing.assert_array_equal(to_np(w), value)  # the model is not changed
    # The sampler's square root of the covariance, applied to every basis
    # draw, gives laplace-torch's dense posterior covariance (its order:
    # torch's (out, in) weights, row-major, A then B).
    blocks = []
    for name, shape in (("a", (4, 2)), ("b", (2, 5))):
        size = int(np.prod(shape))
        root = posterior_samples(
            np.zeros(shape),
            *(factor_eigen(f) for f in factors[name]),
            float(fixture["prior_precision"]),
            np.eye(size).reshape((size,) + shape),
        )
        root = np.stack([column.T.ravel() for column in root], axis=1)
        blocks.append(root @ root.T)
    covariance = np.zeros((18, 18))
    covariance[:8, :8], covariance[8:, 8:] = blocks
    np.testing.assert_allclose(covariance, fixture["posterior_covariance"], atol=1e-6)
    # The Laplace evidence, laplace-torch's `log_marginal_likelihood`.
    posteriors = [
        (fixture[f"lora_{name}"], *(factor_eigen(f) for f in factors[name])) for name in "ab"
    ]
    evidence = log_marginal_likelihood(
        float(fixture["log_likelihood"]), posteriors, float(fixture["prior_precision"])
    )
    assert evidence == pytest.approx(float(fixture["log_marginal_likelihood"]), abs=1e-5)


def test_low_rank_factor_keeps_the_largest_eigenpairs():
    rng = np.random.default_rng(0)
    root = rng.normal(size=(6, 6))
    factor = root @ root.T
    values, vectors = factor_eigen(factor, n_kfac=2)
    expected = np.sort(np.linalg.eigvalsh(factor))
    np.testing.assert_allclose(values[-2:], expected[-2:])
    assert (values[:-2] == 0).all()
    top = vectors[:, -2:] * values[-2:] @ vectors[:, -2:].T
    np.testing.assert_allclose(np.linalg.matrix_rank(top), 2)


def test_members_are_the_fine_tune_with_sampled_adapters():
    keras.utils.set_random_seed(0)
    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        keras_hub.models.ViTImageClassifier(backbone=vit, num_classes=3, preprocessor=None),
        num_members=1,
        rank=2,
        seed=0,
    )
    adapters = [w for w in lora.weights if "lora_b" in w.path]
    for w in adapters:  # a fine-tuned B (it starts at 0)
        w.assign(np.random.default_rng(1).normal(size=w.shape) * 0.3)
    x = np.random.default_rng(0).uniform(size=(12, 8, 8, 1)).astype("float32")
    bayes = ez.training.laplace_lora(lora, x, num_samples=3, prior_variance=0.05, seed=0)
    assert isinstance(bayes, ez.models.LoRAEnsembleImageClassifier)
    logits = bayes.predict(x[:4], verbose=0)
    assert logits.shape == (4, 3, 3)
    drawn = 0
    for s in range(3):
        member = ez.models.LoRAEnsembleImageClassifier.from_config(lora.get_config())
        for w, source, sample in zip(member.weights, lora.weights, bayes.weights, strict=True):
            sampled = "lora_a" in source.path or "lora_b" in source.path
            w.assign(to_np(sample)[s : s + 1] if sampled else to_np(source))
            drawn += sampled and not np.allclose(to_np(sample)[s : s + 1], to_np(source))
        np.testing.assert_allclose(logits[:, s], member.predict(x[:4], verbose=0)[:, 0], atol=1e-5)
    assert drawn == 3 * 2 * len(adapters)  # every adapter matrix of every sample moved
    with pytest.raises(ValueError, match="one member"):
        ez.training.laplace_lora(bayes, x, num_samples=2)
    with pytest.raises(ValueError, match="no LoRAEnsembleAdapter"):
        ez.training.laplace_lora(keras_hub.models.ViTImageClassifier(vit, 3), x, num_samples=2)
    with pytest.raises(ValueError, match="prior_variance"):
        ez.training.laplace_lora(lora, x, num_samples=2, prior_variance=0.0)
    with pytest.raises(ValueError, match="needs the labels"):
        ez.training.laplace_lora(lora, x, num_samples=2, prior_variance="marginal_likelihood")
    # The evidence's prior: a finite variance, and members that differ.
    fitted = ez.training.laplace_lora(
        lora, x, 2, prior_variance="marginal_likelihood", y=np.arange(12) % 3, seed=0
    )
    assert fitted.predict(x[:2], verbose=0).shape == (2, 2, 3)


def test_text_classifier_with_a_partial_last_batch():
    """Dict inputs (a keras-hub BERT classifier's token tensors) and a last
    batch of another size: the factors equal those of one batch."""
    from fixtures import tiny_text_classifiers

    classifier = tiny_text_classifiers.build_text_classifier("bert")
    lora = ez.models.LoRAEnsembleClassifier.from_model(classifier, num_members=1, rank=2, seed=0)
    for w in lora.weights:
        if "lora_b" in w.path:
            w.assign(np.random.default_rng(2).normal(size=w.shape) * 0.3)
    x = tiny_text_classifiers.text_inputs(classifier, batch=10, seed=1)
    whole = ez.training.kfac_factors(lora, x, batch_size=10)
    parts = ez.training.kfac_factors(lora, x, batch_size=4)  # 4 + 4 + 2
    for one, other in zip(whole, parts, strict=True):
        for name in ("a", "b"):
            for f, g in zip(one[name], other[name], strict=True):
                np.testing.assert_allclose(f, g, rtol=1e-5, atol=1e-9)
    bayes = ez.training.laplace_lora(lora, x, num_samples=3, prior_variance=1e-2, seed=0)
    assert bayes.predict(x, verbose=0).shape == (10, 3, 3)


def test_causal_lm_rows_give_the_adapters_gradients_and_samples_decode():
    """On a one-member Gemma LoRA-Ensemble: the rows the analysis copy
    records (inputs, output gradients of the sampled tokens' loss) give
    each adapter matrix's gradient of that loss on the model itself; the
    posterior samples decode as members."""
    from fixtures import tiny_causal_lms

    from ensemble_zoo.training.kfac import _probed_copy
    from ensemble_zoo.training.kfac import _sampled_tokens_loss
    from ensemble_zoo.training.kfac import lora_adapters
    from ensemble_zoo.utils.gradients import loss_gradients

    lm = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        tiny_causal_lms.build_causal_lm("gemma"), num_members=1, rank=2, seed=0
    )
    for w in lm.weights:
        if "lora_b" in w.path:
            w.assign(np.random.default_rng(1).normal(size=w.shape) * 0.3)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, 20, (3, 6)).astype("int32"), "padding_mask": np.ones((3, 6))}
    x["padding_mask"][1, 4:] = 0
    x["padding_mask"] = x["padding_mask"].astype("int32")
    targets = (rng.integers(0, 64, (3, 6)).astype("int32"), x["padding_mask"].astype("float32"))
    copy, probes = _probed_copy(lm)
    copy(x, training=False)
    rows = [to_np(p.recorded).astype("float64") for p in probes]
    grads = loss_gradients(copy, _sampled_tokens_loss, x, targets, [p.probe for p in probes])
    adapters = [adapter for _, _, adapter in lora_adapters(lm)]
    weights = [v for a in adapters for v in (a.lora_a, a.lora_b)]
    reference = loss_gradients(lm, _sampled_tokens_loss, x, targets, weights)
    for i, adapter in enumerate(adapters):
        a, b = to_np(adapter.lora_a[0]), to_np(adapter.lora_b[0])
        g = adapter.scale * np.asarray(grads[i], np.float64)
        np.testing.assert_allclose(reference[2 * i][0], rows[i].T @ (g @ b.T), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(
            reference[2 * i + 1][0], (rows[i] @ a).T @ g, rtol=1e-4, atol=1e-4
        )
    bayes = ez.training.laplace_lora(lm, x, num_samples=3, prior_variance=1e-2, seed=0)
    assert isinstance(bayes, ez.models.LoRAEnsembleCausalLM) and bayes.num_members == 3
    bayes.compile(sampler="greedy")
    mask = np.array([[1, 1, 1, 0, 0]] * 2, "int32")  # three prompt tokens, two to decode
    prompt = {"token_ids": x["token_ids"][:2, :5] * mask, "padding_mask": mask}
    out = bayes.generate(prompt, stop_token_ids=None, return_uncertainty=True)
    assert out["token_ids"].shape == (2, 5) and np.asarray(out["padding_mask"]).all()
