"""A zero-shot image classifier over keras-hub's CLIP: class prompts make
the head."""

import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.ops.member_tiling import tile_members

#: The prompt template of the Hydra paper's zero-shot experiments (and of
#: CLIP's own ImageNet evaluation, "Learning Transferable Visual Models From
#: Natural Language Supervision").
DEFAULT_TEMPLATES = ("A photo of a {}.",)


def class_prompt_token_ids(preprocessor, class_names, templates=DEFAULT_TEMPLATES):
    """The token ids of every class's prompts, as `CLIPZeroShotClassifier`
    takes them: `(classes, templates, sequence_length)` int32, each prompt
    `template.format(name)` as keras-hub's `CLIPPreprocessor` gives it
    (lower-cased, between the start and end tokens, padded to its
    `sequence_length`).

    Args:
        preprocessor: a `keras_hub.models.CLIPPreprocessor`.
        class_names: list of str, one per class.
        templates: list of str with one `{}` each. Defaults to
            `("A photo of a {}.",)`.

    Raises:
        ValueError: no class names or templates, a template without `{}`,
            or a prompt longer than the preprocessor's `sequence_length`
            (which it would truncate).
    """
    if isinstance(class_names, str) or not list(class_names):
        raise ValueError(f"`class_names` must be a non-empty list of str; got {class_names!r}.")
    if isinstance(templates, str) or not list(templates):
        raise ValueError(f"`templates` must be a non-empty list of str; got {templates!r}.")
    for template in templates:
        if not isinstance(template, str) or "{}" not in template:
            raise ValueError(f"Every template must be a str with one `{{}}`; got {template!r}.")
    if not isinstance(preprocessor, keras_hub.models.CLIPPreprocessor):
        raise TypeError(
            "`preprocessor` must be a keras_hub.models.CLIPPreprocessor; "
            f"got {type(preprocessor).__name__}."
        )
    prompts = [template.format(name) for name in class_names for template in templates]
    ids = np.asarray(preprocessor({"images": None, "prompts": prompts})["token_ids"], "int32")
    for prompt in prompts:
        tokens = preprocessor.tokenizer(prompt.lower() if preprocessor.to_lower else prompt)
        if len(np.asarray(tokens)) + 2 > ids.shape[-1]:
            raise ValueError(
                f"The prompt {prompt!r} is longer than the preprocessor's "
                f"`sequence_length={preprocessor.sequence_length}` (it would be truncated)."
            )
    return ids.reshape(len(class_names), len(templates), ids.shape[-1])


def check_class_token_ids(class_token_ids, text_encoder):
    """`class_token_ids` as int32 `(classes, prompts, length)` (a 2-D
    array is one prompt per class), checked against `text_encoder`."""
    ids = np.asarray(class_token_ids)
    if ids.ndim == 2:
        ids = ids[:, None, :]
    if ids.ndim != 3 or 0 in ids.shape or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            "`class_token_ids` must be integer token ids (classes, prompts, sequence_length); "
            f"got {ids.dtype} of shape {ids.shape}."
        )
    if ids.shape[2] > text_encoder.max_sequence_length:
        raise ValueError(
            f"`class_token_ids` has {ids.shape[2]} tokens per prompt; the text encoder "
            f"takes at most {text_encoder.max_sequence_length}."
        )
    if ids.min() < 0 or ids.max() >= text_encoder.vocabulary_size:
        raise ValueError(
            f"`class_token_ids` must lie in [0, {text_encoder.vocabulary_size}) (the text "
            f"encoder's vocabulary); got [{ids.min()}, {ids.max()}]."
        )
    return ids.astype("int32")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class CLIPZeroShotClassifier(keras_hub.models.ImageClassifier):
    """Zero-shot image classification with a keras-hub CLIP.

    CLIP's zero-shot classifier ("Learning Transferable Visual Models From
    Natural Language Supervision", section 3.1.4): each class is described
    by prompts ("A photo of a {label}."), the text encoder embeds them, and
    an image's logits are its cosine similarities to the classes' mean
    prompt embedding, times CLIP's learned logit scale. The class
    embeddings are computed once, when the classifier is built (a
    keras-hub `CLIPBackbone`'s `get_text_embeddings` on `class_token_ids`,
    each prompt L2-normalised, averaged over a class's prompts, normalised
    again), and held as the kernel of the classifier's last `Dense` layer,
    `class_embeddings`, so that `call` runs the vision encoder alone:
    `logits = exp(logit_scale) * normalize(image embedding) @
    normalize(class embedding)^T`. The backbone (both encoders) is kept
    whole and saved with the classifier; `HydraCLIPZeroShotClassifier`
    prunes heads in both. `fit` trains the vision side and the class
    embeddings; the text encoder, outside the pass, takes no gradient
    (freeze it, `backbone.text_encoder.trainable = False`, to silence
    Keras' warning), and `class_embedding_kernels` recomputes the zero-shot
    head from it.

    Args:
        backbone: a `keras_hub.models.CLIPBackbone`.
        class_token_ids: int array `(classes, prompts, sequence_length)`
            (or `(classes, sequence_length)`, one prompt each), e.g. from
            `class_prompt_token_ids` or `from_class_names`.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            (the image side of a `CLIPPreprocessor`: its image converter).
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`).

    Returns (call): logits `(batch, classes)` for images `(batch, height,
    width, channels)`.

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    clip = keras_hub.models.CLIPBackbone(
        vision_encoder=keras_hub.models.CLIPVisionEncoder(
            patch_size=4, hidden_dim=8, num_layers=1, num_heads=2,
            intermediate_dim=16, image_shape=(8, 8, 1),
        ),
        text_encoder=keras_hub.models.CLIPTextEncoder(
            vocabulary_size=10, embedding_dim=8, hidden_dim=8, num_layers=1,
            num_heads=2, intermediate_dim=16, max_sequence_length=4,
        ),
        projection_dim=8,
    )
    # Three classes, one prompt each: start token 8, two words, end token 9.
    prompts = np.array([[8, 1, 2, 9], [8, 3, 4, 9], [8, 5, 6, 9]])
    model = ez.models.CLIPZeroShotClassifier(clip, prompts)
    model.predict(np.ones((2, 8, 8, 1)), verbose=0).shape  # (2, 3)
    ```
    """

    backbone_cls = keras_hub.models.CLIPBackbone
    preprocessor_cls = keras_hub.models.ImageClassifierPreprocessor

    def __init__(self, backbone, class_token_ids, preprocessor=None, **kwargs):
        if not isinstance(backbone, keras_hub.models.CLIPBackbone):
            raise TypeError(
                "`backbone` must be a keras_hub.models.CLIPBackbone; "
                f"got {type(backbone).__name__}."
            )
        class_token_ids = check_class_token_ids(class_token_ids, backbone.text_encoder)
        num_classes = class_token_ids.shape[0]

        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.image_normalization = keras.layers.UnitNormalization(
            dtype=backbone.dtype_policy, name="image_normalization"
        )
        self.class_embeddings = keras.layers.Dense(
            num_classes, use_bias=False, dtype=backbone.dtype_policy, name="class_embeddings"
        )

        # === Functional Model ===
        images = keras.Input(shape=backbone.vision_encoder.image_shape, name="images")
        x = backbone.vision_encoder({"images": images})
        x = backbone.vision_pooler(x)
        x = backbone.vision_projection(x)
        x = self.image_normalization(x)
        outputs = self.class_embeddings(x)
        keras_hub.models.Task.__init__(self, inputs=images, outputs=outputs, **kwargs)
        # Under PyTorch, keras-hub's `Task.__setattr__` leaves attributes set
        # before `__init__` untracked ("all our state is covered by
        # functional model"): the text encoder is not in the graph, so the
        # backbone is tracked again, for its weights to be the model's.
        self.backbone = backbone

        # === Config ===
        self.class_token_ids = class_token_ids
        self.num_classes = num_classes

        self.class_embeddings.kernel.assign(self.class_embedding_kernels()[0])

    def class_embedding_kernels(self, num_members=1):
        """The `class_embeddings` kernel the backbone's text side gives,
        `(members, projection_dim, classes)`: the prompts run once per
        member, member-major (`num_members` times `classes * prompts`
        rows), so that a text encoder whose members keep different heads
        (`HydraCLIPZeroShotClassifier`) gives each member its own."""
        classes, prompts, length = self.class_token_ids.shape
        ids = tile_members(
            ops.convert_to_tensor(self.class_token_ids.reshape(-1, length)), num_members
        )
        # In float32 whatever the policy (bfloat16 norms, and TensorFlow
        # refuses a float32 scale times bfloat16 embeddings).
        text = ops.cast(self.backbone.get_text_embeddings(ids), "float32")
        text = text / ops.norm(text, axis=-1, keepdims=True)
        text = ops.mean(ops.reshape(text, (num_members, classes, prompts, -1)), axis=2)
        text = text / ops.norm(text, axis=-1, keepdims=True)
        scale = ops.exp(ops.cast(self.backbone.clip_head.logit_scale, "float32"))
        return ops.convert_to_numpy(ops.transpose(text * scale, (0, 2, 1)))

    def get_config(self):
        # keras-hub's `ImageClassifier` config is its own graph's (pooling,
        # activation, dropout); this graph is the zero-shot head's.
        config = keras_hub.models.Task.get_config(self)
        config.update({"class_token_ids": self.class_token_ids.tolist()})
        return config

    @classmethod
    def from_class_names(
        cls, backbone, text_preprocessor, class_names, templates=DEFAULT_TEMPLATES, **kwargs
    ):
        """The zero-shot classifier of `class_names`, each described by
        `templates` and tokenized by `text_preprocessor` (a keras-hub
        `CLIPPreprocessor`; `class_prompt_token_ids`). `kwargs` are the
        constructor's other arguments (`preprocessor`, the image one)."""
        ids = class_prompt_token_ids(text_preprocessor, class_names, templates)
        return cls(backbone, ids, **kwargs)
