"""Per-token loss prediction on a frozen keras-hub causal LM ("Pretrained
Visual Uncertainties").

Kirchhof et al. train a small MLP on a frozen classifier's embedding to
rank samples by the classifier's own loss. For a language model the
sample is a token: from the final hidden state at position `t` (what the
model knows before it sees token `t + 1`) the head predicts the loss of
token `t + 1`, `-log p(x_{t+1} | x_{<=t})`. The targets come from the
same frozen model, so a `CausalLM` alone, with text, trains it.
"""

import inspect

import keras
import keras_hub
from keras import ops

from ensemble_zoo.layers.loss_prediction_head import LossPredictionHead
from ensemble_zoo.losses.loss_prediction_losses import pair_hinge
from ensemble_zoo.models.causal_lm_inputs import CausalLMLoopsMixin
from ensemble_zoo.models.causal_lm_inputs import text_inputs
from ensemble_zoo.models.causal_lm_inputs import with_position_ids
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.model_copies import copy_preprocessor
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.validation import check_real


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class NextTokenLoss(keras.layers.Layer):
    """`-log p(token t + 1 | tokens <= t)` at position `t`, from logits
    `(batch, tokens, vocabulary)` and token ids: `(batch, tokens)`, 0 at
    the last position and where token `t + 1` is padding."""

    def call(self, logits, token_ids, padding_mask):
        logits = ops.cast(logits[:, :-1], "float32")
        targets = ops.cast(token_ids[:, 1:], "int32")
        losses = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
        losses = ops.where(ops.cast(padding_mask[:, 1:], "bool"), losses, 0.0)
        return ops.pad(losses, [[0, 0], [0, 1]])

    def compute_output_shape(self, logits_shape, token_ids_shape, padding_mask_shape):
        return tuple(token_ids_shape)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TokenLossPredictor(CausalLMLoopsMixin, keras_hub.models.Task):
    """A loss-prediction head per token on a frozen keras-hub causal LM.

    The head (`LossPredictionHead`, the MLP of Pretrained Visual
    Uncertainties, with `stop_gradient`) reads the frozen backbone's final
    hidden state at each position `t` and predicts the loss of the next token.
    The model returns a dict: `predicted_loss` and `token_loss` (the frozen
    model's actual loss of the next token, the training target), both
    `(batch, tokens)`; position `t` refers to token `t + 1`, and the last
    position holds 0.

    Training (`compile` then `fit` on token ids; labels, if the data has any,
    are ignored) minimises the pairwise ranking loss of Pretrained Visual
    Uncertainties over pairs of tokens whose next token is not padding, or,
    given a `sample_weight` `(batch, tokens)` (what a `CausalLMPreprocessor`
    gives, or weights on the answer tokens only), whose weight is positive:
    the flattened batch's position `j` is paired with `j + n // 2`, so that a
    pair joins tokens of different sequences or far apart in one. Only the
    head trains; the backbone is a frozen copy (the given model is not
    changed).

    `LoRAEnsembleCausalLM.attach_loss_predictor(predictor)` makes the
    predicted loss a fourth uncertainty of `generate` and
    `score_uncertainty`.

    It is a keras-hub `Task` (saved in keras-hub's preset layout; with
    the causal LM's preprocessor, `fit` and `predict` take text).

    Args:
        backbone: the keras-hub decoder backbone (it is frozen).
        preprocessor: optional, the causal LM's `CausalLMPreprocessor`.
        hidden_units: the head's hidden layer sizes.
        margin: float, the ranking loss's margin.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import ensemble_zoo as ez

    path = ez.presets.get_preset_path("gemma_tiny_arithmetic")
    gemma = keras_hub.models.CausalLM.from_preset(path)
    predictor = ez.models.TokenLossPredictor.from_keras_hub(gemma, hidden_units=(32,))
    predictor.compile(optimizer="adam")
    predictor.fit(["12+7=19", "30+4=34"], epochs=1, batch_size=2, verbose=0)
    predictor.predict(["1+1=2"], verbose=0)["predicted_loss"].shape  # (1, 12)
    ```
    """

    def __init__(self, backbone, preprocessor=None, hidden_units=(512, 512), margin=0.1, **kwargs):
        margin = check_real(margin, "margin", low=0.0)
        _check_decoder(backbone)
        freeze_weights(backbone)
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.head = LossPredictionHead(hidden_units=hidden_units, name="loss_prediction_head")
        self.next_token_loss = NextTokenLoss(name="next_token_loss")

        # === Functional Model ===
        inputs = text_inputs(backbone)
        hidden = backbone(with_position_ids(backbone, inputs))
        predicted = self.head(hidden)
        logits = backbone.token_embedding(hidden, reverse=True)
        token_loss = self.next_token_loss(logits, inputs["token_ids"], inputs["padding_mask"])
        self.margin = margin
        self.hidden_units = tuple(self.head.hidden_units)
        super().__init__(
            inputs=inputs, outputs={"predicted_loss": predicted, "token_loss": token_loss}, **kwargs
        )

    @classmethod
    def from_preset(cls, preset, load_weights=True, dtype=None, preprocessor="auto", **kwargs):
        """Loads a per-token loss-predictor preset: a shipped name (e.g.
        `"loss_prediction_gemma_tiny_arithmetic"`), a directory written by
        `save_to_preset` or a hub handle (the same arguments as
        `LoRAEnsembleCausalLM.from_preset`). keras-hub's own
        `Task.from_preset` looks for a task class registered for the
        backbone (`GemmaBackbone`) and finds keras-hub's, not this one."""
        from ensemble_zoo.presets import load_preset

        return load_preset(preset, cls, load_weights, dtype, preprocessor, **kwargs)

    @classmethod
    def from_keras_hub(cls, causal_lm, hidden_units=(512, 512), margin=0.1):
        """A predictor on a frozen copy of `causal_lm`'s backbone (which is
        not changed), with a copy of `causal_lm`'s preprocessor (sharing
        its tokenizer; see `LoRAEnsembleCausalLM.from_keras_hub`)."""
        if not isinstance(causal_lm, keras_hub.models.CausalLM):
            raise TypeError(
                f"`causal_lm` must be a keras-hub CausalLM; got {type(causal_lm).__name__}."
            )
        _check_decoder(causal_lm.backbone)
        backbone = copy_model(causal_lm.backbone)
        return cls(
            backbone=backbone,
            preprocessor=copy_preprocessor(causal_lm.preprocessor),
            hidden_units=hidden_units,
            margin=margin,
        )

    def compile(self, optimizer="adam", **kwargs):
        """`keras.Model.compile` with the ranking loss built in (no `loss`
        argument)."""
        if "loss" in kwargs:
            raise ValueError(
                "TokenLossPredictor trains with its built-in ranking loss; do not pass `loss`."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if sample_weight is not None:
            # The preprocessor's (or the caller's) weights of the next-token
            # predictions: position t counts when it weighs token t + 1.
            valid = ops.cast(ops.greater(sample_weight, 0), "float32")
        else:
            valid = ops.cast(x["padding_mask"][:, 1:], "float32")
            valid = ops.pad(valid, [[0, 0], [0, 1]])
        return token_ranking_loss(
            y_pred["token_loss"], y_pred["predicted_loss"], valid, self.margin
        )

    def get_config(self):
        # Task's config (backbone, preprocessor, name, trainable).
        config = super().get_config()
        config.update({"hidden_units": list(self.hidden_units), "margin": self.margin})
        return config


def _check_decoder(backbone):
    """A `TypeError` unless `backbone` is a keras-hub decoder the predictor
    reads: a dict input with `token_ids` and `padding_mask` and a
    reversible token embedding (the vocabulary projection of its loss).
    Gemma 3n (a list input) and RWKV-7 (no reversible embedding) are not."""
    inputs = getattr(backbone, "input", None)
    call = getattr(getattr(backbone, "token_embedding", None), "call", None)
    reversible = call is not None and "reverse" in inspect.signature(call).parameters
    if not (
        isinstance(inputs, dict) and {"token_ids", "padding_mask"} <= set(inputs) and reversible
    ):
        raise TypeError(
            "The loss predictor needs a keras-hub decoder backbone with `token_ids` "
            "and `padding_mask` inputs and a reversible token embedding; got a "
            f"{type(backbone).__name__}."
        )


def token_ranking_loss(token_loss, predicted_loss, valid, margin=0.1):
    """The pairwise ranking loss of Pretrained Visual Uncertainties over the
    valid tokens of a batch.

    The flattened `(batch * tokens)` position `j` is paired with `j + n //
    2` (`n` the number of positions; an odd last one is left out), and a
    pair counts when both its tokens are valid; the result is the mean
    over counted pairs (0 when none). The hinge is
    `pairwise_ranking_loss`'s (`pair_hinge`; ties count -1).
    """
    token_loss = ops.reshape(ops.stop_gradient(ops.cast(token_loss, "float32")), (-1,))
    predicted = ops.reshape(ops.cast(predicted_loss, "float32"), (-1,))
    valid = ops.reshape(ops.cast(valid, "float32"), (-1,))
    half = ops.shape(token_loss)[0] // 2  # a tensor where the batch is unknown (TF)

    def pairs(x):
        return x[:half], x[half : 2 * half]

    (loss_a, loss_b), (pred_a, pred_b), (valid_a, valid_b) = map(
        pairs, (token_loss, predicted, valid)
    )
    pair_valid = valid_a * valid_b
    hinge = pair_hinge(loss_a, loss_b, pred_a, pred_b, margin)
    return ops.sum(hinge * pair_valid) / ops.maximum(ops.sum(pair_valid), 1.0)
