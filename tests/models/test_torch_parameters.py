"""Under PyTorch, `Model.zero_grad()` reaches only the variables in
`model.parameters()`, which the backend keys by variable path; a variable
left out keeps accumulating gradients across `fit` steps."""

import keras
import numpy as np
import pytest
from conftest import BACKEND

import ensemble_zoo as ez

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="PyTorch parameters")


def lora():
    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    return ez.models.LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=2, rank=2)


def mc_dropout():
    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    return ez.models.MCDropoutClassifier.from_model(vit, 2, rate=0.1, seed=0)


@pytest.mark.parametrize(
    "make",
    [lora, mc_dropout]
    + [
        (lambda name=name: ez.presets.load_preset(name))
        for name in ez.presets.list_presets()
        if ez.presets.preset_metadata(name)["kind"] == "trained"
        # A plain keras-hub model (the pretrained gemma_tiny_arithmetic) is
        # keras-hub's: under keras 3.15.1 / keras-hub 0.32 a keras-hub
        # task's variables are not torch parameters at all (the bug
        # track_torch_parameters works around for the zoo's own tasks).
        and name != "gemma_tiny_arithmetic"
    ],
)
def test_every_trainable_variable_is_a_torch_parameter(make):
    model = make()
    parameters = {id(p) for p in model.parameters()}
    missing = [v.path for v in model.trainable_variables if id(v.value) not in parameters]
    assert not missing


def test_deep_ensemble_sgd_steps_follow_the_gradients():
    """Members of a deep ensemble share variable paths; two SGD steps must
    still equal updates by independently computed gradients."""
    from ensemble_zoo.utils.gradients import loss_gradients

    def member(seed):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((6,))
        x = keras.layers.Dense(8, activation="tanh", name="hidden")(inputs)
        return keras.Model(inputs, keras.layers.Dense(3, name="logits")(x))

    model = ez.models.DeepEnsembleClassifier([member(0), member(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    x = np.random.default_rng(0).normal(size=(8, 6)).astype("float32")
    y = np.arange(8) % 3
    for _ in range(2):
        before = [keras.ops.convert_to_numpy(v).copy() for v in model.trainable_variables]
        grads = loss_gradients(model, model.loss, x, y, model.trainable_variables)
        model.train_on_batch(x, y)
        for b, g, v in zip(before, grads, model.trainable_variables):
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(v), b - 0.1 * g, atol=1e-5, err_msg=v.path
            )
