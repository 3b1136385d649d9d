"""The paper's parameter counts (Table 7, App. G), read from the models."""

import keras
import keras_hub
import numpy as np
import pytest

from ensemble_zoo.models import LoRAEnsembleImageClassifier

BACKEND = keras.config.backend()
# Parameter counts are shapes: backend-independent, so the ViT-B-sized
# builds run under one backend.
once = pytest.mark.skipif(BACKEND != "torch", reason="backend-independent")


def trainable_count(model):
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def vit(image_size=224, patch_size=32, hidden_dim=768, num_layers=12):
    return keras_hub.models.ViTBackbone(
        image_shape=(image_size, image_size, 3),
        patch_size=patch_size,
        num_layers=num_layers,
        num_heads=12,
        hidden_dim=hidden_dim,
        mlp_dim=4 * hidden_dim,
    )


def expected_trainable(members, rank, classes, dim=768, layers=12, projections=4):
    per_member = layers * projections * rank * (dim + dim) + dim * classes + classes
    return members * per_member


def test_trainable_parameters_follow_the_formula_on_a_small_vit():
    model = LoRAEnsembleImageClassifier(
        vit(image_size=32, patch_size=16, hidden_dim=96, num_layers=3),
        num_classes=10,
        num_members=5,
        rank=3,
    )
    assert trainable_count(model) == expected_trainable(5, 3, 10, dim=96, layers=3)
    shared_qv = LoRAEnsembleImageClassifier(
        vit(image_size=32, patch_size=16, hidden_dim=96, num_layers=3),
        num_classes=10,
        num_members=5,
        rank=3,
        targets=("query", "value"),
    )
    assert trainable_count(shared_qv) == expected_trainable(
        5, 3, 10, dim=96, layers=3, projections=2
    )


@once
@pytest.mark.slow
def test_vit_b32_counts_match_the_paper():
    backbone = vit()
    frozen = backbone.count_params()
    assert frozen == 87_455_232  # torchvision ViT-B/32 without its head
    sixteen = LoRAEnsembleImageClassifier(backbone, num_classes=100, num_members=16, rank=8)
    assert trainable_count(sixteen) == 10_667_584  # Table 7
    assert sixteen.count_params() - trainable_count(sixteen) == frozen
    one = LoRAEnsembleImageClassifier(vit(), num_classes=100, num_members=1, rank=8)
    assert trainable_count(one) == 666_724
    ham = LoRAEnsembleImageClassifier(vit(), num_classes=7, num_members=8, rank=4)
    assert trainable_count(ham) == 2_402_360  # Table 13, per-member heads


@once
@pytest.mark.slow
@pytest.mark.parametrize(
    "name, trainable",
    [
        # 16 x (12 layers x 4 projections x 8 x (768 + 768) + 768 x 100 + 100)
        ("lora_ensemble_vit_b16_16x8", 10_667_584),
        # 8 x (12 x 4 x 64 x (768 + 768) + 768 x 2 + 2)
        ("lora_ensemble_bert_base_8x64", 37_761_040),
    ],
)
def test_architecture_presets_build_with_the_papers_sizes(name, trainable):
    import ensemble_zoo as ez

    model = ez.models.EnsembleClassifier.from_preset(name)
    assert trainable_count(model) == trainable
    metadata = ez.presets.preset_metadata(name)
    assert metadata["trainable_parameter_count"] == trainable
    assert metadata["parameter_count"] == model.count_params()


def test_multiply_adds_are_members_times_single_plus_adapters():
    from ensemble_zoo.models.hydra.hydra_cost import hydra_multiply_adds
    from ensemble_zoo.models.lora_ensemble.lora_ensemble_cost import lora_ensemble_multiply_adds

    # ViT-B/16, 100 classes: 197 tokens; each member's 48 adapters cost
    # 197 x 8 x (768 + 768) multiply-adds each.
    single = hydra_multiply_adds((224, 224, 3), 16, 12, 12, 768, 3072, num_classes=100)
    total = lora_ensemble_multiply_adds(single, 16, 197, 12, 768, 8)
    assert total == 16 * single + 16 * 48 * 197 * 8 * 1536
    assert total / single == pytest.approx(16.106, abs=1e-3)
    with pytest.raises(ValueError, match="rank"):
        lora_ensemble_multiply_adds(single, 16, 197, 12, 768, 0)
