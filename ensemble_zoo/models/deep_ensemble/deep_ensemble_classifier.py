import keras
import keras_hub
from keras import ops

from ensemble_zoo.models.deep_ensemble.deep_ensemble_backbone import DeepEnsembleBackbone
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone
from ensemble_zoo.utils.validation import check_positive_int


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class DeepEnsembleClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """M independent classifiers stacked into one model: a deep ensemble.

    Deep Ensembles (Lakshminarayanan et al., 2017,
    https://arxiv.org/abs/1612.01474) train M copies of a network from
    different random initializations and average their predictive
    distributions. Here the members are any single-input Keras classifiers
    with the same input shape and number of classes (typically keras-hub
    classifiers such as `keras_hub.models.ViTImageClassifier`). The model
    returns per-member logits `(batch, members, classes)`, and one `fit`
    trains all members, each on its own cross-entropy (the default loss
    `EnsembleSparseCategoricalCrossentropy`) and on the same batches.

    The members run one after another: this is the naive reference every
    efficient method in the zoo is compared with, in accuracy, uncertainty
    and cost. With one member it is a single model.

    Args:
        members: list of Keras models, each mapping `(batch,) + input_shape`
            to logits `(batch, classes)`. Must be built (functional models
            and keras-hub tasks are). The classifier's `backbone`, a
            `DeepEnsembleBackbone`, holds copies of them (`members` returns
            those); the given models are not changed.
        backbone: a `DeepEnsembleBackbone`, instead of `members` (how the
            classifier is rebuilt from its config).
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            run on raw images by `fit`, `predict` and `evaluate`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import keras
    import ensemble_zoo

    def make_member(seed):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((8, 8, 1))
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(32, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(8)(x))

    ensemble = ensemble_zoo.models.DeepEnsembleClassifier(
        [make_member(seed) for seed in range(3)]
    )
    train = ensemble_zoo.datasets.load("digits", "train", batch_size=64)
    ensemble.fit(train, epochs=1, verbose=0)
    outputs = ensemble.predict_uncertainty(
        ensemble_zoo.datasets.load("digits", "test", batch_size=64)
    )
    outputs["epistemic"].shape  # (289,)
    ```
    """

    backbone_cls = DeepEnsembleBackbone

    def __init__(self, members=None, backbone=None, preprocessor=None, **kwargs):
        backbone = wrapping_backbone(
            DeepEnsembleBackbone, backbone, kwargs.get("dtype"), members=members
        )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor

        # === Functional Model ===
        # The backbone's graph, one call level shallower (the members on
        # the task's input): torch.compile's tracer inlines every Keras
        # call level, and the extra one exceeded its recursion limit.
        inputs = backbone.input
        logits = ops.stack([member(inputs) for member in backbone.members], axis=1)
        outputs = member_logits(logits)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_members = backbone.num_members
        self.num_classes = backbone.num_classes

    members = backbone_attribute("members", "The member models (held by `backbone`).")

    @classmethod
    def from_model(cls, model, num_members, seed=0, **kwargs):
        """A deep ensemble of re-initialized copies of `model`'s architecture.

        Member `m` is built from `model.get_config()` after
        `keras.utils.set_random_seed(seed + m)`, so the members differ only
        in their random initialization and the ensemble is reproducible.
        The members of a keras-hub task lose their preprocessor and the
        ensemble takes it over: `predict` then preprocesses once for all
        members, as the task did.

        Args:
            model: a Keras classifier (e.g. a keras-hub
                `ViTImageClassifier`) whose architecture is copied; its
                weights are not.
            num_members: int, the ensemble size.
            seed: int, the seed of member 0, or `None` to leave the global
                seed as it is (members whose weights the caller sets).
                Defaults to `0`.
            **kwargs: passed to the constructor.
        """
        check_positive_int(num_members, "num_members")
        members = []
        for m in range(num_members):
            config = model.get_config()
            if "preprocessor" in config:
                config["preprocessor"] = None
            config["name"] = f"member_{m}"
            if seed is not None:
                keras.utils.set_random_seed(seed + m)
            members.append(model.__class__.from_config(config))
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(members, **kwargs)

    @classmethod
    def from_keras_hub(cls, classifier, num_members, seed=0, keep_backbone_weights=False):
        """A deep ensemble of copies of a keras-hub classifier.

        Args:
            classifier: a keras-hub task with a `backbone`, e.g. a
                `keras_hub.models.ViTImageClassifier` (from a local preset
                directory or built in code).
            num_members: int, the ensemble size.
            seed: int, member `m` is initialized with seed `seed + m`.
            keep_backbone_weights: bool. `False` (the classic deep ensemble)
                re-initializes every weight. `True` gives every member the
                classifier's backbone weights and a freshly seeded head: the
                usual recipe when fine-tuning a pretrained backbone.
        """
        backbone = getattr(classifier, "backbone", None)
        if not isinstance(backbone, keras.Model):
            raise ValueError(
                "`classifier` must be a keras-hub task with a `backbone` "
                f"(e.g. keras_hub.models.ViTImageClassifier); got "
                f"{type(classifier).__name__}. For other Keras models use "
                "DeepEnsembleClassifier.from_model()."
            )
        ensemble = cls.from_model(classifier, num_members, seed=seed)
        if keep_backbone_weights:
            weights = backbone.get_weights()
            for member in ensemble.members:
                member.backbone.set_weights(weights)
        return ensemble
