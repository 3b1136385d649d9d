"""Member-tiled tasks at inference: one tiled pass or one pass per member
(`member_batching`). The sequential run must compute what the one-pass graph
computes, on image and text tasks of the three methods."""

import threading

import numpy as np
import pytest
from conftest import BACKEND
from zoo_testing import perturb_weights
from zoo_testing import text_inputs
from zoo_testing import tiny_bert
from zoo_testing import tiny_vit
from zoo_testing import to_np

from ensemble_zoo.models import BatchEnsembleImageClassifier
from ensemble_zoo.models import LoRAEnsembleImageClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models import MasksemblesImageClassifier
from ensemble_zoo.models.member_passes import resolve_member_batching


def test_auto_runs_members_sequentially_only_for_jax_on_a_cpu():
    expected = "sequential" if BACKEND == "jax" else "tiled"
    assert resolve_member_batching("auto") == expected  # the test machine is a CPU
    assert resolve_member_batching("tiled") == "tiled"
    with pytest.raises(ValueError, match="member_batching"):
        resolve_member_batching("chunked")


BUILDS = {
    "batch_ensemble": lambda vit, **kw: BatchEnsembleImageClassifier.from_keras_hub(
        vit, num_members=3, seed=0, **kw
    ),
    "masksembles": lambda vit, **kw: MasksemblesImageClassifier.from_keras_hub(
        vit, num_members=3, scale=2.0, seed=0, **kw
    ),
    "lora": lambda vit, **kw: LoRAEnsembleImageClassifier.from_keras_hub(
        vit, num_members=3, rank=2, a_gain=1.0, seed=0, **kw
    ),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def image_task(request):
    model = BUILDS[request.param](tiny_vit(), member_batching="sequential")
    return perturb_weights(model, scale=0.1)


def test_sequential_predict_equals_the_tiled_pass(image_task):
    """`predict` (compiled; under JAX a `keras.ops.map` over the members)
    and an eager call give the tiled pass's logits; switching
    `member_batching` recompiles."""
    model = image_task
    x = np.random.default_rng(1).random((10, 8, 8, 1)).astype("float32")
    model.member_batching = "tiled"
    tiled = to_np(model.predict(x, batch_size=5, verbose=0))
    model.member_batching = "sequential"
    sequential = to_np(model.predict(x, batch_size=5, verbose=0))
    np.testing.assert_allclose(sequential, tiled, atol=1e-5)
    np.testing.assert_allclose(to_np(model(x[:4])), tiled[:4], atol=1e-5)
    assert np.abs(tiled[:, 0] - tiled[:, 1]).max() > 1e-3  # members differ


def test_member_batching_is_kept_in_the_config(image_task):
    image_task.member_batching = "sequential"
    config = image_task.get_config()
    assert config["member_batching"] == "sequential"
    restored = type(image_task).from_config(config)
    assert restored.member_batching == "sequential"
    with pytest.raises(ValueError, match="member_batching"):
        type(image_task)(image_task.backbone, 5, member_batching="loop")
    with pytest.raises(ValueError, match="member_batching"):
        image_task.member_batching = None


@pytest.mark.skipif(BACKEND != "jax", reason="the mode switch is backend-independent")
def test_training_runs_the_tiled_pass(image_task):
    x = np.random.default_rng(2).random((4, 8, 8, 1)).astype("float32")
    image_task.member_batching = "sequential"
    trained = to_np(image_task(x, training=True))
    image_task.member_batching = "tiled"
    reference = to_np(image_task(x, training=True))
    np.testing.assert_array_equal(trained, reference)


def test_sequential_text_task_equals_the_tiled_pass():
    """Dict inputs (token ids, padding mask, segment ids) reach every
    member's pass."""
    model = LoRAEnsembleTextClassifier.from_keras_hub(
        tiny_bert(), num_members=2, rank=2, seed=0, member_batching="tiled"
    )
    for adapter in model.adapters:
        adapter.lora_b.assign(np.random.default_rng(3).normal(size=adapter.lora_b.shape) * 0.3)
    inputs = text_inputs(n=5)
    tiled = to_np(model.predict(inputs, verbose=0))
    model.member_batching = "sequential"
    np.testing.assert_allclose(to_np(model.predict(inputs, verbose=0)), tiled, atol=1e-5)
    np.testing.assert_allclose(to_np(model(inputs)), tiled, atol=1e-5)
    assert np.abs(tiled[:, 0] - tiled[:, 1]).max() > 1e-3


def test_two_threads_get_what_each_gets_alone():
    """Which member a layer computes is per thread: a task running its
    members one after another beside one running the tiled pass (as a
    server's workers do) gives each its single-threaded logits."""
    x = np.random.default_rng(4).random((3, 8, 8, 1)).astype("float32")
    models = {
        batching: perturb_weights(BUILDS["lora"](tiny_vit(), member_batching=batching), scale=0.3)
        for batching in ("sequential", "tiled")
    }
    alone = {batching: to_np(model(x)) for batching, model in models.items()}
    barrier = threading.Barrier(len(models))
    together = {}

    def run(batching):
        barrier.wait()
        together[batching] = [to_np(models[batching](x)) for _ in range(8)]

    threads = [threading.Thread(target=run, args=(batching,)) for batching in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for batching, outputs in together.items():
        for output in outputs:
            np.testing.assert_allclose(output, alone[batching], atol=1e-5, err_msg=batching)
