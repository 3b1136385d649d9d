"""`compile(jit_compile=True)` under PyTorch (Keras' torch.compile path).

Dynamo once broke the graph inside every keras-hub attention (the
flash-attention check) and at every seeded random op (V-MoE router noise),
fell back to eager layer by layer, recompiled until its limit, crashed on
the deep ensemble's member loop, and traced each train step twice. Each
model here must predict and train with one graph per step function and input
shape, no graph break but Keras' own `loss.backward()`, and the numbers of
eager execution.

Most checks run dynamo with its `eager` backend (the captured graph runs
without code generation), which is where graph breaks, guards and
recompiles happen, in seconds; one test compiles with inductor, the
default backend, and compares with eager execution.
"""

import functools

import keras
import numpy as np
import pytest
import zoo_testing
from conftest import BACKEND
from zoo_testing import skip_on_alternate_days
from zoo_testing import this_run

import ensemble_zoo as ez

pytestmark = [
    pytest.mark.skipif(BACKEND != "torch", reason="torch.compile"),
    skip_on_alternate_days("torch_compile"),
]

if BACKEND == "torch":
    import torch
    from torch._dynamo.utils import counters


def tiny_vit(seed=0):
    return zoo_testing.tiny_vit(seed, num_classes=8, patch_size=4, num_layers=1, num_heads=4)


def deep_ensemble():
    return ez.models.DeepEnsembleClassifier.from_model(tiny_vit(), 2)


def hydra():
    masks = np.ones((2, 1, 4), "float32")
    masks[0, :, 0] = masks[1, :, 3] = 0.0
    return ez.models.HydraImageClassifier.from_keras_hub(tiny_vit(), masks)


def lora_ensemble():
    return ez.models.LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=2, rank=2)


def e3_with_router_noise():
    return ez.models.ViTMoEImageClassifier.from_keras_hub(
        tiny_vit(), num_experts=4, num_selected_experts=1, moe_layers=[0], ensemble_size=2, seed=0
    )


def experts_choice_then_soft_moe():
    """A small E³ model with an Experts Choice and a Soft MoE layer: one
    traced train step covers both routers (the Keras train step of a ViT
    costs dynamo ~30 s per model). No router noise: a seeded random op in
    a plain Keras model breaks dynamo's graph (Keras' torch seed
    generator); the zoo's tasks avoid that (test above, whose top-K
    router adds its noise with the same `MemberRouter._noise`)."""
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Dense(16)(keras.layers.Reshape((16, 4))(inputs))
    x = ez.layers.TileMembers(2)(x)
    for router, extra in (("experts_choice", {}), ("soft", {"num_slots": 2})):
        moe = ez.layers.SparseMoE(
            num_experts=4, mlp_dim=16, num_members=2, router=router, noise_std=0.0, **extra
        )
        x = keras.layers.Add()([x, moe(x)])
    logits = keras.layers.Dense(8)(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model(inputs, ez.layers.UntileMembers(2)(logits))


def loss_prediction():
    return ez.models.LossPredictionImageClassifier.from_keras_hub(
        tiny_vit(), head_hidden_units=(8, 8), freeze_backbone=True, freeze_classifier=True
    )


def data():
    x, y = ez.datasets.load_arrays("digits", "train")
    return x[:24], y[:24]


def first(outputs):
    return outputs["logits"] if isinstance(outputs, dict) else outputs


def weights(model):
    return [keras.ops.convert_to_numpy(v) for v in model.trainable_variables]


def predict(make, jit_compile):
    model = make()
    model.compile(jit_compile=jit_compile)
    x, _ = data()
    first_pass = first(model.predict(x, batch_size=12, verbose=0))
    again = first(model.predict(x, batch_size=12, verbose=0))
    np.testing.assert_array_equal(again, first_pass)
    return first_pass


def train(make, jit_compile, optimizer=None):
    model = make()
    keras.utils.set_random_seed(1)
    # A zoo task brings its loss; a plain Keras model gets the zoo's.
    loss = (
        {}
        if hasattr(model, "backbone")
        else {"loss": ez.losses.EnsembleSparseCategoricalCrossentropy()}
    )
    model.compile(
        optimizer=optimizer or keras.optimizers.AdamW(1e-3), jit_compile=jit_compile, **loss
    )
    x, y = data()
    model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    graphs = counters["stats"]["unique_graphs"]
    model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    return {
        "graphs_first_epoch": graphs,
        "graphs": counters["stats"]["unique_graphs"],
        "weights": weights(model),
        "breaks": dict(counters["graph_break"]),
        "model": model,
    }


@pytest.fixture
def dynamo_backend(monkeypatch):
    """Sets the backend Keras' `torch.compile(step)` calls use."""
    compile_fn = torch.compile

    def use(name):
        monkeypatch.setattr(torch, "compile", functools.partial(compile_fn, backend=name))
        torch._dynamo.reset()
        counters.clear()

    yield use
    torch._dynamo.reset()


PREDICT_MODELS = {
    "deep_ensemble": deep_ensemble,
    "hydra": hydra,
    "lora_ensemble": lora_ensemble,
    "e3": e3_with_router_noise,
    "loss_prediction": loss_prediction,
}


@pytest.mark.parametrize("name", this_run(PREDICT_MODELS, 2))
def test_predict_compiles_one_graph_and_matches_eager(dynamo_backend, name):
    """Two models a run, in turn (test budget: 13 to 26 s each)."""
    make = PREDICT_MODELS[name]
    eager = predict(make, jit_compile=False)
    dynamo_backend("eager")
    compiled = predict(make, jit_compile=True)
    # Two predicts of two batches each: one graph, no graph break.
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"], dict(counters["graph_break"])
    np.testing.assert_allclose(compiled, eager, atol=1e-5)


def check_train_step_compiled_once(run):
    # The second epoch compiles nothing new, and the only graph break is
    # Keras' `loss.backward()` in its train step.
    assert run["graphs"] == run["graphs_first_epoch"] > 0
    assert run["breaks"], "expected the train step's backward() break"
    assert all("backward" in reason for reason in run["breaks"]), run["breaks"]


ROUTER_MODELS = {
    "top_k": e3_with_router_noise,
    "experts_choice_and_soft": experts_choice_then_soft_moe,
}


@pytest.mark.parametrize("routers", this_run(ROUTER_MODELS, 1))
def test_training_with_router_noise_compiles_once(dynamo_backend, routers):
    """E3 with each router, one model a run in turn (about 70 s each, the
    suite's budget): routing noise (a seeded random op) and the top-K
    router's auxiliary losses; Experts Choice's sort and cumsums and Soft
    MoE's two softmaxes; AdamW."""
    make = ROUTER_MODELS[routers]
    dynamo_backend("eager")
    run = train(make, jit_compile=True)
    check_train_step_compiled_once(run)
    x, _ = data()
    out = keras.ops.convert_to_numpy(run["model"](x, training=False))
    before = keras.ops.convert_to_numpy(make()(x, training=False))
    assert np.isfinite(out).all() and np.abs(out - before).max() > 1e-4  # it trained


def test_loss_prediction_training_compiles_once_and_matches_eager(dynamo_backend):
    """Its own `compute_loss` and a frozen backbone, AdamW."""
    eager = train(loss_prediction, jit_compile=False)
    dynamo_backend("eager")
    compiled = train(loss_prediction, jit_compile=True)
    check_train_step_compiled_once(compiled)
    for a, b in zip(compiled["weights"], eager["weights"]):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_inductor_predictions_match_eager(dynamo_backend):
    """The default backend (inductor's generated code) on the deep
    ensemble, whose member loop crashed dynamo before. (Training under
    inductor matched eager too: weights within 5e-5 after two AdamW epochs,
    Adam's normalized steps amplifying round-off in near-zero gradients;
    the training tests above use dynamo's eager backend for the budget.)"""
    eager = predict(deep_ensemble, jit_compile=False)
    dynamo_backend("inductor")
    np.testing.assert_allclose(predict(deep_ensemble, jit_compile=True), eager, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1
