import keras
import keras_hub
from keras import ops

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.implicit.tile_ensemble_backbone import TileEnsembleBackbone
from ensemble_zoo.models.implicit.tile_pooling import TilePooling
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone
from ensemble_zoo.utils.validation import check_positive_int


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TileEnsembleClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Spatial tiles of one average-pooled classifier, read as an ensemble.

    Implicit ensemble extraction B of Kirsch ("(Implicit) Ensembles of
    Ensembles: Epistemic Uncertainty Collapse in Large Models", §4.1): a
    classifier that averages its last feature map (or its tokens) and applies
    a head is, for a linear head, the mean of the head applied to every
    position. Pooling the feature map to `grid_size x grid_size` tiles instead
    and applying the head to each tile gives `grid_size**2` members,
    `(batch, tiles, classes)`, with no training. One tile (`1 x 1`) is the
    original classifier.

    Use `from_model` for a functional model with a
    `GlobalAveragePooling2D` layer (CNNs) and `from_keras_hub` for a
    keras-hub `ViTImageClassifier` with `pooling="gap"`. Tiles are adaptive
    average pools of the grid (PyTorch's window rule, overlapping when the
    grid size does not divide the map). For a ViT with a class token,
    keras-hub's `"gap"` averages the class token with the patches, so the
    class token joins every tile's average; with one tile that reproduces
    the original pooling exactly.

    Args:
        feature_model: Keras model mapping images to a feature grid,
            `(batch, height, width, channels)`, or, with `token_grid`, to
            tokens `(batch, [1 +] height * width, channels)`.
        head: Keras layer or model mapping `(n, channels)` features to
            logits `(n, classes)` (e.g. the classifier's `Dense`).
        grid_size: int s, tiles per side; `s <= height` and `s <= width`.
        token_grid: optional `(height, width)`: the feature model returns
            tokens on this row-major grid.
        class_token: bool, with `token_grid`: token 0 is a class token.
        backbone: a `TileEnsembleBackbone`, instead of `feature_model` and
            `head` (how the classifier is rebuilt from its config).
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import keras
    import numpy as np
    import ensemble_zoo as ez

    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    cnn = keras.Model(inputs, keras.layers.Dense(8)(x))
    tiles = ez.models.TileEnsembleClassifier.from_model(cnn, grid_size=2)
    x, _ = ez.datasets.load_arrays("digits", "test")
    tiles.predict(x, verbose=0).shape  # (289, 4, 8): 2 x 2 tiles
    ```
    """

    backbone_cls = TileEnsembleBackbone

    def __init__(
        self,
        feature_model=None,
        head=None,
        grid_size=None,
        token_grid=None,
        class_token=False,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        backbone = wrapping_backbone(
            TileEnsembleBackbone,
            backbone,
            kwargs.get("dtype"),
            feature_model=feature_model,
            head=head,
        )
        grid_size = check_positive_int(grid_size, "grid_size")
        shape = tuple(backbone.output.shape)
        if token_grid is None:
            if len(shape) != 4:
                raise ValueError(
                    "`feature_model` must return a (batch, height, width, "
                    f"channels) feature map; got shape {shape}."
                )
            grid = shape[1:3]
        else:
            grid = tuple(int(g) for g in token_grid)
            expected = (1 if class_token else 0) + grid[0] * grid[1]
            if len(shape) != 3 or shape[1] != expected:
                raise ValueError(
                    f"With token_grid={grid} and class_token={class_token}, "
                    f"`feature_model` must return (batch, {expected}, "
                    f"channels) tokens; got shape {shape}."
                )
        if grid_size > min(grid):
            raise ValueError(
                f"`grid_size` must be at most the feature grid's sides {grid}; got {grid_size}."
            )
        logits = backbone.head(keras.KerasTensor((None, shape[-1])))
        if len(logits.shape) != 2:
            raise ValueError(
                "`head` must map (n, channels) features to (n, classes) "
                f"logits; its output has shape {tuple(logits.shape)}."
            )
        num_members = grid_size * grid_size
        num_classes = int(logits.shape[-1])
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.tile_pooling = TilePooling(
            grid,
            grid_size,
            class_token=bool(class_token),
            dtype=backbone.dtype_policy,
            name="tile_pooling",
        )

        # === Functional Model ===
        # The head runs once on every tile of every image: (batch * tiles, channels).
        inputs = backbone.input
        tiles = self.tile_pooling(backbone(inputs))
        logits = backbone.head(ops.reshape(tiles, (-1, shape[-1])))
        outputs = member_logits(ops.reshape(logits, (-1, num_members, num_classes)))
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.grid_size = grid_size
        self.token_grid = None if token_grid is None else list(grid)
        self.class_token = bool(class_token)
        self.num_members = num_members
        self.num_classes = num_classes

    feature_model = backbone_attribute(
        "feature_model", "The layers up to the global pooling (held by `backbone`)."
    )
    head = backbone_attribute("head", "The layer after the pooling (held by `backbone`).")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "token_grid": self.token_grid,
                "class_token": self.class_token,
            }
        )
        return config

    # === Conversions ===

    @classmethod
    def from_model(cls, model, grid_size, **kwargs):
        """Tiles of a functional classifier with one `GlobalAveragePooling2D`
        (without `keepdims`): a Keras CNN, or a keras-hub classifier of a
        family that average-pools its feature map (CSPNet, DenseNet,
        EfficientNet, HGNetV2, ResNet, Xception, MiT).

        The model is split at that layer: the part before it is the
        feature model and the part after it (applied to pooled features)
        the head. The weights are shared with `model`, not copied.
        """
        pools = [
            layer
            for layer in getattr(model, "layers", [])
            if isinstance(layer, keras.layers.GlobalAveragePooling2D)
        ]
        if len(pools) != 1:
            raise ValueError(
                "`model` must be a functional Keras model with exactly one "
                f"GlobalAveragePooling2D layer; found {len(pools)}."
            )
        pool = pools[0]
        if pool.keepdims:
            raise ValueError(
                f"`model`'s GlobalAveragePooling2D '{pool.name}' keeps its spatial axes "
                "(keepdims=True: a convolutional head follows, as in keras-hub's "
                "MobileNet); tiles need a head on pooled feature vectors."
            )
        feature_model = keras.Model(model.inputs, pool.input, name="features")
        head_input = keras.Input(tuple(pool.output.shape[1:]))
        x = head_input
        started = False
        for layer in model.layers:
            if started:
                x = layer(x)
            started = started or layer is pool
        head = keras.Model(head_input, x, name="head")
        return cls(feature_model, head, grid_size, **kwargs)

    @classmethod
    def from_keras_hub(cls, classifier, grid_size, **kwargs):
        """Tiles of a keras-hub `ViTImageClassifier` with `pooling="gap"`.

        The backbone's patch tokens form the grid (image size / patch
        size); the classifier's `Dense` head is applied per tile. Weights
        are shared with `classifier`.
        """
        import keras_hub

        if not isinstance(classifier, keras_hub.models.ViTImageClassifier):
            raise ValueError(
                "`classifier` must be a keras_hub.models.ViTImageClassifier; "
                f"got {type(classifier).__name__}."
            )
        if classifier.pooling != "gap" or classifier.intermediate_dim is not None:
            raise ValueError(
                "Tile ensembles need an average-pooled head: pooling='gap' "
                "and no intermediate_dim; got pooling="
                f"{classifier.pooling!r}."
            )
        backbone = classifier.backbone
        patch = backbone.patch_size
        patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
        grid = (backbone.image_shape[0] // patch[0], backbone.image_shape[1] // patch[1])
        kwargs.setdefault("preprocessor", classifier.preprocessor)
        return cls(
            classifier.backbone,
            classifier.output_dense,
            grid_size,
            token_grid=grid,
            class_token=backbone.use_class_token,
            **kwargs,
        )
