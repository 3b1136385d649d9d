import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.losses import EnsembleSparseCategoricalCrossentropy
from ensemble_zoo.metrics import EnsembleAccuracy
from ensemble_zoo.models.dict_inputs import dict_input_signature
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.models.member_passes import resolve_member_batching
from ensemble_zoo.models.member_passes import run_members_sequentially
from ensemble_zoo.models.zoo_task import ZooTask
from ensemble_zoo.ops.uncertainty import _predictive_probabilities
from ensemble_zoo.ops.uncertainty import _uncertainty_decomposition
from ensemble_zoo.utils import backend as backend_utils


def preprocessor_of(model):
    """The preprocessor of a keras-hub task; `None` for other models."""
    if isinstance(model, keras_hub.models.Task):
        return model.preprocessor
    return None


def _is_serialized_object(value):
    return isinstance(value, dict) and "class_name" in value and "config" in value


def _deserialize_nested(value):
    """Serialized Keras objects (and lists of them) in a config, deserialized."""
    if isinstance(value, list) and value and all(map(_is_serialized_object, value)):
        return [keras.saving.deserialize_keras_object(v) for v in value]
    if _is_serialized_object(value):
        return keras.saving.deserialize_keras_object(value)
    return value


class EnsembleClassifier(ZooTask):
    """Base class of every ensemble classifier in the zoo.

    A zoo classifier is a keras-hub task built the way keras-hub builds its
    own (`keras_hub.models.ViTImageClassifier` is the model): a functional
    model on its backbone whose config is its constructor arguments. A
    subclass creates its layers, builds the graph from `backbone.input` to
    per-member logits `(batch, members, classes)` (`member_logits` makes
    them float32 under mixed precision), and calls
    `keras_hub.models.Task.__init__(self, inputs=..., outputs=..., **kwargs)`;
    it sets `num_members` and `num_classes`. The base class provides, for
    every method alike:

    - `compile()` defaults: `EnsembleSparseCategoricalCrossentropy` (mean of
      the members' cross-entropies), `EnsembleAccuracy` (accuracy of the
      averaged prediction) and AdamW(1e-3); `compile=False` skips them, as
      for every keras-hub task;
    - input and label checks in `fit`, `evaluate`, `predict` and the
      `*_on_batch` methods, before Keras compiles a step;
    - `predict_uncertainty(x)`: predictive probabilities plus the
      total / aleatoric / epistemic decomposition
      (`ensemble_zoo.ops.uncertainty_decomposition`);
    - `export(path, format=...)`: a SavedModel, ONNX, LiteRT, `.pt2` or
      OpenVINO artifact (each backend writes its formats) serving
      `probabilities`, `member_logits`, `total`, `aleatoric` and
      `epistemic`, verified in its own runtime (`ensemble_zoo.export`);
    - `from_preset(name)` / `save_to_preset(directory)`.

    A single model is an ensemble with `num_members == 1`.

    The class holds behaviour only (no Keras base): a classifier lists it
    before its keras-hub task class,
    `class HydraImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier)`.
    Keras makes a class functional by rewriting the bases of every class
    above it, once per path; a second path to `keras_hub.models.Task`
    (through this class) would make it rewrite `Functional`'s own bases.

    Image classifiers are also `keras_hub.models.ImageClassifier`s and text
    classifiers `TextClassifier`s, with `backbone` and `preprocessor`
    properties. Without a preprocessor, `fit`, `predict` and `evaluate`
    take arrays, datasets and `keras.utils.PyDataset`s exactly as
    `keras.Model`'s do; with one, they preprocess their inputs first, as
    every keras-hub task does.
    """

    # === Config ===

    def get_config(self):
        """`keras_hub.models.Task`'s config (backbone, preprocessor, name);
        subclasses add their constructor arguments. keras-hub's
        `ImageClassifier` / `TextClassifier` configs describe their own
        generic heads and are skipped, as their constructors are."""
        return keras_hub.models.Task.get_config(self)

    @classmethod
    def from_config(cls, config):
        """Deserializes the Keras objects in `config` (backbones, member
        models, heads, the preprocessor), then calls the constructor."""
        config = {key: _deserialize_nested(value) for key, value in config.items()}
        if config.get("trainable") is True:
            # Configs of the zoo's earlier subclassed tasks hold the default
            # `"trainable": true`; passed on, Functional would set every
            # sublayer trainable and unfreeze a LoRA-Ensemble's base.
            del config["trainable"]
        return cls(**config)

    @property
    def member_input_shape(self):
        """The input shape of one example (without the batch axis)."""
        if "_member_input_shape" in self.__dict__:
            return self.__dict__["_member_input_shape"]
        if isinstance(self.input, dict):
            return None  # dict inputs: `_check_inputs` checks them
        return tuple(self.inputs[0].shape[1:])

    @member_input_shape.setter
    def member_input_shape(self, value):
        object.__setattr__(self, "_member_input_shape", None if value is None else tuple(value))

    def __call__(self, inputs, *args, **kwargs):
        # The zoo's input checks run before Keras' input-spec check too:
        # Keras names a wrong image size with a squeezed shape ("expected
        # shape=(None, 8, 8, 1), found shape=(2, 16, 16)" for 16 x 16 x 1).
        self._check_inputs(inputs)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        """The functional graph (`__call__` checked the inputs: Keras would
        add a missing channel axis or cast integer images silently)."""
        with backend_utils.zoo_workarounds():  # see ensemble_zoo.utils.workarounds
            return self._run_graph(inputs, training=training, mask=mask, **kwargs)

    def _run_graph(self, inputs, training=None, **kwargs):
        """Runs the functional graph: once, or for a member-tiled task at
        inference, once per member (`member_batching`)."""
        graph = super().call
        batching = self.member_batching
        if batching is None or training or resolve_member_batching(batching) == "tiled":
            return graph(inputs, training=training, **kwargs)
        if not isinstance(tuple(keras.tree.flatten(inputs)[0].shape)[0], int):
            # A batch of unknown size (a SavedModel's `serve`, traced for
            # any batch) runs the tiled pass too.
            return graph(inputs, training=training, **kwargs)
        return run_members_sequentially(
            lambda: graph(inputs, training=False, **kwargs), inputs, self.num_members
        )

    # A class default, so that `dir()` lists it whether or not an instance
    # set its own (keras-hub's harness compares `dir` of revived models).
    _member_batching = None

    @property
    def member_batching(self):
        """How a member-tiled task (LoRA-Ensemble, BatchEnsemble,
        Masksembles on a ViT or BERT backbone) runs its members at
        inference: `"auto"`, `"tiled"` or `"sequential"`
        (`ensemble_zoo.models.member_passes`); `None` for the other tasks,
        which run their graph as built."""
        return self.__dict__.get("_member_batching")

    @member_batching.setter
    def member_batching(self, value):
        if self.member_batching is None:
            raise AttributeError(
                f"{type(self).__name__} runs its graph as built: only the member-tiled "
                "tasks (LoRA-Ensemble, BatchEnsemble, Masksembles on a ViT or BERT) "
                "take a `member_batching`."
            )
        object.__setattr__(self, "_member_batching", check_member_batching(value))
        # Compiled predict / evaluate functions hold the previous choice.
        for name in ("predict_function", "test_function"):
            if getattr(self, name, None) is not None:
                setattr(self, name, None)

    def _set_member_batching(self, value):
        """Sets a member-tiled task's `member_batching` (its constructor)."""
        object.__setattr__(self, "_member_batching", check_member_batching(value))

    # === Training defaults ===

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Configures training; `"auto"` picks the ensemble defaults.

        Args:
            optimizer: `"auto"` means `keras.optimizers.AdamW(1e-3)`.
            loss: `"auto"` means `EnsembleSparseCategoricalCrossentropy()`.
            metrics: `"auto"` means `[EnsembleAccuracy()]`.
            **kwargs: passed to `keras.Model.compile` (e.g. `jit_compile`).
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(learning_rate=1e-3)
        if loss == "auto":
            loss = EnsembleSparseCategoricalCrossentropy()
        if metrics == "auto":
            metrics = [EnsembleAccuracy()]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    # === Uncertainty ===

    def predict_uncertainty(self, x, batch_size=None, verbose=0):
        """Predicts with the ensemble and decomposes its uncertainty.

        Args:
            x: inputs, as for `predict` (array or `tf.data.Dataset`; a
                dataset of `(x, y)` pairs has its labels ignored).
            batch_size: optional int, as for `predict`.
            verbose: verbosity of `predict`. Defaults to `0`.

        Returns:
            dict of NumPy arrays: `"probabilities"` `(batch, classes)` (mean
            of member softmaxes), `"member_logits"` `(batch, members,
            classes)`, and `"total"`, `"aleatoric"`, `"epistemic"`, each
            `(batch,)` in nats.
        """
        logits = self.predict(x, batch_size=batch_size, verbose=verbose)
        return self._uncertainty_outputs(logits, as_numpy=True)

    @staticmethod
    def _uncertainty_outputs(logits, as_numpy=False):
        outputs = {
            "probabilities": _predictive_probabilities(logits),
            "member_logits": ops.convert_to_tensor(logits),
        }
        outputs.update(_uncertainty_decomposition(logits))
        if as_numpy:
            outputs = {k: np.asarray(ops.convert_to_numpy(v)) for k, v in outputs.items()}
        return outputs

    # === Export ===

    def _export_input_signature(self, format=None):
        """The exports' input signature: images `(batch, ...)` as float32,
        or for a model taking a dict (wrapped keras-hub text classifiers)
        the same keys and dtypes, `(batch, tokens)`. Tokens are dynamic
        under TensorFlow (LiteRT aside, as for the BERT tasks); elsewhere
        exports take them padded to the wrapped backbone's
        `max_sequence_length` where it has one."""
        if isinstance(self.input, dict):
            return [dict_input_signature(self, format)]
        return [
            keras.InputSpec(
                shape=(None,) + tuple(self.member_input_shape), dtype="float32", name="images"
            )
        ]

    # The outputs of every exported format, in this order.
    _serving_output_names = ("probabilities", "member_logits", "total", "aleatoric", "epistemic")

    def _serving_outputs(self, inputs):
        """What an export serves for `inputs` (what calling the model takes)."""
        return self._uncertainty_outputs(self(inputs, training=False))

    # === Presets ===

    @classmethod
    def from_preset(cls, preset, load_weights=True, dtype=None, preprocessor="auto", **kwargs):
        """Loads a shipped preset (by name) or a preset directory.

        Args:
            preset: str, a name from `ensemble_zoo.presets.list_presets()`
                or the path of a directory written by `save_to_preset`.
            load_weights: bool. If `False`, the architecture is built with
                fresh random weights. Defaults to `True`.
            dtype: optional dtype policy for every layer, e.g.
                `"mixed_bfloat16"` or `"mixed_float16"`. Defaults to the
                global policy (`keras.config.set_dtype_policy`).
            preprocessor: `"auto"` (default) keeps the preset's
                preprocessor, so `predict` takes raw images (the trained
                digits presets: the digits' 0-16 pixel scale, any size);
                `None` drops it (`predict` then takes what `model(x)`
                takes: images in [0, 1]); a keras-hub preprocessor
                replaces it. As keras-hub's `from_preset` argument.
            **kwargs: other constructor arguments that replace the preset's
                (e.g. `compile=False`), as keras-hub's `from_preset` takes
                them.

        Loading uses Keras safe mode (no arbitrary code). A damaged preset
        raises `ensemble_zoo.presets.PresetError` (a `ValueError`) naming
        the file and the problem. Calling `from_preset` on a subclass
        checks that the preset holds that class.
        """
        from ensemble_zoo.presets import load_preset

        return load_preset(
            preset,
            cls=cls,
            load_weights=load_weights,
            dtype=dtype,
            preprocessor=preprocessor,
            **kwargs,
        )

    def save_to_preset(self, preset_dir, metadata=None, include_weights=True):
        """Writes a preset in keras-hub's layout (`config.json` = the
        backbone, `model.weights.h5`, `task.json`, `task.weights.h5`, the
        preprocessor's files, `metadata.json`; see
        `ensemble_zoo.presets.save_preset`), which
        `keras_hub.models.ImageClassifier.from_preset` (or
        `TextClassifier`) loads as this class and `keras_hub.upload_preset`
        publishes.

        Args:
            preset_dir: str, the directory to write (created if needed).
            metadata: optional dict merged into `metadata.json` (for example
                a description and evaluation numbers).
            include_weights: bool. `False` writes an architecture preset
                (no weights file; `from_preset` initializes randomly).
        """
        from ensemble_zoo.presets import save_preset

        save_preset(self, preset_dir, metadata=metadata, include_weights=include_weights)
