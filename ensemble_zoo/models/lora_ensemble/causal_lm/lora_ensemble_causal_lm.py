"""LoRA-Ensemble for keras-hub causal language models (Mühlematter et al.,
"LoRA-Ensemble: Efficient Uncertainty Modelling for Self-Attention
Networks").

M low-rank adapters on the attention (and optionally MLP) projections of
one frozen keras-hub decoder, of any family that keras-hub builds from
its standard layers (`families`): the members share every weight of the
keras-hub model, run in one batched pass, and keep one KV cache entry
each. Generation samples from the ensemble's predictive distribution and
reports, for every generated token, the ensemble's total, aleatoric and
epistemic uncertainty, computed inside the compiled decode loop
(`decode_engine`).

This module builds the model (construction, conversions, adapters); its
decoding and uncertainty are `EnsembleCausalLM`'s (`ensemble_causal_lm`).
The members are batch-major rows (`ensemble_zoo.ops.tile_members`), the
adapters `decoder_adapters`', the figures `token_uncertainty`'s,
`generate`'s input handling `generation`'s and what it returns
`generation_outputs`', the teacher-forced figures `teacher_forcing`'s,
one member or the base as a plain model `member_models`', sampling-based
estimators `sample_uncertainty`'s.
"""

import warnings

import keras
import keras_hub
import numpy as np

from ensemble_zoo.layers.member_tiling import TileMembers
from ensemble_zoo.layers.member_tiling import UntileMembers
from ensemble_zoo.models.lora_ensemble import adapter_files
from ensemble_zoo.models.lora_ensemble.causal_lm import families
from ensemble_zoo.models.lora_ensemble.causal_lm import member_models
from ensemble_zoo.models.lora_ensemble.causal_lm import trunk_step
from ensemble_zoo.models.lora_ensemble.causal_lm.decoder_adapters import LoRAEnsembleDecoderBackbone
from ensemble_zoo.models.lora_ensemble.causal_lm.decoder_adapters import factor_layers
from ensemble_zoo.models.lora_ensemble.causal_lm.ensemble_causal_lm import EnsembleCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm.families import DEFAULT_TARGETS
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.model_copies import copy_preprocessor


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleCausalLM(EnsembleCausalLM, keras_hub.models.CausalLM):
    """LoRA-Ensemble on a keras-hub causal LM: M adapters, one frozen model.

    LoRA-Ensemble (Mühlematter et al., "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks") gives each of `M`
    members its own low-rank update `B_m A_m` of the attention projections
    of one frozen pretrained model. Here the model is a keras-hub
    `CausalLM` of any family keras-hub builds from its standard layers
    (Gemma, Llama, Mistral, Qwen, GPT-2, OPT, Phi-3, Mixtral, ...;
    `docs/methods/causal_lm.md` lists them): the adapters go on the
    projections found by layer type and role (`families.decoder_sites`).
    The members run batch-major (row `b * M + m`), so that one decode step
    computes every member and keras-hub's KV cache holds one entry per
    member, `(batch, members, layers, 2, length, kv_heads, head_dim)`.

    `model(inputs)` returns member logits `(batch, members, tokens,
    vocabulary)`. `generate()` samples from the ensemble's predictive
    distribution `p̄ = mean_m softmax(z_m)`: the sampler sees `log p̄` as
    its logits, so at `temperature` T it samples `p̄^(1/T)` renormalized,
    which is not the mean of tempered members (at T = 1 both are `p̄`).
    `generate(..., return_uncertainty=True)` also returns per-token
    uncertainty (see `generate`), and `score_uncertainty` the same figures
    for given text.

    Decoding runs the zoo's decode engine (`decode_engine`): one pure step
    over the family's own `call_with_cache` on the members' batch-major
    rows (`call_with_cache` and `_build_cache` are those of the keras-hub
    causal LM of the backbone's family, on those rows), compiled as one
    XLA program under JAX and TensorFlow and, with
    `compile(jit_compile=True)`, as one `torch.compile` graph per step
    under PyTorch (eager otherwise).

    The constructor puts the adapters on `backbone` in place, as keras-hub's
    `enable_lora` does (a backbone that holds the same adapters already is
    shared, as keras-hub tasks share one); `from_keras_hub(causal_lm, ...)`
    builds the ensemble on a copy and never changes `causal_lm`. With
    `B = 0` (the initialization) every member is the given model, and
    `generate` reproduces its output.

    Args:
        backbone: the backbone of a keras-hub causal LM (`GemmaBackbone`,
            `LlamaBackbone`, `GPT2Backbone`, ...), text only.
        num_members: int, the number of members M.
        rank: int, the adapters' rank r, or a dict target -> rank (an
            imported keras-hub LoRA needs one rank per target).
        targets: projections to adapt, among `"query"`, `"key"`, `"value"`,
            `"attention_output"` (the paper's four, the default) and the
            MLP's `"mlp_gate"`, `"mlp_up"` and `"mlp_down"`, or a mixture
            of experts' `"experts"` (every expert of every stacked kernel,
            `ez.layers.LoRAEnsembleExperts`). In a family that fuses the
            query, key and value projections (GPT-NeoX) the three share
            one adapter on the fused projection.
        lora_alpha: optional float; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of each `A_m` (the paper's
            10; `B = 0` keeps every member equal to the model at the start
            whatever the gain).
        seed: optional int; adapter `i` uses seeds `seed + i * M + m`.
        blob: `None`, or BLoB's settings (see `from_keras_hub`).
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

    backbone_cls = LoRAEnsembleDecoderBackbone

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if not isinstance(backbone, LoRAEnsembleDecoderBackbone):
            raise TypeError(
                "`backbone` must be a LoRAEnsembleDecoderBackbone; got "
                f"{type(backbone).__name__}. Build the model with "
                "LoRAEnsembleCausalLM.from_keras_hub(causal_lm, ...)."
            )
        keras_hub_cls = families.causal_lm_class(backbone.decoder)
        family = families.family(keras_hub_cls)
        # The family's own `call_with_cache` and `_build_cache`, on the
        # adapted decoder: a keras-hub causal LM that the ensemble calls
        # but does not track (its variables are the backbone's).
        family_causal_lm = keras_hub_cls(backbone=backbone.decoder, preprocessor=None)
        num_members = backbone.num_members
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        # Batch-major member rows, as the decode engine keeps them.
        self.repeat_members = TileMembers(num_members, "batch_major", name="repeat_members")
        self.split_members = UntileMembers(num_members, "batch_major", name="split_members")

        # === Functional Model ===
        inputs = backbone.input
        tiled = {name: self.repeat_members(x) for name, x in inputs.items()}
        hidden = backbone(tiled)
        logits = backbone.token_embedding(hidden, reverse=True)
        outputs = self.split_members(logits)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)
        self.generate_function = None
        object.__setattr__(self, "_family", family)
        object.__setattr__(self, "_family_causal_lm", family_causal_lm)
        object.__setattr__(self, "_trunk_blocks", trunk_step.shared_blocks(backbone, family))
        if backbone.adapted_blocks and backbone.adapted_blocks[0] and not self._trunk_blocks:
            refusal = trunk_step.trunk_refusal(backbone, family)
            warnings.warn(
                f"The blocks below the lowest adapted one ({backbone.adapted_blocks[0]}) "
                f"run on every member's rows, not once as a shared trunk: "
                f"{keras_hub_cls.__name__}: {refusal}.",
                stacklevel=2,
            )

    @property
    def num_members(self):
        return self.backbone.num_members

    @property
    def trunk_blocks(self):
        """How many decoder blocks run once per input row: those below
        the lowest adapted block (`layers`), where the family allows; 0
        otherwise. The decode holds their KV cache once (`trunk_step`);
        the forward pass of `call`, `fit` and teacher-forced scoring runs
        them on one copy of the rows (`member_forward`)."""
        return self._trunk_blocks

    @property
    def targets(self):
        return self.backbone.targets

    @property
    def rank(self):
        return self.backbone.rank

    @property
    def method_config(self):
        """The LoRA-Ensemble arguments: `num_members`, `rank`, `targets`,
        `lora_alpha`, `a_gain`, `seed` and `layers`."""
        config = self.backbone.get_config()
        return {k: config[k] for k in adapter_files.CAUSAL_LM_BUILD_ARGUMENTS}

    @property
    def base_backbone_class(self):
        """The keras-hub backbone class the adapters sit on."""
        return type(self.backbone.decoder)

    @property
    def family(self):
        """How the decode engine seeds and steps the cache (`families.Family`)."""
        return self._family

    @property
    def keras_hub_class(self):
        """The keras-hub causal-LM class of the backbone's family."""
        return type(self._family_causal_lm)

    def call_with_cache(self, *args, **kwargs):
        """The family's keras-hub `call_with_cache` on the members' rows."""
        return self._family_causal_lm.call_with_cache(*args, **kwargs)

    def _build_cache(self, *args, **kwargs):
        """The family's keras-hub `_build_cache` on the members' rows."""
        return self._family_causal_lm._build_cache(*args, **kwargs)

    # === Construction ===

    @classmethod
    def from_preset(
        cls, preset, load_weights=True, dtype=None, preprocessor="auto", base=None, **kwargs
    ):
        """Loads a LoRA-Ensemble causal-LM preset: a shipped name (e.g.
        `"lora_ensemble_gemma_tiny_arithmetic"`), a directory written by
        `save_to_preset` or a hub handle, offline for shipped names; or
        an adapter preset (`ensemble_zoo.presets.save_adapter_preset`,
        e.g. `"lora_ensemble_gemma3_270m_arithmetic"`) on its base model.

        One class serves every family (the family is the backbone's); the
        old per-family names (`LoRAEnsembleGemmaCausalLM`, ...) are
        aliases of it. To put an ensemble on a
        keras-hub preset (`"gemma_2b_en"`), load that model with keras-hub
        and call `from_keras_hub`.

        Args:
            preset: str, a preset name, directory or hub handle.
            load_weights: bool. `False` builds the architecture with fresh
                weights. Defaults to `True`.
            dtype: optional dtype policy for every layer. Defaults to the
                global policy.
            preprocessor: `"auto"` (default) keeps the preset's
                preprocessor; `None` drops it; a keras-hub preprocessor
                replaces it.
            base: an adapter preset's base model (a keras-hub causal LM,
                or its preset name, directory or hub handle); `None`
                loads the one its metadata names. Only for adapter
                presets.
            **kwargs: other constructor arguments that replace the
                preset's.
        """
        from ensemble_zoo.presets import load_preset

        return load_preset(preset, cls, load_weights, dtype, preprocessor, base, **kwargs)

    @classmethod
    def from_keras_hub(
        cls,
        causal_lm,
        num_members,
        rank,
        targets=DEFAULT_TARGETS,
        lora_alpha=None,
        a_gain=10.0,
        seed=None,
        blob=None,
        layers=None,
    ):
        """A LoRA-Ensemble of `num_members` members on a keras-hub causal LM.

        The new model holds a copy of `causal_lm`'s backbone (same config
        and weights, frozen) with adapters on the attention projections,
        and a copy of `causal_lm`'s preprocessor (sharing its tokenizer), so
        that setting the ensemble's `preprocessor.sequence_length` leaves
        `causal_lm` as it is; `causal_lm` itself is not changed.

        Args:
            causal_lm: a keras-hub `CausalLM`, text only, of a family the
                ensemble supports (`docs/methods/causal_lm.md`; a refused
                family is a `ValueError` that says why).
            num_members: int, the number of members M.
            rank: int, the adapters' rank, or a dict target -> rank.
            targets: projections to adapt, among `"query"`, `"key"`,
                `"value"`, `"attention_output"` (the default: these four,
                as the paper) and the MLP's `"mlp_gate"`, `"mlp_up"`,
                `"mlp_down"`, or a mixture of experts' `"experts"`.
            lora_alpha: optional float; updates are scaled by
                `lora_alpha / rank` (`None`: 1).
            a_gain: float, the Xavier-uniform gain of each `A_m` (the
                paper's 10; `B = 0` keeps every member equal to the model
                at the start whatever the gain).
            seed: optional int for reproducible adapters.
            blob: `None` (default), or BLoB's settings (a dict with
                `kl_weight`, optionally `eps` and `prior_std`): each
                `A_m` is a learned Gaussian, trained by `fit` with its KL
                term; `ensemble_zoo.training.blob_samples` turns its
                samples into members that decode as any.
            layers: `None` (default: every decoder block) or the indices
                of the blocks to adapt (negative ones count from the top;
                e.g. `range(n // 2, n)`, the upper half of `n` blocks).
                The blocks below the lowest adapted one compute the same
                for every member: the decode runs them once per prompt
                row and holds their KV cache once, tiling the rows into
                members at the lowest adapted block (`trunk_step`), and
                so do the forward pass, scoring and `fit`
                (`member_forward`), where the family's cached step allows
                (`families.Family.trunk_refused` says where not).

        Returns:
            A `LoRAEnsembleCausalLM`.
        """
        _check_causal_lm(causal_lm)
        families.check_layers(layers, len(getattr(causal_lm.backbone, "transformer_layers", ())))
        keras_hub_cls = families.causal_lm_class(causal_lm.backbone)
        families.family(keras_hub_cls)  # refused families, before the copy
        _check_text_only(causal_lm.backbone, keras_hub_cls)
        backbone = LoRAEnsembleDecoderBackbone(
            copy_model(causal_lm.backbone),
            num_members=num_members,
            rank=rank,
            targets=targets,
            lora_alpha=lora_alpha,
            a_gain=a_gain,
            seed=seed,
            blob=blob,
            layers=layers,
        )
        return cls(backbone, preprocessor=copy_preprocessor(causal_lm.preprocessor))

    @staticmethod
    def from_adapters(causal_lm, filepath, load_weights=True):
        """The LoRA-Ensemble whose adapters `save_adapters` wrote to
        `filepath`, rebuilt on `causal_lm` (the model they were trained
        on): `from_keras_hub` with the members, rank, targets and scaling
        the file records, then `load_adapters`.

        Args:
            causal_lm: a keras-hub causal LM of the file's family and
                shapes (not changed).
            filepath: a `*.lora_ensemble.h5` file.
            load_weights: bool; `False` builds the ensemble alike with
                fresh adapters (members equal to `causal_lm`).

        Returns:
            A `LoRAEnsembleCausalLM`.

        Raises:
            ValueError: the file is not an adapter file, or its adapters
                do not fit `causal_lm` (the message names what differs).
        """
        _, arguments = adapter_files.read_build_arguments(filepath)
        ensemble = LoRAEnsembleCausalLM.from_keras_hub(causal_lm, **arguments)
        if load_weights:
            ensemble.load_adapters(filepath)
        return ensemble

    @staticmethod
    def from_keras_hub_lora(causal_lm, filepaths):
        """A LoRA-Ensemble whose members are keras-hub LoRA adapters.

        Each file, written by keras-hub's `Backbone.save_lora_weights`
        after `enable_lora(rank)` on `causal_lm`'s architecture, becomes
        one member; member `m` then equals `causal_lm` with file `m`'s
        adapter loaded (`backbone.load_lora_weights`), exactly. keras-hub
        factors each head of an attention projection separately (see
        `keras_hub_lora`), so an imported adapter has rank `heads * rank`
        on those projections (`rank` on `Dense` ones).

        Args:
            causal_lm: the keras-hub causal LM the adapters were trained
                on (without `enable_lora`; it is not changed).
            filepaths: the `.lora.h5` files, one per member; all must
                adapt the same layers with the same rank.

        Returns:
            A `LoRAEnsembleCausalLM` with `len(filepaths)` members.
        """
        _check_causal_lm(causal_lm)
        targets, ranks, factors, num_blocks, count = member_models.keras_hub_lora_factors(
            causal_lm, filepaths
        )
        ensemble = LoRAEnsembleCausalLM.from_keras_hub(
            causal_lm, num_members=count, rank=ranks, targets=targets, seed=0
        )
        sites = [(b, t) for b in range(num_blocks) for t in targets]
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
        if (
            not isinstance(member, (int, np.integer))
            or isinstance(member, bool)
            or not (0 <= member < self.num_members)
        ):
            raise ValueError(f"`member` must be an int in [0, {self.num_members}); got {member!r}.")
        return member_models.plain_causal_lm(self, member)

    def base_causal_lm(self):
        """The frozen model the ensemble was built on (no adapter), as a
        plain keras-hub causal LM of the base family with this ensemble's
        preprocessor: the single-model baseline.

        Returns:
            A new `keras_hub.models.<Family>CausalLM`; this ensemble is not
            changed.
        """
        return member_models.plain_causal_lm(self, None)

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
    def adapters(self):
        """The layers holding the members' factors (`lora_a`, `lora_b`),
        block by block, in `targets` order: a `LoRAEnsembleAdapter` per
        projection, and for `"experts"` one `LoRAEnsembleExpertKernel` per
        stacked expert kernel of each mixture-of-experts block."""
        return factor_layers(self.backbone._adapters)


def _check_causal_lm(causal_lm):
    """A `TypeError` unless `causal_lm` is a keras-hub causal LM; a
    `ValueError` when it has keras-hub LoRA enabled."""
    if not isinstance(causal_lm, keras_hub.models.CausalLM):
        raise TypeError(
            f"`causal_lm` must be a keras_hub.models.CausalLM; got {type(causal_lm).__name__}."
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


def _check_text_only(backbone, keras_hub_cls):
    """A `ValueError` for a multimodal backbone (a vision encoder)."""
    if getattr(backbone, "vision_encoder", None) is not None:
        raise ValueError(
            f"`backbone` is a multimodal {type(backbone).__name__} (it has a vision "
            f"encoder); LoRA-Ensemble supports text-only {keras_hub_cls.__name__} "
            "models (`vision_encoder=None`): image inputs would be dropped."
        )


# The per-family names of earlier releases: one class serves every family.
LoRAEnsembleGemmaCausalLM = LoRAEnsembleCausalLM
LoRAEnsembleGemma3CausalLM = LoRAEnsembleCausalLM
LoRAEnsembleLlamaCausalLM = LoRAEnsembleCausalLM
LoRAEnsembleLlama3CausalLM = LoRAEnsembleCausalLM
LoRAEnsembleMistralCausalLM = LoRAEnsembleCausalLM
LoRAEnsembleQwenCausalLM = LoRAEnsembleCausalLM
LoRAEnsembleQwen3CausalLM = LoRAEnsembleCausalLM
