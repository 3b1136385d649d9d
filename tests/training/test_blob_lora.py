"""BLoB: the variational adapter's flipout forward pass and KL term against
the formulas of the authors' code in NumPy, training with `fit`, and the
posterior samples as members against one-member LoRA models holding each
sample's `A`."""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.layers import LoRAEnsembleAdapter
from ensemble_zoo.layers.blob_posterior import flipout_noise
from ensemble_zoo.ops import tile_members


def numpy_kl(mean, sigma, prior_std):
    """KL(N(mean, sigma^2) || N(0, prior_std^2)), summed."""
    return np.sum(np.log(prior_std / sigma) + (sigma**2 + mean**2) / (2 * prior_std**2) - 0.5)


@pytest.mark.parametrize("layout", ["member_major", "batch_major"])
def test_flipout_forward_and_kl_equal_the_formulas(layout):
    """In training, each output's mean over draws is the posterior mean's
    and its variance `sum_j B_jk^2 sum_i x_i^2 sigma_ij^2` (the flipout
    draw's marginal); the added loss is `kl_weight` times the summed
    Gaussian KL averaged over the members; outside training the layer is
    the mean's LoRA."""
    members, rows, d_in, rank, d_out = 2, 64, 6, 3, 5
    dense = keras.layers.Dense(d_out)
    dense.build((None, d_in))
    blob = {"kl_weight": 0.25, "eps": 0.3, "prior_std": 0.5}
    adapter = LoRAEnsembleAdapter(
        dense, members, rank, lora_alpha=6.0, seed=0, member_layout=layout, blob=blob
    )
    rng = np.random.default_rng(0)
    adapter.lora_b.assign(rng.normal(size=(members, rank, d_out)).astype("float32"))
    x = np.repeat(rng.normal(size=(1, d_in)).astype("float32"), rows, axis=0)
    inputs = tile_members(x, members) if layout == "member_major" else np.repeat(x, members, 0)
    mean_a, b = to_np(adapter.lora_a), to_np(adapter.lora_b)
    sigma = to_np(adapter.lora_a_rho) ** 2
    assert np.all((np.sqrt(sigma) >= 0.3 / np.sqrt(2) - 1e-7) & (np.sqrt(sigma) <= 0.3 + 1e-7))
    base = x[0] @ to_np(dense.kernel) + to_np(dense.bias)
    expected_mean = np.stack([base + 2.0 * x[0] @ mean_a[m] @ b[m] for m in range(members)])
    expected_var = np.stack([4.0 * (x[0] ** 2 @ sigma[m] ** 2) @ b[m] ** 2 for m in range(members)])

    def per_member(y):
        y = to_np(y).reshape(
            (members, rows, d_out) if layout == "member_major" else (rows, members, d_out)
        )
        return y if layout == "member_major" else y.transpose(1, 0, 2)

    np.testing.assert_allclose(
        per_member(adapter(inputs))[:, 0], expected_mean, rtol=1e-5, atol=1e-5
    )
    draws = np.concatenate([per_member(adapter(inputs, training=True)) for _ in range(100)], 1)
    np.testing.assert_allclose(
        draws.mean(1), expected_mean, atol=4 * np.sqrt(expected_var.max() / draws.shape[1])
    )
    np.testing.assert_allclose(draws.var(1), expected_var, rtol=0.2)
    (loss,) = adapter.losses  # the members' mean KL
    np.testing.assert_allclose(to_np(loss), 0.25 * numpy_kl(mean_a, sigma, 0.5) / 2, rtol=1e-5)


def test_flipout_noise_is_the_signed_product():
    rng = np.random.default_rng(1)
    x, sigma, e = (
        rng.normal(size=(2, 4, 6)),
        rng.uniform(size=(2, 6, 3)),
        rng.normal(size=(2, 6, 3)),
    )
    r, s = rng.choice([-1.0, 1.0], (2, 4, 6)), rng.choice([-1.0, 1.0], (2, 4, 3))
    expected = np.stack([s[m] * ((x[m] * r[m]) @ (sigma[m] * e[m])) for m in range(2)])
    got = flipout_noise(
        *(keras.ops.convert_to_tensor(v, "float32") for v in (x, sigma, r, s, e)), "mni,mir->mnr"
    )
    np.testing.assert_allclose(to_np(got), expected, rtol=1e-5, atol=1e-5)


def tiny_blob_classifier(**blob):
    keras.utils.set_random_seed(0)
    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    return ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        keras_hub.models.ViTImageClassifier(backbone=vit, num_classes=3, preprocessor=None),
        num_members=1,
        rank=2,
        a_gain=1.0,
        seed=0,
        blob={"kl_weight": 1 / 16, **blob},
    )


def test_fit_and_samples_are_members():
    model = tiny_blob_classifier()
    x = np.random.default_rng(0).uniform(size=(16, 8, 8, 1)).astype("float32")
    y = np.arange(16) % 3
    rho = [to_np(a.lora_a_rho).copy() for a in model.adapters]
    # rho's initial draws are independent of the means'.
    assert abs(np.corrcoef(to_np(model.adapters[0].lora_a).ravel(), rho[0].ravel())[0, 1]) < 0.5
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert all(not np.allclose(to_np(a.lora_a_rho), r) for a, r in zip(model.adapters, rho))
    # The config round-trips: the posterior mean's predictions.
    # In training the forward pass draws noise; outside it is the mean's.
    draws = [to_np(model(x[:2], training=True)) for _ in range(2)]
    assert np.abs(draws[0] - draws[1]).max() > 1e-4
    np.testing.assert_array_equal(to_np(model(x[:2])), to_np(model(x[:2])))
    copy = ez.models.LoRAEnsembleImageClassifier.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    np.testing.assert_allclose(
        copy.predict(x[:4], verbose=0), model.predict(x[:4], verbose=0), atol=1e-6
    )

    samples = ez.training.blob_samples(model, num_samples=3, seed=0)
    assert samples.num_members == 3 and samples.method_config["blob"] is None
    logits = samples.predict(x[:4], verbose=0)
    plain = ez.models.LoRAEnsembleImageClassifier.from_config(
        {
            **model.get_config(),
            "blob": None,
            "backbone": {
                **model.get_config()["backbone"],
                "config": {**model.get_config()["backbone"]["config"], "blob": None},
            },
        }
    )
    variational = {id(a.lora_a_rho) for a in model.adapters}
    sources = [w for w in model.weights if id(w) not in variational]
    for s in range(3):
        for w, source, sample in zip(plain.weights, sources, samples.weights, strict=True):
            w.assign(to_np(sample)[s : s + 1] if "lora_a" in w.path else to_np(source))
        np.testing.assert_allclose(logits[:, s], plain.predict(x[:4], verbose=0)[:, 0], atol=1e-5)
    # Each sampled A is the mean plus sigma times a standard normal draw.
    for adapter, sampled in zip(model.adapters, samples.adapters, strict=True):
        z = (to_np(sampled.lora_a) - to_np(adapter.lora_a)) / to_np(adapter.lora_a_rho) ** 2
        assert abs(z.mean()) < 0.3 and 0.7 < z.std() < 1.3
    with pytest.raises(ValueError, match="no BLoB adapters"):
        ez.training.blob_samples(samples, 2)
    with pytest.raises(ValueError, match="adapter file does not"):
        model.save_adapter_weights("/tmp/never_written.h5")


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="kl_weight"):
        tiny_blob_classifier(scale=1.0)
    with pytest.raises(ValueError, match="prior_std"):
        tiny_blob_classifier(prior_std=0.0)
    with pytest.raises(TypeError, match="`blob` must be None or a dict"):
        LoRAEnsembleAdapter(keras.layers.Dense(2), 1, 1, blob=0.1)


def test_causal_lm_trains_and_its_samples_decode():
    """A one-member BLoB Gemma: `fit` adds the KL term to the token loss
    and moves `rho`; its samples decode as members."""
    from fixtures import tiny_causal_lms

    lm = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        tiny_causal_lms.build_causal_lm("gemma"),
        num_members=1,
        rank=2,
        seed=0,
        blob={"kl_weight": 0.01},
    )
    rng = np.random.default_rng(0)
    x = {
        "token_ids": rng.integers(1, 20, (2, 6)).astype("int32"),
        "padding_mask": np.ones((2, 6), "int32"),
    }
    y, weights = x["token_ids"], np.ones((2, 6), "float32")
    kl = sum(
        numpy_kl(to_np(a.lora_a), to_np(a.lora_a_rho) ** 2, 0.2) for a in lm.backbone._adapters
    )
    lm.compile(optimizer=keras.optimizers.Adam(0.01))
    # B = 0 at the start: the noise is zero and the loss the plain NLL,
    # which `evaluate` (no KL term outside training) gives.
    nll = lm.evaluate(x, y, sample_weight=weights, verbose=0, return_dict=True)["loss"]
    rho = to_np(lm.backbone._adapters[0].lora_a_rho).copy()
    history = lm.fit(x, y, sample_weight=weights, epochs=1, verbose=0).history
    np.testing.assert_allclose(history["loss"][0], nll + 0.01 * kl, rtol=1e-4)
    assert not np.allclose(to_np(lm.backbone._adapters[0].lora_a_rho), rho)
    samples = ez.training.blob_samples(lm, num_samples=3, seed=0)
    samples.compile(sampler="greedy")
    mask = np.array([[1, 1, 1, 0, 0]] * 2, "int32")
    prompt = {"token_ids": x["token_ids"][:, :5] * mask, "padding_mask": mask}
    out = samples.generate(prompt, stop_token_ids=None, return_uncertainty=True)
    assert out["token_ids"].shape == (2, 5) and np.asarray(out["padding_mask"]).all()
