"""The base of the classifiers that run one keras-hub network on the
member-major batch (LoRA-Ensemble, BatchEnsemble, Masksembles)."""

import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.head_reuse import resolve_head
from ensemble_zoo.models.keras_hub_vit import check_image_backbone
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.member_head import pool_tokens
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.models.member_passes import resolve_member_batching
from ensemble_zoo.models.member_passes import run_members_sequentially
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


class MemberTiledClassifier(EnsembleClassifier):
    """A classifier whose members share one keras-hub network that tells
    them apart by row: the inputs are tiled once to the member-major batch
    `(members * batch, ...)` (`ensemble_zoo.ops.tile_members`), the
    converted backbone (adapters, fast weights or masks per member) runs
    once on it, each row is pooled, and the method's head returns member
    logits `(batch, members, classes)` in float32. Inference runs the
    members in one pass or one pass each (`member_batching`,
    `ensemble_zoo.models.member_passes`).

    Like `EnsembleClassifier`, the class holds behaviour only: a task lists
    it (after its method's shared class, if any) before its keras-hub task
    class. A method writes one constructor (in its shared class, or in
    its task when it has one task): it names `backbone`, `num_classes` and
    the method's arguments, takes the task arguments below through
    `**kwargs` and passes them on by name, the method's arguments as the
    dict `method_arguments`. A
    subclass sets `backbone_cls` (a `MethodBackbone` class whose
    `method_keys` name the method's arguments) and implements:

    - `method_backbone(backbone, **method_arguments)`: the method's
      backbone (a `MethodBackbone` whose `method_config` holds
      `num_members`) built from a keras-hub backbone, or the given one when
      it is the method's already;
    - `_make_head(backbone, num_classes, dropout)`: creates the layers
      after the backbone (`output_dropout`, `head`, ...);
    - `_member_outputs(features)`: member-major pooled features
      `(members * batch, dim)` -> member logits;
    - `_copy_head(dense)`: starts the head from a keras-hub classifier's
      `Dense` head (`_from_keras_hub`).

    The method's arguments other than `num_members` are config attributes
    (`_set_method_config`) and `get_config` keys.

    Args:
        backbone: a keras-hub backbone of the task's kind
            (`check_backbone`: an image backbone, or BERT for a text task)
            or the method's backbone.
        num_classes: int.
        preprocessor: optional keras-hub preprocessor run by `fit`,
            `predict` and `evaluate` on raw inputs.
        pooling: `"token"` (the class token) or `"gap"` (the mean of the
            tokens); ignored by a task with `uses_pooled_output` (a text
            task: the backbone's output dict holds BERT's `pooled_output`).
        dropout: float, dropout before the head. Defaults to the task
            kind's `default_dropout`: `0.0` for images (keras-hub's
            `ViTImageClassifier`), `0.1` for text (`BertTextClassifier`).
        member_batching: `"auto"`, `"tiled"` or `"sequential"`
            (`ensemble_zoo.models.member_passes`).
        method_arguments: dict, the method's arguments for
            `method_backbone` (those left `None` are the backbone's or the
            method's defaults).
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).
    """

    # A class default, so that `dir()` lists it whether or not an instance
    # set its own (keras-hub's harness compares `dir` of revived models).
    _member_batching = "auto"
    uses_pooled_output = False
    #: The dropout before the head when `dropout` is `None`.
    default_dropout = 0.0
    #: Checks the backbone the constructor is given (text tasks: BERT's).
    check_backbone = staticmethod(check_image_backbone)
    #: `(backbone, head, num_classes)` of a keras-hub model to convert.
    keras_hub_parts = staticmethod(vit_parts)

    def __init__(
        self,
        backbone,
        num_classes,
        preprocessor=None,
        pooling="token",
        dropout=None,
        member_batching="auto",
        method_arguments=None,
        **kwargs,
    ):
        self.check_backbone(backbone)
        backbone = self.method_backbone(backbone, **(method_arguments or {}))
        member_batching = check_member_batching(member_batching)
        # Text tasks (`TextInputsMixin`) read BERT's pooled output.
        pooling = None if self.uses_pooled_output else check_pooling(pooling)
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(self.default_dropout if dropout is None else dropout, "dropout")
        num_members = backbone.method_config["num_members"]
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self._make_head(backbone, num_classes, dropout)

        # === Functional Model ===
        # One backbone pass over the member-major batch: the rows of member
        # m take member m's adapters, fast weights or masks.
        inputs = backbone.input
        self.pooling = pooling
        tiled = keras.tree.map_structure(lambda x: tile_members(x, num_members), inputs)
        outputs = self._member_outputs(self._member_features(tiled))
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)
        self.member_batching = member_batching

        # === Config ===
        self.num_members = int(num_members)
        self.num_classes = num_classes
        self.dropout = dropout
        self._set_method_config()

    def method_backbone(self, backbone, **method_arguments):
        """The method's backbone built from `backbone` (see the class
        docstring); every subclass sets its method's function."""
        raise NotImplementedError(f"{type(self).__name__} must set `method_backbone`.")

    @property
    def _method_config_keys(self):
        """The method's arguments that are config attributes: all but
        `num_members` (the task's own)."""
        return [name for name in self.backbone_cls.method_keys if name != "num_members"]

    def _set_method_config(self):
        """Sets the method's config attributes from
        `backbone.method_config`."""
        method_config = self.backbone.method_config
        for name in self._method_config_keys:
            setattr(self, name, method_config[name])

    def _member_features(self, x, training=None):
        """The backbone on member-major rows, pooled: `(rows, dim)`."""
        outputs = self.backbone(x, training=training)
        if self.pooling is None:
            return outputs["pooled_output"]
        return pool_tokens(outputs, self.pooling)

    @property
    def member_batching(self):
        """`"auto"`, `"tiled"` or `"sequential"`
        (`ensemble_zoo.models.member_passes`)."""
        return self.__dict__.get("_member_batching", "auto")

    @member_batching.setter
    def member_batching(self, value):
        object.__setattr__(self, "_member_batching", check_member_batching(value))
        # Compiled predict / evaluate functions hold the previous choice.
        for name in ("predict_function", "test_function"):
            if getattr(self, name, None) is not None:
                setattr(self, name, None)

    def _run_graph(self, inputs, training=None, **kwargs):
        batching = resolve_member_batching(self.member_batching)
        batch = tuple(keras.tree.flatten(inputs)[0].shape)[0]
        if training or batching == "tiled" or not isinstance(batch, int):
            # A batch of unknown size (a SavedModel's `serve`, traced for
            # any batch) runs the tiled pass too.
            return super()._run_graph(inputs, training=training, **kwargs)
        return run_members_sequentially(
            lambda x: self._member_features(x, training=False),
            self._member_outputs,
            inputs,
            self.num_members,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "num_members": self.num_members,
                "dropout": self.dropout,
                "member_batching": self.member_batching,
            }
        )
        if self.pooling is not None:
            config["pooling"] = self.pooling
        config.update({name: getattr(self, name) for name in self._method_config_keys})
        return config

    # === keras-hub conversion ===

    @classmethod
    def _from_keras_hub(cls, model, num_classes, reuse_head, kwargs):
        """The ensemble on a copy of the keras-hub `model`
        (`keras_hub_parts`; `model` is not changed), its head started
        from the classifier's (`_copy_head`) when `resolve_head` says so.
        `kwargs` holds the other constructor arguments."""
        try:
            backbone, head, classes = cls.keras_hub_parts(model, kwargs)
        except TypeError as error:
            raise TypeError(
                f"{error} For a classifier of another keras-hub family, "
                "`LoRAEnsembleClassifier.from_model`, `BatchEnsembleClassifier.from_model` "
                "and `MasksemblesClassifier.from_model` take any."
            ) from None
        num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
        ensemble = cls(backbone, num_classes, **kwargs)
        if reuse_head:
            ensemble._copy_head(head)
        return ensemble
