"""
Title: Uncertainty for every generated token: LoRA-Ensembles of keras-hub LLMs
Author: ensemble_zoo developers
Date created: 2026/11/26
Last modified: 2026/11/26
Description: Put an ensemble of LoRA adapters on a frozen keras-hub causal LM, fine-tune it with fit, and generate text with the epistemic uncertainty of every token, computed in one batched decode.
"""

"""
## Introduction

A language model that answers wrongly usually answers just as fluently.
LoRA-Ensemble (Mühlematter et al., "LoRA-Ensemble: Efficient Uncertainty
Modelling for Self-Attention Networks") gives one frozen pretrained
model `M` low-rank adapters, one per member: the members share every
weight of the model, run as one batch, and disagree where the fine-tuning
data left them unsure. Their disagreement, the *epistemic* uncertainty
(mutual information), is what tells a guess from knowledge.

`ensemble_zoo` brings this to keras-hub's decoder models: 21 of the 23
text-only causal-LM families keras-hub 0.32 ships (Gemma, Llama, Mistral,
Qwen, GPT-2, OPT, Phi-3, Mixtral, ...; the section "Any keras-hub causal
LM" below):

1. `LoRAEnsembleCausalLM.from_keras_hub(causal_lm, ...)` adds the members
   to any of them without touching the model you pass;
2. `fit` trains the adapters only;
3. `generate(..., return_uncertainty=True)` samples from the members'
   mean probabilities and returns, for every generated token, the total,
   aleatoric and epistemic uncertainty and the token's log-probability
   under the ensemble and each member, computed inside the compiled decode
   loop, one batched step for all members.

Part 1 shows the path a user with network takes, from a Gemma 3 preset.
Part 2 runs the bundled task end to end: sums with checkable answers,
where we can measure how well each uncertainty finds the wrong answers.
The guide runs in about a minute on a CPU.
"""

"""
## Setup
"""

import io
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import keras_hub
import numpy as np
import sentencepiece

from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.answer_evaluation import evaluate_answers

keras.utils.set_random_seed(0)

"""
## Part 1: from a keras-hub preset to an ensemble

With network, the first line would be

```python
gemma = keras_hub.models.Gemma3CausalLM.from_preset("gemma3_instruct_1b")
```

Nothing is downloaded here, so we build a tiny Gemma 3 with a tokenizer
trained in memory, save it as a keras-hub preset, and load it with the
very same call on the local directory. Everything after that line is what
you would run on the real model.
"""

proto = io.BytesIO()
sentencepiece.SentencePieceTrainer.train(
    sentence_iterator=iter(["the cat sat on the mat", "a dog ran in the park"]),
    model_writer=proto,
    model_type="WORD",
    vocab_size=20,
    hard_vocab_limit=False,
    pad_id=0,
    bos_id=1,
    eos_id=2,
    unk_id=3,
    pad_piece="<pad>",
    bos_piece="<bos>",
    eos_piece="<eos>",
    unk_piece="<unk>",
    user_defined_symbols=["<end_of_turn>"],
    minloglevel=2,
)
tokenizer = keras_hub.models.Gemma3Tokenizer(proto=proto.getvalue(), has_vision_tokens=False)
tiny = keras_hub.models.Gemma3CausalLM(
    backbone=keras_hub.models.Gemma3Backbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        image_size=16,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=32,
        intermediate_dim=64,
        head_dim=16,
        vision_encoder=None,
    ),
    preprocessor=keras_hub.models.Gemma3CausalLMPreprocessor(
        tokenizer=tokenizer, image_converter=None, sequence_length=12
    ),
)
preset_dir = os.path.join(tempfile.mkdtemp(), "my_gemma3")
tiny.save_to_preset(preset_dir)

gemma = keras_hub.models.Gemma3CausalLM.from_preset(preset_dir)

"""
Four members of rank 4 on the attention projections (the paper's
choice; `targets` also takes the MLP's `"mlp_gate"`, `"mlp_up"` and
`"mlp_down"`). `B = 0` at the start, so every member is the model.
"""

ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(gemma, num_members=4, rank=4, seed=0)
print(type(ensemble).__name__, "with", len(ensemble.adapters), "adapters")
print(
    "trainable parameters:",
    sum(int(np.prod(w.shape)) for w in ensemble.trainable_weights),
    "of",
    ensemble.count_params(),
)

"""
`fit` takes text through the model's own preprocessor (Gemma 3's takes
prompts and responses, and weighs the responses' tokens); the loss is the
mean over members of the token cross-entropy, and only the adapters
train.
"""

ensemble.compile(optimizer=keras.optimizers.Adam(3e-3), sampler="greedy")
ensemble.fit(
    {"prompts": ["the cat", "a dog"] * 8, "responses": ["sat on the mat", "ran in the park"] * 8},
    batch_size=4,
    epochs=3,
    verbose=0,
)
out = ensemble.generate(["the cat"], max_length=8, return_uncertainty=True)
print(out["output"])
generated = out["generated_mask"][0]
print("epistemic per generated token:", np.round(out["epistemic"][0][generated], 4))

"""
The members' adapters are a few kilobytes next to the model: save them
alone and load them into an ensemble built the same way. (Adapters
trained with keras-hub's own `enable_lora` import as members too:
`LoRAEnsembleCausalLM.from_keras_hub_lora(gemma, ["a.lora.h5", ...])`.)
"""

adapters = os.path.join(tempfile.mkdtemp(), "members.lora_ensemble.h5")
ensemble.save_adapters(adapters)
again = ez.models.LoRAEnsembleCausalLM.from_keras_hub(gemma, num_members=4, rank=4, seed=1)
again.load_adapters(adapters)
print("adapter file:", os.path.getsize(adapters), "bytes")

"""
## Any keras-hub causal LM

Nothing above is specific to Gemma: the adapters go on the projections
that each decoder block holds, found by layer type and the name keras-hub
gives their role, so a family keras-hub builds from its standard layers
needs no code of ours. Here a tiny GPT-2 and a tiny Mixtral (a mixture of
experts: the adapters sit on its attention): with `B = 0` the ensemble
generates exactly the keras-hub model's tokens. A family whose cache the
decode engine cannot step yet is refused with the reason.
"""

prompt = {
    "token_ids": np.array([[1, 5, 7, 0, 0, 0, 0, 0]]),
    "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]], bool),
}
small = dict(vocabulary_size=50, num_layers=2, hidden_dim=16, intermediate_dim=32)
others = {
    "GPT-2": keras_hub.models.GPT2CausalLM(
        backbone=keras_hub.models.GPT2Backbone(**small, num_heads=2, max_sequence_length=16),
        preprocessor=None,
    ),
    "Mixtral": keras_hub.models.MixtralCausalLM(
        backbone=keras_hub.models.MixtralBackbone(
            **small, num_query_heads=2, num_key_value_heads=1, num_experts=4, top_k=2
        ),
        preprocessor=None,
    ),
}
for name, causal_lm in others.items():
    members = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
        causal_lm, num_members=3, rank=2, seed=0
    )
    causal_lm.compile(sampler="greedy")
    members.compile(sampler="greedy")
    ours = members.generate(prompt, stop_token_ids=None)["token_ids"]
    theirs = causal_lm.generate(prompt, stop_token_ids=None)["token_ids"]
    print(f"{name}: {len(members.adapters)} adapters, same tokens: {np.array_equal(ours, theirs)}")

rwkv = keras_hub.models.RWKV7CausalLM(
    backbone=keras_hub.models.RWKV7Backbone(
        vocabulary_size=50, hidden_size=16, head_size=8, num_layers=1, intermediate_dim=32
    ),
    preprocessor=None,
)
try:
    ez.models.LoRAEnsembleCausalLM.from_keras_hub(rwkv, num_members=3, rank=2)
except ValueError as error:
    print(error)

"""
## Part 2: the bundled task, end to end

`ez.datasets.arithmetic` asks `"a+b="` with `a, b` in 0-49 (2,000
training and 500 held-out sums) and, out of distribution, with `a, b` in
50-99. The presets hold a 4-layer Gemma pretrained on 1,000 training sums
(`gemma_tiny_arithmetic`), a LoRA-Ensemble of 4 rank-8 members fine-tuned
on all 2,000, and the per-token loss predictor of "Pretrained Visual
Uncertainties" on the pretrained model
(`presets/make_gemma_tiny_arithmetic.py` rebuilds all three in a few
minutes).
"""

ensemble = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
ensemble.attach_loss_predictor(ez.presets.load_preset("loss_prediction_gemma_tiny_arithmetic"))
ensemble.compile(sampler="greedy")

questions = ["17+25=", "3+44=", "83+91=", "67+58="]  # two in range, two out of it
out = ensemble.generate(questions, max_length=12, return_uncertainty=True)
for text, epistemic, loss in zip(out["output"], out["mean_epistemic"], out["mean_loss_prediction"]):
    print(f"{text:<12} epistemic {epistemic:.4f}  predicted loss {loss:.3f}")

"""
The figures for given text come from one teacher-forced pass,
`score_uncertainty`: here the right and a wrong answer to the same
question. Position `t` holds the figures of token `t` given the tokens
before it.
"""

prompts = ensemble.preprocessor.generate_preprocess(["17+25=42", "17+25=47"], sequence_length=12)
scored = ensemble.score_uncertainty(prompts["token_ids"], prompts["padding_mask"])
print("log p of the answer's last digit:", scored["log_prob"][:, 9].round(3))

"""
How well does each uncertainty find the wrong answers? `evaluate_answers`
(the arithmetic task's `ez.evaluation.evaluate_generation`) answers all
500 test and 500 OOD questions and ranks the answers by every sequence
estimator: the AUROC for wrong answers, the prediction rejection ratio
(PRR: 1 is an oracle's ranking, 0 chance), AURC (lower is better) and the
AUROC for telling OOD questions from test ones. The single model is
member 0 alone (one LoRA fine-tune), its estimators ranking its own
answers.
"""

report = evaluate_answers(
    ensemble, single_model=ensemble.member_causal_lm(0), single_model_name="member_0"
)
print(report)

"""
The ensemble is more accurate than its member 0 alone, and its
uncertainty ranks both its errors and the unfamiliar questions better
than that single model's entropy does. (No model answers the OOD sums right:
their three-digit answers never occur in training.) Rejecting the most
uncertain answers trades coverage for accuracy:
"""

test_q, test_a = arithmetic.load_questions("test")
out = ensemble.generate(test_q, max_length=12, return_uncertainty=True)
correct = np.array([arithmetic.parse_answer(t) == a for t, a in zip(out["output"], test_a)])
rejected, accuracy = ez.metrics.accuracy_rejection_curve(out["mean_epistemic"], correct)
for rate in (0.0, 0.05, 0.1):
    index = min(np.searchsorted(rejected, rate), len(rejected) - 1)
    print(f"reject {rejected[index]:.0%}: accuracy {accuracy[index]:.3f}")

"""
## Where to go next

- `score_uncertainty` on long texts projects onto the vocabulary a chunk
  of positions at a time (`chunk_size`), so a 256k vocabulary fits.
- `temperature` tempers the ensemble's mean probabilities (`p̄^(1/T)`),
  not each member; the reported figures are always those of `p̄`.
- `member_causal_lm(m)` gives one member as a plain keras-hub model.
"""
