"""The model that an export serves: a zoo task's named outputs, optionally
after its image converter."""

import keras

from ensemble_zoo.utils.validation import check_bool


class ServingModel(keras.Model):
    """Wraps a zoo task so that calling it returns the task's serving outputs.

    The exported graph of every format is this model's `call`: for an
    ensemble classifier the dict `probabilities` `(batch, classes)`,
    `member_logits` `(batch, members, classes)`, `total`, `aleatoric` and
    `epistemic` `(batch,)` (nats), in that order; each task names its own
    outputs (`task._serving_outputs`).

    Args:
        task: a zoo task with `_serving_outputs(inputs)`.
        include_preprocessing: bool. If `True`, the task preprocessor's
            image converter (resize, rescale) runs first, so the served
            model takes raw images as `task.predict` does. Defaults to
            `False` (as keras-hub exports): it takes what calling the task
            takes.

    Example:

    ```python
    import ensemble_zoo

    model = ensemble_zoo.models.EnsembleClassifier.from_preset(
        "deep_ensemble_vit_tiny_digits")
    serving = ensemble_zoo.export.ServingModel(model)
    x, _ = ensemble_zoo.datasets.load_arrays("digits", "test")
    outputs = serving(x[:4])
    sorted(outputs)
    # ['aleatoric', 'epistemic', 'member_logits', 'probabilities', 'total']
    ```
    """

    def __init__(self, task, include_preprocessing=False, **kwargs):
        super().__init__(**kwargs)
        if not hasattr(task, "_serving_outputs"):
            raise TypeError(
                "`task` must be a zoo task (it has `_serving_outputs`); got "
                f"a {type(task).__name__}."
            )
        self.task = task
        self.include_preprocessing = check_bool(include_preprocessing, "include_preprocessing")
        self.image_converter = None
        if include_preprocessing:
            preprocessor = getattr(task, "preprocessor", None)
            self.image_converter = getattr(preprocessor, "image_converter", None)
            if self.image_converter is None:
                raise ValueError(
                    "`include_preprocessing=True` needs a task whose "
                    "preprocessor has an image converter; "
                    f"{type(task).__name__} has "
                    + (
                        "no preprocessor."
                        if preprocessor is None
                        else f"a {type(preprocessor).__name__} without one."
                    )
                )

    def call(self, inputs):
        if self.image_converter is not None:
            inputs = self.image_converter(inputs)
        return self.task._serving_outputs(inputs)

    @property
    def serving_names(self):
        """The output names, in the order every format lists them."""
        return tuple(self.task._serving_output_names)
