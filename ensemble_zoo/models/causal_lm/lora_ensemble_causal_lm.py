"""LoRA-Ensemble for keras-hub causal language models (paper 002).

M low-rank adapters on the attention (and optionally MLP) projections of
one frozen decoder (Gemma, Gemma 2, Gemma 3 text, Llama, Llama 3, Mistral,
Qwen, Qwen 3): the members share every weight of
the keras-hub model, run in one batched pass, and keep one KV cache entry
each. Generation samples from the ensemble's predictive distribution and
reports, for every generated token, the ensemble's total, aleatoric and
epistemic uncertainty, computed inside the compiled decode loop.
"""

import numpy as np
import keras
import keras_hub
from keras import ops

from ensemble_zoo.models.causal_lm import adapter_files
from ensemble_zoo.models.causal_lm.input_checks import CausalLMLoopsMixin
from ensemble_zoo.models.causal_lm.input_checks import check_generate_call
from ensemble_zoo.models.causal_lm.input_checks import check_token_batch
from ensemble_zoo.models.method_backbone import _relative_paths
from ensemble_zoo.models.causal_lm.lora_ensemble_causal_lm_backbones import DEFAULT_TARGETS
from ensemble_zoo.models.causal_lm.lora_ensemble_causal_lm_backbones import TARGETS
from ensemble_zoo.models.causal_lm.lora_ensemble_causal_lm_backbones import target_site
from ensemble_zoo.models.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleGemma3Backbone,
    LoRAEnsembleGemmaBackbone,
    LoRAEnsembleLlama3Backbone,
    LoRAEnsembleLlamaBackbone,
    LoRAEnsembleMistralBackbone,
    LoRAEnsembleQwen3Backbone,
    LoRAEnsembleQwenBackbone,
)
from ensemble_zoo.models.causal_lm.token_loss_predictor import TokenLossPredictor
from ensemble_zoo.models.causal_lm.token_uncertainty import FIGURES
from ensemble_zoo.models.causal_lm.token_uncertainty import ensemble_log_probabilities
from ensemble_zoo.models.causal_lm.token_uncertainty import token_figures
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int

#: Samplers whose `__call__` is keras-hub's base loop (they only choose
#: the next token): their per-token figures come from the decode loop.
#: Others (beam, contrastive) run keras-hub's own loop on the ensemble's
#: log-probabilities, and their figures come from one teacher-forced pass.
LOOP_SAMPLERS = (
    keras_hub.samplers.GreedySampler,
    keras_hub.samplers.RandomSampler,
    keras_hub.samplers.TopKSampler,
    keras_hub.samplers.TopPSampler,
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class RepeatMembers(keras.layers.Layer):
    """`(batch, ...)` -> batch-major `(batch * members, ...)`: row
    `b * members + m` is member `m`'s copy of sample `b`.

    Args:
        num_members: int.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")

    def call(self, inputs):
        return ops.repeat(inputs, self.num_members, axis=0)

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        batch = None if batch is None else batch * self.num_members
        return (batch,) + tuple(input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SplitMembers(keras.layers.Layer):
    """Batch-major `(batch * members, ...)` -> `(batch, members, ...)`.

    Args:
        num_members: int.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")

    def call(self, inputs):
        return split_members(inputs, self.num_members)

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        batch = None if batch is None else batch // self.num_members
        return (batch, self.num_members) + tuple(input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members}


def split_members(x, num_members):
    """Batch-major `(batch * members, ...)` -> `(batch, members, ...)`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1, num_members) + tuple(shape[1:]))


def merge_members(x):
    """`(batch, members, ...)` -> batch-major `(batch * members, ...)`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1,) + tuple(shape[2:]))


def member_token_cross_entropy(y_true, y_pred):
    """Mean over members of the token cross-entropy, from member logits
    `(batch, members, tokens, vocabulary)` and token ids `(batch, tokens)`:
    `(batch, tokens)`, which the preprocessor's padding mask weights."""
    num_members = ops.shape(y_pred)[1]
    labels = ops.repeat(ops.expand_dims(ops.cast(y_true, "int32"), 1), num_members, axis=1)
    losses = keras.losses.sparse_categorical_crossentropy(
        labels, ops.cast(y_pred, "float32"), from_logits=True
    )
    return ops.mean(losses, axis=1)


class LoRAEnsembleCausalLM(CausalLMLoopsMixin, backend_utils.TorchParametersMixin):
    """LoRA-Ensemble on a keras-hub causal LM: M adapters, one frozen model.

    LoRA-Ensemble (Mühlematter et al., paper 002) gives each of `M`
    members its own low-rank update `B_m A_m` of the attention projections
    of one frozen pretrained model. Here the model is a keras-hub
    `CausalLM`; the members run batch-major (row `b * M + m`), so that one
    decode step computes every member and keras-hub's KV cache holds one
    entry per member, `(batch, members, layers, 2, length, kv_heads,
    head_dim)`.

    `model(inputs)` returns member logits `(batch, members, tokens,
    vocabulary)`. `generate()` samples from the ensemble's predictive
    distribution `p̄ = mean_m softmax(z_m)`: the sampler sees `log p̄` as
    its logits, so at `temperature` T it samples `p̄^(1/T)` renormalized,
    which is not the mean of tempered members (at T = 1 both are `p̄`).
    `generate(..., return_uncertainty=True)` also returns per-token
    uncertainty (see `generate`), and `score_uncertainty` the same figures
    for given text.

    Build one with `LoRAEnsembleCausalLM.from_keras_hub(causal_lm, ...)`,
    which picks the family's class (`LoRAEnsembleGemmaCausalLM`, ...) and
    never changes `causal_lm`. With `B = 0` (the initialization) every
    member is the given model, and `generate` reproduces its output.

    Args:
        backbone: a LoRA-Ensemble decoder backbone of the family
            (`LoRAEnsembleGemmaBackbone`, ...).
        preprocessor: optional keras-hub `CausalLMPreprocessor` of the
            family.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    gemma = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(
            vocabulary_size=50, num_layers=2, num_query_heads=4,
            num_key_value_heads=2, hidden_dim=32, intermediate_dim=64,
            head_dim=8,
        ),
        preprocessor=None,
    )
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        gemma, num_members=3, rank=2, seed=0
    )
    prompt = {
        "token_ids": np.array([[1, 5, 7, 0, 0, 0]]),
        "padding_mask": np.array([[1, 1, 1, 0, 0, 0]], bool),
    }
    ensemble(prompt).shape  # (1, 3, 6, 50): member logits
    out = ensemble.generate(prompt, stop_token_ids=None, return_uncertainty=True)
    out["epistemic"].shape  # (1, 6), zero outside the generated tokens
    ```
    """

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if not isinstance(backbone, self.backbone_cls):
            raise TypeError(
                f"`backbone` must be a {self.backbone_cls.__name__}; got "
                f"{type(backbone).__name__}. Build the model with "
                "LoRAEnsembleCausalLM.from_keras_hub(causal_lm, ...)."
            )
        num_members = backbone.num_members
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.repeat_members = RepeatMembers(num_members, name="repeat_members")
        self.split_members = SplitMembers(num_members, name="split_members")

        # === Functional Model ===
        inputs = backbone.input
        tiled = {name: self.repeat_members(x) for name, x in inputs.items()}
        hidden = backbone(tiled)
        logits = backbone.token_embedding(hidden, reverse=True)
        outputs = self.split_members(logits)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)
        self.generate_function = None
        self._flat_cache = False

    # === Construction ===

    @staticmethod
    def from_keras_hub(
        causal_lm,
        num_members,
        rank,
        targets=DEFAULT_TARGETS,
        lora_alpha=None,
        a_gain=10.0,
        seed=None,
    ):
        """A LoRA-Ensemble of `num_members` members on a keras-hub causal LM.

        The new model holds a copy of `causal_lm`'s backbone (same config
        and weights, frozen) with adapters on the attention projections,
        and `causal_lm`'s preprocessor; `causal_lm` itself is not changed.

        Args:
            causal_lm: a `keras_hub.models.GemmaCausalLM` (Gemma, Gemma 2),
                `Gemma3CausalLM` (text only), `LlamaCausalLM`,
                `Llama3CausalLM`, `MistralCausalLM`, `QwenCausalLM` or
                `Qwen3CausalLM`.
            num_members: int, the number of members M.
            rank: int, the adapters' rank, or a dict target -> rank.
            targets: projections to adapt, among `"query"`, `"key"`,
                `"value"`, `"attention_output"` (the default: these four,
                as the paper) and the MLP's `"mlp_gate"`, `"mlp_up"`,
                `"mlp_down"`.
            lora_alpha: optional float; updates are scaled by
                `lora_alpha / rank` (`None`: 1).
            a_gain: float, the Xavier-uniform gain of each `A_m` (the
                paper's 10; `B = 0` keeps every member equal to the model
                at the start whatever the gain).
            seed: optional int for reproducible adapters.

        Returns:
            A `LoRAEnsembleCausalLM` of the family's class.
        """
        cls = _task_class(causal_lm)
        backbone = cls.backbone_cls.from_backbone(
            causal_lm.backbone,
            num_members=num_members,
            rank=rank,
            targets=[targets] if isinstance(targets, str) else list(targets),
            lora_alpha=lora_alpha,
            a_gain=a_gain,
            seed=seed,
        )
        return cls(backbone=backbone, preprocessor=causal_lm.preprocessor)

    @staticmethod
    def from_keras_hub_lora(causal_lm, filepaths):
        """A LoRA-Ensemble whose members are keras-hub LoRA adapters.

        Each file, written by keras-hub's `Backbone.save_lora_weights`
        after `enable_lora(rank)` on `causal_lm`'s architecture, becomes
        one member; member `m` then equals `causal_lm` with file `m`'s
        adapter loaded (`backbone.load_lora_weights`), exactly. keras-hub
        factors each head of an attention projection separately (see
        `adapter_files`), so an imported adapter has rank `heads * rank`
        on those projections (`rank` on `Dense` ones).

        Args:
            causal_lm: the keras-hub causal LM the adapters were trained
                on (without `enable_lora`; it is not changed).
            filepaths: the `.lora.h5` files, one per member; all must
                adapt the same layers with the same rank.

        Returns:
            A `LoRAEnsembleCausalLM` of the family's class with
            `len(filepaths)` members.
        """
        cls = _task_class(causal_lm)
        filepaths = [filepaths] if isinstance(filepaths, str) else list(filepaths)
        if not filepaths:
            raise ValueError("`filepaths` must name at least one `.lora.h5` file.")
        files = [adapter_files.read_keras_hub_lora(path) for path in filepaths]
        layers = [
            layer for layer in causal_lm.backbone._flatten_layers(include_self=False)
            if layer.weights
        ]  # keras-hub's indexing of adapted layers
        blocks = causal_lm.backbone.transformer_layers
        where = {}
        for block_index, block in enumerate(blocks):
            for target, path in cls.backbone_cls.sites.items():
                parent, attribute = target_site(block, path)
                where[id(getattr(parent, attribute))] = (block_index, target)
        first_rank, first_layers = files[0]
        adapted = {}
        for index in sorted(first_layers):
            site = where.get(id(layers[index])) if index < len(layers) else None
            if site is None:
                raise ValueError(
                    f"'{filepaths[0]}' adapts layer {index}, which is not a "
                    f"projection LoRA-Ensemble adapts (targets {list(TARGETS)})."
                )
            adapted[site] = layers[index]
        for path, (rank, file_layers) in zip(filepaths[1:], files[1:]):
            if rank != first_rank or sorted(file_layers) != sorted(first_layers):
                raise ValueError(
                    f"'{path}' adapts other layers or has another rank than "
                    f"'{filepaths[0]}'; the members must share them."
                )
        targets = [t for t in TARGETS if any(site[1] == t for site in adapted)]
        if len(adapted) != len(blocks) * len(targets):
            raise ValueError(
                f"'{filepaths[0]}' adapts {sorted(set(s[1] for s in adapted))} "
                "in some blocks only; LoRA-Ensemble adapts the same "
                "projections in every block."
            )
        factors = {
            site: [
                adapter_files.keras_hub_lora_factors(layer, *file_layers[layers.index(layer)])
                for _, file_layers in files
            ]
            for site, layer in adapted.items()
        }
        ranks = {t: factors[(0, t)][0][0].shape[1] for t in targets}
        ensemble = LoRAEnsembleCausalLM.from_keras_hub(
            causal_lm, num_members=len(files), rank=ranks, targets=targets, seed=0
        )
        sites = [(b, t) for b in range(len(blocks)) for t in targets]
        for adapter, site in zip(ensemble.adapters, sites, strict=True):
            adapter.lora_a.assign(np.stack([a for a, _ in factors[site]]))
            adapter.lora_b.assign(np.stack([b for _, b in factors[site]]))
        return ensemble

    def member_causal_lm(self, member):
        """Member `member` as a plain keras-hub causal LM of the base
        family (its adapter merged into the kernels, `W0 + B_m A_m`), with
        this ensemble's preprocessor: to serve or compare one member alone.

        Args:
            member: int in `[0, num_members)`.

        Returns:
            A new `keras_hub.models.<Family>CausalLM`; this ensemble is not
            changed.
        """
        if not isinstance(member, (int, np.integer)) or isinstance(member, bool) or not (
            0 <= member < self.num_members
        ):
            raise ValueError(
                f"`member` must be an int in [0, {self.num_members}); got {member!r}."
            )
        base_cls = next(
            c for c in type(self).__mro__[1:]
            if issubclass(c, keras_hub.models.CausalLM)
            and not issubclass(c, LoRAEnsembleCausalLM)
        )
        base_backbone = type(self.backbone).base_cls()
        config = {
            k: v for k, v in self.backbone.get_config().items()
            if k not in self.backbone.method_config
        }
        backbone = base_backbone.from_config(config)
        sources = dict(zip(_relative_paths(self.backbone.weights), self.backbone.weights))
        for path, target in zip(_relative_paths(backbone.weights), backbone.weights):
            target.assign(sources[path])
        for block, source_block in zip(backbone.transformer_layers, self.backbone.transformer_layers):
            for target in self.backbone.targets:
                parent, attribute = target_site(block, self.backbone.sites[target])
                source_parent, _ = target_site(source_block, self.backbone.sites[target])
                adapter = getattr(source_parent, attribute)
                getattr(parent, attribute).kernel.assign(adapter.merged_kernel(member))
        return base_cls(backbone=backbone, preprocessor=self.preprocessor)

    def save_adapters(self, filepath):
        """Writes the members' adapters only (`*.lora_ensemble.h5`); the
        frozen model is not written. `load_adapters` reads them back into
        an ensemble built alike (`from_keras_hub` with the same
        arguments)."""
        adapter_files.save_adapters(self, filepath)

    def load_adapters(self, filepath):
        """Assigns the adapters of a file written by `save_adapters`; a
        `ValueError` names what differs when the file does not fit."""
        adapter_files.load_adapters(self, filepath)

    @property
    def num_members(self):
        return self.backbone.num_members

    @property
    def adapters(self):
        """The backbone's `LoRAEnsembleAdapter`s."""
        return self.backbone.adapters

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", **kwargs):
        """keras-hub's `CausalLM.compile`; the default loss is the mean over
        members of the token cross-entropy (`member_token_cross_entropy`),
        and there is no default metric (keras-hub's token accuracy expects
        one model's logits)."""
        if loss == "auto":
            loss = member_token_cross_entropy
        if weighted_metrics == "auto":
            weighted_metrics = None
        super().compile(
            optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs
        )

    # === Decoding with a KV cache ===

    def call_with_cache(self, token_ids, cache, cache_update_index, **kwargs):
        """The family's `call_with_cache` on every member.

        Args:
            token_ids: int `(batch, tokens)`.
            cache: the family's cache with a member axis after the batch:
                `(batch, members, layers, 2, length, kv_heads, head_dim)`
                (Gemma 3: per layer a `(key, value)` pair of `(batch,
                members, length, kv_heads, head_dim)`).
            cache_update_index: int, where `token_ids` start.
            **kwargs: the family's other arguments (Gemma 3's
                `cache_update_mask`, `padding_mask`), per prompt row.

        Returns:
            `(log_probs, hidden_states, cache)`: the ensemble's predictive
            log-probabilities `(batch, tokens, vocabulary)` (what
            keras-hub's samplers take as logits), the members' mean final
            hidden states `(batch, tokens, hidden_dim)` and the updated
            cache.
        """
        if self._flat_cache:
            return super().call_with_cache(token_ids, cache, cache_update_index, **kwargs)
        member_logits, hidden, cache = self._member_step(
            token_ids, cache, cache_update_index, **kwargs
        )
        return ensemble_log_probabilities(member_logits), ops.mean(hidden, axis=1), cache

    def _member_step(self, token_ids, cache, cache_update_index, **kwargs):
        """Member logits `(batch, members, tokens, vocabulary)`, member
        hidden states and the cache, from the family's `call_with_cache`."""
        repeat = self._repeat_rows
        self._flat_cache = True
        try:
            logits, hidden, cache = super().call_with_cache(
                repeat(token_ids),
                keras.tree.map_structure(merge_members, cache),
                cache_update_index,
                **{k: repeat(v) for k, v in kwargs.items()},
            )
        finally:
            self._flat_cache = False
        return self._split(logits), self._split(hidden), self._split(cache)

    def _build_cache(self, token_ids, *args, **kwargs):
        """The family's `_build_cache` on every member: `(mean hidden
        states, cache with a member axis)`."""
        repeat = self._repeat_rows
        self._flat_cache = True
        try:
            hidden, cache = super()._build_cache(
                repeat(token_ids),
                *[repeat(a) for a in args],
                **{k: repeat(v) for k, v in kwargs.items()},
            )
        finally:
            self._flat_cache = False
        return ops.mean(self._split(hidden), axis=1), self._split(cache)

    def _repeat_rows(self, x):
        """Each prompt row `num_members` times (batch-major); `None` stays."""
        return None if x is None else ops.repeat(x, self.num_members, axis=0)

    def _split(self, structure):
        m = self.num_members
        return keras.tree.map_structure(lambda x: split_members(x, m), structure)

    def _seed_cache(self, token_ids, padding_mask):
        """The member cache of a prompt batch (Gemma 3 also reads the
        prompt's padding mask)."""
        return self._build_cache(token_ids)[1]

    def _step_kwargs(self, padding_mask, index):
        """The family's extra `call_with_cache` arguments for the decode
        step at `index` (none but Gemma 3's)."""
        return {}

    def generate_step(self, inputs, stop_token_ids=None):
        """One compiled generation of a batch, with per-token figures.

        For the samplers of `LOOP_SAMPLERS` the decode loop computes, at
        each position, the member logits once and from them the next
        token and that token's figures (`token_figures`). Other samplers
        (beam, contrastive) run the family's loop on the ensemble's
        log-probabilities; their figures are then taken in one
        teacher-forced pass over the result.

        Returns:
            dict: `token_ids`, `padding_mask` (as keras-hub returns them)
            and `figures` `(batch, length, 4 + members [+ 1])`.
        """
        if type(self.sampler) not in LOOP_SAMPLERS:
            outputs = super().generate_step(inputs, stop_token_ids=stop_token_ids)
            outputs["figures"] = self._teacher_forced_figures(
                outputs["token_ids"], inputs["padding_mask"]
            )
            return outputs
        sampler = self.sampler
        token_ids, padding_mask = inputs["token_ids"], inputs["padding_mask"]
        cache = self._seed_cache(token_ids, padding_mask)
        row_lengths = ops.sum(ops.cast(padding_mask, "int32"), axis=-1)
        index = ops.cast(ops.min(row_lengths), "int32")
        mask = ops.cast(padding_mask, "bool")
        batch, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        figures = ops.zeros((batch, length, self._num_figures), "float32")

        def cond(prompt, cache, index, figures):
            if stop_token_ids is None:
                return ops.convert_to_tensor(True, dtype="bool")
            ends = _any_equal(prompt, stop_token_ids, ops.logical_not(mask))
            return ops.logical_not(ops.all(ops.any(ends, axis=-1)))

        def body(prompt, cache, index, figures):
            step = ops.slice(prompt, [0, index - 1], [batch, 1])
            member_logits, member_hidden, cache = self._member_step(
                step, cache, index - 1, **self._step_kwargs(padding_mask, index)
            )
            member_logits = member_logits[:, :, 0, :]
            probabilities = sampler.compute_probabilities(
                ensemble_log_probabilities(member_logits)
            )
            next_token = ops.cast(sampler.get_next_token(probabilities), prompt.dtype)
            next_token = ops.where(mask[:, index], prompt[:, index], next_token)
            prompt = ops.slice_update(prompt, [0, index], next_token[:, None])
            row = self._figures(member_logits, next_token, member_hidden[:, :, 0])
            figures = ops.slice_update(figures, [0, index, 0], row[:, None, :])
            return prompt, cache, index + 1, figures

        token_ids, _, _, figures = sampler.run_loop(
            cond,
            body,
            loop_vars=(token_ids, cache, index, figures),
            maximum_iterations=(length - index),
            model=self,
        )
        return {
            "token_ids": token_ids,
            "padding_mask": _output_padding_mask(token_ids, padding_mask, stop_token_ids),
            "figures": figures,
        }

    def _teacher_forced_figures(self, token_ids, padding_mask):
        """`(batch, length, figures)`: position `t > 0` holds the figures
        of token `t` given tokens `< t` (position 0: zeros)."""
        return self._chunked_figures(token_ids, ops.ones_like(padding_mask))

    def _chunked_figures(self, token_ids, padding_mask, chunk_size=128):
        """Teacher-forced figures `(batch, length, figures)` (position 0:
        zeros): the backbone runs once over the sequence, the vocabulary
        projection and the figures `chunk_size` positions at a time, so
        that the member logits `(batch, members, tokens, vocabulary)` are
        never held whole."""
        tiled = {
            "token_ids": self._repeat_rows(token_ids),
            "padding_mask": self._repeat_rows(padding_mask),
        }
        hidden = self.backbone(tiled, training=False)
        length = int(token_ids.shape[1])
        chunks = [ops.zeros((ops.shape(token_ids)[0], 1, self._num_figures), "float32")]
        for start in range(0, length - 1, chunk_size):
            stop = min(start + chunk_size, length - 1)
            part = hidden[:, start:stop]
            member_logits = self._split(self.backbone.token_embedding(part, reverse=True))
            chunks.append(
                self._figures(member_logits, token_ids[:, start + 1 : stop + 1], self._split(part))
            )
        return ops.concatenate(chunks, axis=1)

    @property
    def _num_figures(self):
        """Figures per position: `FIGURES`, one log-probability per member,
        and the predicted loss when a loss predictor is attached."""
        return len(FIGURES) + self.num_members + (self.loss_predictor is not None)

    def _figures(self, member_logits, tokens, member_hidden):
        """`token_figures`, and the attached loss predictor's prediction
        (the mean over members of its head on each member's hidden state)."""
        figures = token_figures(member_logits, tokens)
        if self.loss_predictor is None:
            return figures
        predicted = ops.mean(self.loss_predictor.head(member_hidden), axis=1)
        return ops.concatenate([figures, ops.expand_dims(predicted, -1)], axis=-1)

    # === Loss prediction ===

    @property
    def loss_predictor(self):
        """The attached `TokenLossPredictor`, or `None`."""
        return getattr(self, "_loss_predictor", None)

    def attach_loss_predictor(self, predictor):
        """Adds a trained `TokenLossPredictor`'s prediction to the figures
        of `generate` and `score_uncertainty` (`loss_prediction`, a fourth
        uncertainty: the predicted loss of each token, before it is seen).

        Its head reads each member's final hidden state and the members'
        predictions are averaged; with zero adapters that is the
        predictor on the frozen model. The predictor is kept by reference,
        not saved with the ensemble (save it on its own). `None` detaches.
        Attach it again after training it further: the compiled decode
        loop (JAX) holds the weights it had when it was compiled.

        Args:
            predictor: a `TokenLossPredictor` trained on this ensemble's
                base model (same backbone class and hidden size), or
                `None`.
        """
        if predictor is not None:
            if not isinstance(predictor, TokenLossPredictor):
                raise TypeError(
                    "`predictor` must be a TokenLossPredictor or None; got "
                    f"{type(predictor).__name__}."
                )
            base = type(self.backbone).base_cls()
            if type(predictor.backbone) is not base or (
                predictor.backbone.hidden_dim != self.backbone.hidden_dim
            ):
                raise ValueError(
                    f"`predictor` was built on a {type(predictor.backbone).__name__} "
                    f"of hidden_dim {predictor.backbone.hidden_dim}; this ensemble's "
                    f"base is a {base.__name__} of hidden_dim {self.backbone.hidden_dim}."
                )
        object.__setattr__(self, "_loss_predictor", predictor)
        self.generate_function = None  # the compiled loop changes

    # === Public entry points ===

    def generate(
        self,
        inputs,
        max_length=None,
        stop_token_ids="auto",
        strip_prompt=False,
        return_uncertainty=False,
    ):
        """keras-hub's `generate`, sampling from the ensemble.

        Args:
            inputs, max_length, stop_token_ids, strip_prompt: as for
                keras-hub's `CausalLM.generate`.
            return_uncertainty: bool. `False` (default): the same return
                value as keras-hub's (text, or token ids and padding
                mask). `True`: a dict of NumPy arrays with `output` (what
                `False` returns), `token_ids` and `padding_mask` `(batch,
                length)` (the whole sequences, prompt included, whatever
                `strip_prompt`), `generated_mask` (the generated tokens),
                and per position `total`, `aleatoric`, `epistemic` (nats),
                `log_prob` (the token under the ensemble) and
                `member_log_probs` `(batch, members, length)`, all zero
                outside `generated_mask`; and per sequence
                `log_likelihood` (sum of `log_prob`), `member_log_likelihoods`
                `(batch, members)`, `mean_total`, `mean_aleatoric`,
                `mean_epistemic` (means over the generated tokens) and
                `sequence_epistemic`, `log mean_m exp(l_m) - mean_m l_m`
                of the members' sequence log-likelihoods `l_m` (>= 0).
                With a loss predictor attached (`attach_loss_predictor`),
                also `loss_prediction` per position and its mean
                `mean_loss_prediction`.

        Returns:
            As described for `return_uncertainty`.
        """
        return_uncertainty = check_bool(return_uncertainty, "return_uncertainty")
        check_generate_call(self, inputs, max_length, stop_token_ids, strip_prompt)
        batches = []
        compiled = self.make_generate_function()

        def recording(batch, stop_token_ids=None):
            outputs = compiled(batch, stop_token_ids=stop_token_ids)
            batches.append(
                {
                    "prompt_mask": ops.convert_to_numpy(batch["padding_mask"]),
                    **{k: ops.convert_to_numpy(v) for k, v in outputs.items()},
                }
            )
            return {k: outputs[k] for k in ("token_ids", "padding_mask")}

        self.generate_function = recording
        try:
            output = super().generate(
                inputs, max_length=max_length, stop_token_ids=stop_token_ids,
                strip_prompt=strip_prompt,
            )
        except Exception as e:
            if not _is_out_of_memory(e):
                raise
            raise ValueError(
                f"Generation ran out of memory (`max_length`={max_length}): the "
                "KV cache holds (batch, members, layers, 2, max_length, "
                "key-value heads, head size) values. Pass a smaller "
                f"`max_length` or fewer prompts. ({type(e).__name__})"
            ) from e
        finally:
            self.generate_function = compiled
        if not return_uncertainty:
            return output
        merged = {
            key: np.concatenate([b[key] for b in batches], axis=0) for key in batches[0]
        }
        return {"output": output, **_uncertainty_outputs(merged, self.num_members)}

    def score_uncertainty(self, token_ids, padding_mask=None, chunk_size=128):
        """Per-token uncertainty of given text, teacher-forced.

        The backbone runs once over the sequence; the vocabulary
        projection and the figures are computed `chunk_size` positions at
        a time, so that the member logits `(batch, members, tokens,
        vocabulary)` are never held whole.

        Args:
            token_ids: int array `(batch, length)`.
            padding_mask: optional bool array `(batch, length)` (default:
                all true).
            chunk_size: int, positions per chunk.

        Returns:
            dict of NumPy arrays: `total`, `aleatoric`, `epistemic`,
            `log_prob` `(batch, length)` and `member_log_probs` `(batch,
            members, length)` (and `loss_prediction` with a loss
            predictor attached): position `t` holds the figures of token
            `t` given tokens `< t` (position 0 and padded positions hold 0).
        """
        chunk_size = check_positive_int(chunk_size, "chunk_size")
        token_ids, padding_mask = check_token_batch(
            token_ids, padding_mask, self.backbone.vocabulary_size, min_length=2
        )
        valid = np.array(padding_mask, bool)
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        padding_mask = ops.convert_to_tensor(padding_mask, "bool")
        figures = ops.convert_to_numpy(
            self._chunked_figures(token_ids, padding_mask, chunk_size)
        )
        valid[:, 0] = False
        return _token_outputs(figures, valid, self.num_members)

    def get_config(self):
        # Task's config (backbone, preprocessor, name, trainable).
        return keras_hub.models.Task.get_config(self)


def _is_out_of_memory(error):
    """Whether a backend error is an allocation failure (JAX's
    RESOURCE_EXHAUSTED, TensorFlow's ResourceExhaustedError, PyTorch's
    OutOfMemoryError or a failed CPU allocation)."""
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, MemoryError) or any(
        marker in text for marker in (
            "RESOURCE_EXHAUSTED", "ResourceExhausted", "OutOfMemory",
            "out of memory", "Out of memory", "can't allocate memory",
        )
    )


def _task_class(causal_lm):
    """The LoRA-Ensemble task class for a keras-hub causal LM."""
    cls = TASKS.get(type(causal_lm))
    if cls is None:
        raise TypeError(
            "`causal_lm` must be one of "
            f"{sorted(t.__name__ for t in TASKS)}; got "
            f"{type(causal_lm).__name__}."
        )
    if getattr(causal_lm.backbone, "vision_encoder", None) is not None:
        raise ValueError(
            f"`causal_lm` is a multimodal {type(causal_lm).__name__} (its backbone "
            "has a vision encoder); LoRA-Ensemble supports text-only models "
            "(`vision_encoder=None`): image inputs would be dropped."
        )
    if any(
        getattr(layer, "lora_enabled", False)
        for layer in causal_lm.backbone._flatten_layers(include_self=False)
    ):
        raise ValueError(
            "`causal_lm` has keras-hub LoRA enabled (`enable_lora`). Pass the "
            "model without it; save its adapter with `save_lora_weights` and "
            "import it with `LoRAEnsembleCausalLM.from_keras_hub_lora`."
        )
    return cls


def _any_equal(inputs, values, padding_mask):
    """Whether `inputs` equals any of `values` where `padding_mask` is true."""
    output = ops.equal(inputs, values[0])
    for value in values[1:]:
        output = ops.logical_or(output, ops.equal(inputs, value))
    return ops.logical_and(output, padding_mask)


def _output_padding_mask(token_ids, padding_mask, stop_token_ids):
    """keras-hub's output padding mask: everything up to and including the
    first stop token after the prompt."""
    if stop_token_ids is None:
        return ops.ones_like(token_ids, dtype="bool")
    ends = ops.cast(
        _any_equal(token_ids, stop_token_ids, ops.logical_not(ops.cast(padding_mask, "bool"))),
        "int32",
    )
    overflow = ops.cumsum(ends, axis=-1) - ends
    return ops.logical_not(ops.cast(overflow, "bool"))


def _token_outputs(figures, valid, num_members):
    figures = np.where(valid[..., None], figures, 0.0).astype("float32")
    out = {name: figures[..., i] for i, name in enumerate(FIGURES)}
    members = figures[..., len(FIGURES) : len(FIGURES) + num_members]
    out["member_log_probs"] = np.moveaxis(members, -1, 1)
    if figures.shape[-1] > len(FIGURES) + num_members:
        out["loss_prediction"] = figures[..., -1]
    return out


def _uncertainty_outputs(batch, num_members):
    generated = np.logical_and(
        np.logical_not(batch["prompt_mask"].astype(bool)), batch["padding_mask"].astype(bool)
    )
    out = {
        "token_ids": batch["token_ids"],
        "padding_mask": batch["padding_mask"].astype(bool),
        "generated_mask": generated,
        **_token_outputs(batch["figures"], generated, num_members),
    }
    count = np.maximum(generated.sum(axis=1), 1)
    member_ll = out["member_log_probs"].sum(axis=-1)
    out["log_likelihood"] = out["log_prob"].sum(axis=-1)
    out["member_log_likelihoods"] = member_ll
    for name in ("total", "aleatoric", "epistemic", "loss_prediction"):
        if name not in out:
            continue
        out[f"mean_{name}"] = out[name].sum(axis=-1) / count
    peak = member_ll.max(axis=1, keepdims=True)
    log_mean = np.log(np.mean(np.exp(member_ll - peak), axis=1)) + peak[:, 0]
    out["sequence_epistemic"] = np.maximum(log_mean - member_ll.mean(axis=1), 0.0)
    return out


class _Gemma3Steps:
    """Gemma 3's cache seeding reads the prompt's padding mask, and each
    decode step its `cache_update_mask` (prompt positions keep their
    cache), as `Gemma3CausalLM.generate_step` passes them."""

    def _seed_cache(self, token_ids, padding_mask):
        return self._build_cache(token_ids, None, None, padding_mask, None)[1]

    def _step_kwargs(self, padding_mask, index):
        batch = ops.shape(padding_mask)[0]
        not_prompt = ops.logical_not(ops.cast(padding_mask, "bool"))
        return {"cache_update_mask": ops.slice(not_prompt, [0, index - 1], [batch, 1])}


def _task(name, base, backbone_cls, mixins=()):
    cls = type(
        name,
        (*mixins, LoRAEnsembleCausalLM, base),
        {
            "backbone_cls": backbone_cls,
            "__doc__": (
                f"LoRA-Ensemble on a `keras_hub.models.{base.__name__}`; see "
                "`LoRAEnsembleCausalLM`.\n\n    Args:\n        backbone: a "
                f"`{backbone_cls.__name__}`.\n        preprocessor: optional, "
                f"the family's preprocessor.\n        **kwargs: other "
                "`keras_hub.models.Task` arguments.\n"
            ),
            "__module__": __name__,
        },
    )
    return keras.saving.register_keras_serializable(package="ensemble_zoo")(cls)


LoRAEnsembleGemmaCausalLM = _task(
    "LoRAEnsembleGemmaCausalLM", keras_hub.models.GemmaCausalLM, LoRAEnsembleGemmaBackbone
)
LoRAEnsembleGemma3CausalLM = _task(
    "LoRAEnsembleGemma3CausalLM",
    keras_hub.models.Gemma3CausalLM,
    LoRAEnsembleGemma3Backbone,
    mixins=(_Gemma3Steps,),
)
LoRAEnsembleLlamaCausalLM = _task(
    "LoRAEnsembleLlamaCausalLM", keras_hub.models.LlamaCausalLM, LoRAEnsembleLlamaBackbone
)
LoRAEnsembleLlama3CausalLM = _task(
    "LoRAEnsembleLlama3CausalLM", keras_hub.models.Llama3CausalLM, LoRAEnsembleLlama3Backbone
)
LoRAEnsembleMistralCausalLM = _task(
    "LoRAEnsembleMistralCausalLM", keras_hub.models.MistralCausalLM, LoRAEnsembleMistralBackbone
)
LoRAEnsembleQwenCausalLM = _task(
    "LoRAEnsembleQwenCausalLM", keras_hub.models.QwenCausalLM, LoRAEnsembleQwenBackbone
)
LoRAEnsembleQwen3CausalLM = _task(
    "LoRAEnsembleQwen3CausalLM", keras_hub.models.Qwen3CausalLM, LoRAEnsembleQwen3Backbone
)

#: keras-hub causal LM class -> the LoRA-Ensemble task class for it.
TASKS = {
    keras_hub.models.GemmaCausalLM: LoRAEnsembleGemmaCausalLM,
    keras_hub.models.LlamaCausalLM: LoRAEnsembleLlamaCausalLM,
    keras_hub.models.Llama3CausalLM: LoRAEnsembleLlama3CausalLM,
    keras_hub.models.MistralCausalLM: LoRAEnsembleMistralCausalLM,
    keras_hub.models.QwenCausalLM: LoRAEnsembleQwenCausalLM,
    keras_hub.models.Gemma3CausalLM: LoRAEnsembleGemma3CausalLM,
    keras_hub.models.Qwen3CausalLM: LoRAEnsembleQwen3CausalLM,
}
