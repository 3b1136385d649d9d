"""Weights saved under one backend load under the others, same outputs."""

import numpy as np
import pytest
from conftest import ALL_BACKENDS
from conftest import BACKEND
from conftest import run_python
from zoo_testing import run_day

import ensemble_zoo as ez


def deep_ensemble():
    return ez.models.DeepEnsembleClassifier.from_model(
        ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0],
        num_members=2,
        seed=3,
    )


def hydra():
    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    masks = np.ones((2, 4, 6), bool)
    masks[0, :, :2] = False
    masks[1, 1:, 3:] = False
    return ez.models.HydraImageClassifier.from_keras_hub(vit, masks)


def lora_ensemble():
    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=2, rank=2, seed=0)
    rng = np.random.default_rng(0)
    for adapter in model.adapters:
        adapter.lora_b.assign(rng.normal(scale=0.02, size=adapter.lora_b.shape))
    return model


MAKERS = (deep_ensemble, hydra, lora_ensemble)


# Each backend loads what the next one in this cycle saved, so every
# backend saves and every backend loads (half the subprocesses of all six
# ordered pairs: test-time budget); one pair a day, in turn (about 20 s
# each).
NEXT = {
    ALL_BACKENDS[i]: ALL_BACKENDS[(i + 1) % len(ALL_BACKENDS)] for i in range(len(ALL_BACKENDS))
}


@pytest.mark.cross_backend
@pytest.mark.skipif(
    BACKEND in ALL_BACKENDS and ALL_BACKENDS.index(BACKEND) != run_day() % len(ALL_BACKENDS),
    reason="one backend's pair a day, in turn (test budget)",
)
@pytest.mark.parametrize("other", [NEXT.get(BACKEND, ALL_BACKENDS[0])])
def test_presets_saved_here_load_under_other_backend(tmp_path, other):
    """A deep ensemble, a Hydra and a LoRA-Ensemble preset saved under this
    backend load in one fresh interpreter under `other` (the next backend
    of a cycle through all three), same outputs."""
    x, _ = ez.datasets.load_arrays("digits", "test")
    np.save(tmp_path / "x.npy", x[:50])
    expected = {}
    for make in MAKERS:
        model = make()
        model.save_to_preset(str(tmp_path / make.__name__))
        expected[make.__name__] = model.predict(x[:50], verbose=0)
    out = run_python(
        f"""
import numpy as np, ensemble_zoo as ez
x = np.load({str(tmp_path / "x.npy")!r})
for name in {list(expected)!r}:
    model = ez.models.EnsembleClassifier.from_preset({str(tmp_path)!r} + "/" + name)
    np.save({str(tmp_path)!r} + "/" + name + ".npy", model.predict(x, verbose=0))
print("ok")
""",
        backend=other,
    )
    assert "ok" in out
    for name, logits in expected.items():
        got = np.load(tmp_path / f"{name}.npy")
        assert got.shape == (50, 2, 8), name
        np.testing.assert_allclose(got, logits, atol=1e-5, err_msg=name)
