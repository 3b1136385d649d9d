import keras
from keras import ops

from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossPredictionHead(keras.layers.Layer):
    """An MLP predicting a classifier's loss from its pooled embedding.

    The uncertainty head of Kirchhof et al. ("Pretrained Visual
    Uncertainties", App. A):
    `Dense(512) -> LeakyReLU(0.01) -> Dense(512) -> LeakyReLU(0.01) ->
    Dense(1) -> softplus (+ epsilon)`, one positive score per sample. Its
    input passes through `stop_gradient`, so the head can never change the
    backbone or the classifier that produced the embedding (the paper's
    fix for the "gradient conflict"). Embeddings `(batch, ..., dim)` (a
    language model's hidden state per token) give one score per position,
    `(batch, ...)`. The ranking loss it is trained with
    is scale-free, so the score is an ordering, not a calibrated loss.

    The kernels use Keras' default Glorot-uniform initialization: a
    zero-initialized head cannot learn (every pairwise difference is 0;
    the paper's R-AUROC 0.500 row).

    Args:
        hidden_units: tuple of ints, the hidden layer sizes. Defaults to
            `(512, 512)`.
        negative_slope: float, LeakyReLU slope. Defaults to `0.01`.
        epsilon: float added to the softplus output. Defaults to `1e-6`.
        stop_gradient: bool. Defaults to `True`. `False` gives vanilla
            loss prediction (the URL benchmark's "Losspred", paper Eq. 1),
            whose gradients reach the backbone: only for ablations.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import LossPredictionHead

    head = LossPredictionHead(hidden_units=(64, 64))
    scores = head(np.random.normal(size=(4, 32)).astype("float32"))  # (4,)
    ```
    """

    def __init__(
        self,
        hidden_units=(512, 512),
        negative_slope=0.01,
        epsilon=1e-6,
        stop_gradient=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(hidden_units, (str, bytes)) or not hasattr(hidden_units, "__iter__"):
            raise TypeError(
                "`hidden_units` must be a sequence of layer widths, e.g. "
                f"(512, 512); got {hidden_units!r}."
            )
        self.hidden_units = tuple(check_positive_int(u, "hidden_units") for u in hidden_units)
        self.negative_slope = check_real(negative_slope, "negative_slope", low=0.0)
        self.epsilon = check_real(epsilon, "epsilon", low=0.0, low_open=True)
        self.stop_gradient = check_bool(stop_gradient, "stop_gradient")
        self.hidden = [
            keras.layers.Dense(units, name=f"hidden_{i}")
            for i, units in enumerate(self.hidden_units)
        ]
        self.score = keras.layers.Dense(1, name="score")

    def build(self, input_shape):
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise ValueError(
                "LossPredictionHead expects `inputs` (embeddings) of shape (batch, dim) "
                f"or (batch, ..., dim), e.g. per token; got {tuple(input_shape)}."
            )
        shape = tuple(input_shape)
        for layer in self.hidden:
            layer.build(shape)
            shape = shape[:-1] + (layer.units,)
        self.score.build(shape)
        self.built = True

    def call(self, embeddings):
        x = ops.stop_gradient(embeddings) if self.stop_gradient else embeddings
        for layer in self.hidden:
            x = ops.leaky_relu(layer(x), negative_slope=self.negative_slope)
        return ops.softplus(self.score(x))[..., 0] + self.epsilon

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_units": list(self.hidden_units),
                "negative_slope": self.negative_slope,
                "epsilon": self.epsilon,
                "stop_gradient": self.stop_gradient,
            }
        )
        return config
