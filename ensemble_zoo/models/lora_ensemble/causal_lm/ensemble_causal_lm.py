"""`EnsembleCausalLM`: the decoding and uncertainty of a keras-hub causal
LM whose members are rows of one batch (LoRA-Ensemble's adapters on a
frozen decoder): `generate` with per-token figures inside the compiled
decode loop (`decode_engine`), teacher-forced `score_uncertainty`,
sampling-based `sample_uncertainty`, an attached loss predictor, and the
members' training loss."""

import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.models.causal_lm_inputs import CausalLMLoopsMixin
from ensemble_zoo.models.causal_lm_inputs import check_token_batch
from ensemble_zoo.models.lora_ensemble.causal_lm import decode_compilation
from ensemble_zoo.models.lora_ensemble.causal_lm import decode_engine
from ensemble_zoo.models.lora_ensemble.causal_lm import generation
from ensemble_zoo.models.lora_ensemble.causal_lm import teacher_forcing
from ensemble_zoo.models.lora_ensemble.causal_lm.attention_route import recorded_attention
from ensemble_zoo.models.lora_ensemble.causal_lm.chunked_loss import chunked_token_cross_entropy
from ensemble_zoo.models.lora_ensemble.causal_lm.generation_outputs import token_outputs
from ensemble_zoo.models.lora_ensemble.causal_lm.member_forward import member_hidden
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import sample_uncertainty
from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import num_token_figures
from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import token_figures
from ensemble_zoo.models.loss_prediction.token_loss_predictor import TokenLossPredictor
from ensemble_zoo.utils.validation import check_positive_int


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


class EnsembleCausalLM(CausalLMLoopsMixin):
    """The decoding and uncertainty of a causal-LM ensemble (no Keras base:
    `LoRAEnsembleCausalLM` builds the model and lists
    `keras_hub.models.CausalLM` last). The model runs the members as
    batch-major rows (`TileMembers` / `UntileMembers`) and sets
    `num_members`, `family` (`families.Family`), `trunk_blocks` (the
    decoder blocks that run once per prompt row, `trunk_step`; 0: none),
    `call_with_cache` and `_build_cache`."""

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        weighted_metrics="auto",
        loss_chunk_size=None,
        remat=None,
        **kwargs,
    ):
        """keras-hub's `CausalLM.compile`; the default loss is the mean over
        members of the token cross-entropy (`member_token_cross_entropy`),
        and there is no default metric (keras-hub's token accuracy expects
        one model's logits).

        With the default loss and no metric, `fit` computes that loss in
        blocks of positions (`chunked_loss`): the training forward
        (`model(x, training=True)`) returns the members' final hidden
        states `(batch, members, tokens, hidden_dim)` instead of their
        logits, and the loss projects them onto the vocabulary
        `loss_chunk_size` positions at a time (`None`: sized from the
        members and the vocabulary), recomputing each block's logits in
        the backward pass. The training forward also rematerialises each
        decoder block (`block_remat`; not a block with dropout above 0):
        the members' rows keep M times the activations of keras-hub's own
        `fit` of the base model otherwise.
        The loss and its gradients are those of the logits (float32
        round-off); `evaluate` and `predict` see logits.

        Args:
            loss_chunk_size: optional int, positions per block of the
                training loss.
            remat: optional bool, whether the training forward under the
                blocked loss rematerialises each decoder block (`None`:
                it does; `False` keeps the activations, quicker where
                memory allows; `True` with a loss or metric that reads the
                member logits is an error).
        """
        blocked = (
            loss == "auto" and not kwargs.get("metrics") and weighted_metrics in ("auto", None)
        )
        if loss_chunk_size is not None:
            loss_chunk_size = check_positive_int(loss_chunk_size, "loss_chunk_size")
            if not blocked:
                raise ValueError(
                    "`loss_chunk_size` sizes the default loss's blocks; it needs `loss='auto'` "
                    "and no metric (a metric reads the member logits)."
                )
        if remat not in (None, True, False):
            raise TypeError(f"`remat` must be a bool or None; got {remat!r}.")
        if remat and not blocked:
            raise ValueError(
                "`remat` rematerialises the training forward of the default loss; it needs "
                "`loss='auto'` and no metric (a metric reads the member logits)."
            )
        if loss == "auto":
            loss = member_token_cross_entropy
        if weighted_metrics == "auto":
            weighted_metrics = None
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs)
        self.__dict__["_decoders"] = {}  # a new sampler or `jit_compile`
        # The compiled configuration, as Keras keeps `loss`: `None` for
        # a loss on the member logits.
        self.__dict__["_loss_blocks"] = (loss_chunk_size, remat is not False) if blocked else None

    def call(self, inputs, training=None):
        """The member logits; in training under the default loss, the
        members' final hidden states, which `compute_loss` projects in
        blocks (`compile`)."""
        blocks = self.__dict__.get("_loss_blocks")
        if training and blocks is not None:
            return self.split_members(member_hidden(self, inputs, training, remat=blocks[1]))
        if getattr(self, "trunk_blocks", 0):
            hidden = member_hidden(self, inputs, training)
            return self.split_members(self.backbone.token_embedding(hidden, reverse=True))
        return super().call(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras' loss; in training under the default loss, from the
        members' hidden states in blocks of positions
        (`chunked_loss.chunked_token_cross_entropy`), plus the layers'
        added losses."""
        blocks = self.__dict__.get("_loss_blocks")
        if not training or blocks is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        losses = [
            chunked_token_cross_entropy(
                self.backbone.token_embedding, y_pred, y, sample_weight, blocks[0]
            )
        ]
        losses += [self._aggregate_additional_loss(loss) for loss in self.losses]
        return losses[0] if len(losses) == 1 else ops.sum(ops.stack(losses))

    # === Decoding (see `decode_engine`) ===

    def generate_step(self, inputs, stop_token_ids=None):
        """One generation of a batch of padded prompts by the decode engine
        (`decode_engine.generate_batch` with the compiled sampler), as
        keras-hub's `make_generate_function` compiles it.

        Returns:
            dict: `token_ids`, `padding_mask` (as keras-hub returns them)
            and `figures` `(batch, length, figures)`.
        """
        return decode_engine.generate_batch(self, self.sampler, inputs, stop_token_ids)

    def _decode_function(self, stop_token_ids, sampler=None):
        """The compiled generation of one batch for `sampler` (the compiled
        one by default) and `stop_token_ids` (a tuple or `None`), built once
        and kept; `compile` and `attach_loss_predictor` drop the kept
        ones."""
        sampler = self.sampler if sampler is None else sampler
        decoders = self.__dict__.setdefault("_decoders", {})
        key = (id(sampler), stop_token_ids)
        if key not in decoders:
            function = decode_compilation.decode_function(self, sampler, stop_token_ids)
            decoders[key] = (sampler, function)  # the sampler keeps its id
        return decoders[key][1]

    def _teacher_forced_figures(self, token_ids, prompt_mask=None):
        """`(batch, length, figures)`: position `t > 0` holds the figures
        of token `t` given tokens `< t` (position 0: zeros); the
        expectation-of-products weights count the tokens outside
        `prompt_mask`; the attention weights after them where the family
        takes keras-hub's attention route (beam and contrastive search's
        figures)."""
        return teacher_forcing.chunked_figures(
            self, token_ids, ops.ones_like(token_ids, dtype="bool"), None, prompt_mask, True
        )

    def _scoring_function(self):
        """The compiled `decode_compilation.scoring_function`, built once and
        kept with the decode functions (`compile` and
        `attach_loss_predictor` drop them)."""
        decoders = self.__dict__.setdefault("_decoders", {})
        if "scoring" not in decoders:
            decoders["scoring"] = (None, decode_compilation.scoring_function(self))
        return decoders["scoring"][1]

    def _block_input_function(self):
        """The compiled `decode_compilation.block_input_function` of the
        middle block (`L // 2`: EigenScore's), kept as the scoring function
        is."""
        decoders = self.__dict__.setdefault("_decoders", {})
        if "block_input" not in decoders:
            middle = len(self.backbone.transformer_layers) // 2
            function = decode_compilation.block_input_function(self, middle)
            decoders["block_input"] = (None, function)
        return decoders["block_input"][1]

    def _query_attention_function(self):
        """The compiled `decode_compilation.query_attention_function`, kept
        as the scoring function is."""
        decoders = self.__dict__.setdefault("_decoders", {})
        if "query_attention" not in decoders:
            function = decode_compilation.query_attention_function(self)
            decoders["query_attention"] = (None, function)
        return decoders["query_attention"][1]

    @property
    def _num_figures(self):
        """Figures per position: `FIGURES`, the `MEMBER_FIGURES` of each
        member, and the predicted loss when a loss predictor is
        attached."""
        return num_token_figures(self.num_members) + (self.loss_predictor is not None)

    @property
    def _recorded_attention(self):
        """The `attention_route.RecordedAttention` of the decode loop, or
        `None` where the family's attention layers do not take keras-hub's
        attention route; read from the decoder once."""
        if "_attention" not in self.__dict__:
            self.__dict__["_attention"] = recorded_attention(self.backbone.decoder)
        return self.__dict__["_attention"]

    def _figures(self, member_log_probs, tokens, member_hidden, prefix_log_likelihoods):
        """`token_figures`, and the attached loss predictor's prediction
        (the mean over members of its head on each member's hidden state)."""
        figures = token_figures(member_log_probs, tokens, prefix_log_likelihoods)
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
        The compiled decode reads its head's current weights at every
        call (under JAX they are arguments of the compiled program), so
        training it further needs no new attachment.

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
            base = self.base_backbone_class
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
        self.__dict__["_decoders"] = {}

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
                and per position the figures of
                `ensemble_zoo.ops.token_uncertainty` (`total`,
                `aleatoric`, `epistemic`, `expected_pairwise_kl`,
                `reverse_mutual_information` in nats, `max_probability`;
                and `ep_total`, `ep_aleatoric`, `ep_epistemic`,
                `ep_expected_pairwise_kl`, `ep_reverse_mutual_information`,
                the same measures of the expectation-of-products ensemble,
                whose members are weighted by their likelihood of the
                answer so far),
                `log_prob` (the token under the ensemble),
                lm-polygraph's per-token distances from uniform
                (`fisher_rao_distance`, `renyi_divergence`,
                `uniform_divergence`, `ensemble_zoo.ops.distribution_figures`),
                `member_log_probs`, `member_entropy` and the `member_`
                distances `(batch, members, length)`, all zero outside
                `generated_mask`; and per
                sequence `log_likelihood` (sum of `log_prob`),
                `member_log_likelihoods` `(batch, members)`, `mean_<f>`
                for each of those uncertainty figures `f` (`mean_total`,
                `mean_ep_epistemic`, ...: means over the generated
                tokens) and
                `sequence_epistemic`, `log mean_m exp(l_m) - mean_m l_m`
                of the members' sequence log-likelihoods `l_m` (>= 0).
                With a loss predictor attached (`attach_loss_predictor`),
                also `loss_prediction` per position and its mean
                `mean_loss_prediction`.

        Returns:
            As described for `return_uncertainty`.
        """
        return self._generate(inputs, max_length, stop_token_ids, strip_prompt, return_uncertainty)

    def _generate(
        self, inputs, max_length, stop_token_ids, strip_prompt, return_uncertainty, sampler=None
    ):
        """`generate` with `sampler` in place of the compiled one (`None`:
        the compiled one)."""
        return generation.generate(
            self, inputs, max_length, stop_token_ids, strip_prompt, return_uncertainty, sampler
        )

    def score_uncertainty(
        self, token_ids, padding_mask=None, chunk_size=None, prompt_mask=None, attention=False
    ):
        """Per-token uncertainty of given text, teacher-forced.

        The backbone runs once over the sequence; the vocabulary
        projection and the figures are computed `chunk_size` positions at
        a time, so that the member logits `(batch, members, tokens,
        vocabulary)` are never held whole: memory grows with the length
        by the backbone's activations, not by `members x vocabulary` per
        token. Compiled for the backend unless the model runs eagerly
        (see `teacher_forcing`); no gradients are recorded.

        Args:
            token_ids: int array `(batch, length)`.
            padding_mask: optional bool array `(batch, length)` (default:
                all true).
            chunk_size: positive int, positions per chunk, or `None`
                (default): as many as keep each sequence's chunk of member
                log-probabilities within `teacher_forcing.FIGURE_BUDGET`
                values (16 positions for 4 members of a 262,144-token
                vocabulary). The figures do not depend on it.
            prompt_mask: optional bool array `(batch, length)`, the prompt
                tokens: they are not part of the answer whose members'
                likelihoods weigh the expectation-of-products figures
                (`ep_*`). Pass the prompts' mask to reproduce `generate`'s
                figures; by default every token from position 1 counts.
            attention: bool (default `False`): also the attention weights
                that `generate` records (the families that take keras-hub's
                attention route), from a pass through that route, which
                holds each layer's `(rows, heads, length, length)` weights
                while it runs where keras-hub's own attention may use a
                fused kernel.

        Returns:
            dict of NumPy arrays: the figures of `generate(...,
            return_uncertainty=True)` per position (`total`, `aleatoric`,
            `epistemic`, `expected_pairwise_kl`,
            `reverse_mutual_information`, `max_probability`, their
            expectation-of-products `ep_*` versions, `log_prob`, the
            distances from uniform `(batch, length)`; `member_log_probs`,
            `member_entropy` and the `member_` distances `(batch, members,
            length)`; `loss_prediction` with a loss predictor attached;
            and with `attention`, where the family takes keras-hub's
            attention route, the weights `generate` records,
            `member_self_attention`
            with `attention_layers`, `attention_score_layer` and
            `vocabulary_size`): position `t` holds the figures of token
            `t` given tokens `< t` (position 0 and padded positions hold 0).
        """
        if chunk_size is not None:
            chunk_size = check_positive_int(chunk_size, "chunk_size")
        if not isinstance(attention, (bool, np.bool_)):
            raise TypeError(f"`attention` must be a bool; got {attention!r}.")
        token_ids, padding_mask = check_token_batch(
            token_ids, padding_mask, self.backbone.vocabulary_size, min_length=2
        )
        if prompt_mask is None:
            prompt_mask = np.zeros(np.shape(token_ids), bool)
        prompt_mask = np.asarray(prompt_mask)
        if prompt_mask.dtype != bool or prompt_mask.shape != np.shape(token_ids):
            raise ValueError(
                "`prompt_mask` must be a bool array of the shape of `token_ids` "
                f"{np.shape(token_ids)}; got dtype {prompt_mask.dtype} and shape "
                f"{prompt_mask.shape}."
            )
        valid = np.array(padding_mask, bool)
        figures = self._scoring_function()(
            ops.convert_to_tensor(token_ids, "int32"),
            ops.convert_to_tensor(padding_mask, "bool"),
            ops.convert_to_tensor(prompt_mask, "bool"),
            chunk_size,
            bool(attention),
        )
        figures = ops.convert_to_numpy(figures)
        valid[:, 0] = False
        return token_outputs(
            figures,
            valid,
            self.num_members,
            self._recorded_attention if attention else None,
            self.backbone.vocabulary_size,
        )

    def sample_uncertainty(
        self,
        prompts,
        num_samples=10,
        equivalence="exact",
        max_length=None,
        stop_token_ids="auto",
        sampler=None,
        similarity=None,
        nli=None,
    ):
        """Sampling-based uncertainty per prompt: `num_samples` answers
        drawn from the ensemble in one batched decode, grouped by meaning.

        See `ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty` for how the
        answers are drawn (token by token from the ensemble's predictive
        distribution, whose sequence likelihood weighs them) and compared.

        Args:
            prompts: a string or a list of strings (with a preprocessor),
                or a dict of `token_ids` and `padding_mask`.
            num_samples: int >= 2.
            equivalence: `"exact"` (after SQuAD's normalisation) or
                `callable(first, second) -> bool`, e.g. an NLI model's
                entailment; equivalent = true both ways.
            max_length, stop_token_ids: as for `generate`.
            sampler: a keras-hub sampler; defaults to `RandomSampler`
                at temperature 1.
            similarity: `callable(first, second) -> float` in `[0, 1]` for
                the lexical similarity and SentenceSAR; defaults to
                ROUGE-L (`ez.evaluation.EncoderSimilarity` makes one from a
                keras-hub sentence encoder).
            nli: optional `callable(first, second) -> (entailment,
                neutral, contradiction)` probabilities, for lm-polygraph's
                NLI-graph estimators.

        Returns:
            dict: `answers`, `log_likelihoods` and
            `member_log_likelihoods`, `equivalent`, `classes`, and
            `(prompts,)` arrays `semantic_entropy` (Kuhn et al.),
            `number_of_semantic_sets` (Lin et al.), `lexical_similarity`,
            `sentence_sar`, `monte_carlo_sequence_entropy`,
            `monte_carlo_normalized_sequence_entropy` and with `nli` the
            graph estimators (higher = more uncertain); see the module's
            `sample_uncertainty` for every key.

        Example:

        ```python
        import ensemble_zoo as ez

        model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
        scores = model.sample_uncertainty(["12+7=", "3+4="], num_samples=8)
        scores["semantic_entropy"], scores["answers"][0]
        ```
        """
        return sample_uncertainty(
            self,
            prompts,
            num_samples,
            equivalence,
            max_length,
            stop_token_ids,
            sampler,
            similarity,
            nli,
        )

    def get_config(self):
        # Task's config (backbone, preprocessor, name, trainable).
        return keras_hub.models.Task.get_config(self)
