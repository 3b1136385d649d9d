from ensemble_zoo.models.masksembles.masksembles_backbone import MasksemblesViTBackbone
from ensemble_zoo.models.masksembles.masksembles_backbone import apply_masksembles
from ensemble_zoo.models.masksembles.masksembles_classifier import MasksemblesClassifier
from ensemble_zoo.models.masksembles.masksembles_image_classifier import MasksemblesImageClassifier
from ensemble_zoo.models.masksembles.masksembles_model_backbone import MasksemblesModelBackbone
from ensemble_zoo.models.method_registry import BenchmarkCase
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(
    Method(
        name="masksembles",
        tasks=(
            MasksemblesImageClassifier,
            MasksemblesClassifier,  # every keras-hub transformer classifier
        ),
        harness=(
            HarnessCase(
                MasksemblesImageClassifier,
                dict(num_heads=2, num_members=2, scale=2.0, seed=0),
                preset="masksembles_vit_tiny_digits",
                layout="member_major",
            ),
        ),
        keras_hub_kwargs=dict(num_members=2, seed=0),
        export=("torch", "masksembles_vit_tiny_digits"),
        benchmark=BenchmarkCase(
            "Masksembles 3",
            lambda single, size: MasksemblesImageClassifier.from_keras_hub(
                single,
                num_members=3,
                reuse_head=False,
                num_classes=size["classes"],
                scale=2.0,
                seed=0,
            ),
            activation_copies=3,
        ),
    )
)
