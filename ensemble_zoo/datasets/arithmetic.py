"""The bundled text task: two-number additions with checkable answers.

Generated with a fixed seed (nothing is downloaded): a question is
`"a+b="` and its answer the decimal sum, e.g. `"17+25="` -> `"42"`.

- In-distribution: `a, b` in 0-49. The 2,500 pairs are split, with a
  fixed seed, into 2,000 `train` and 500 `test` pairs (no pair in both).
- Out-of-distribution (`ood`): 500 distinct pairs with `a, b` in 50-99:
  larger operands, and three-digit sums (100-198) that no training
  answer has.

`tokenizer()` builds the character-level Gemma tokenizer the arithmetic
presets use, from a SentencePiece model trained in memory (the presets
keep it in keras-hub's layout, `assets/tokenizer/vocabulary.spm`).

Example:

```python
import ensemble_zoo as ez

questions, answers = ez.datasets.arithmetic.load_questions("test")
questions[0], answers[0]  # e.g. ('17+25=', '42')
tokenizer = ez.datasets.arithmetic.tokenizer()
tokenizer.vocabulary_size()  # 17
```
"""

import numpy as np

NAME = "arithmetic"
SPLITS = ("train", "test", "ood")
ID_RANGE = (0, 50)  # operands a, b in [0, 50)
OOD_RANGE = (50, 100)
NUM_TRAIN = 2000
NUM_OOD = 500
SEED = 20261126
#: Every character of a question or answer.
CHARACTERS = "0123456789+="


def load_questions(split):
    """`(questions, answers)`: two lists of strings of one split.

    Args:
        split: `"train"`, `"test"` (in-distribution, held out) or `"ood"`.
    """
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}; got {split!r}.")
    rng = np.random.default_rng(SEED)
    low, high = ID_RANGE
    pairs = [(a, b) for a in range(low, high) for b in range(low, high)]
    order = rng.permutation(len(pairs))
    if split == "ood":
        low, high = OOD_RANGE
        grid = [(a, b) for a in range(low, high) for b in range(low, high)]
        chosen = [grid[i] for i in rng.choice(len(grid), NUM_OOD, replace=False)]
    else:
        index = order[:NUM_TRAIN] if split == "train" else order[NUM_TRAIN:]
        chosen = [pairs[i] for i in index]
    return [f"{a}+{b}=" for a, b in chosen], [str(a + b) for a, b in chosen]


def tokenizer():
    """The character-level `keras_hub.models.GemmaTokenizer` of the task:
    `<pad>`, `<bos>`, `<eos>`, `<unk>`, SentencePiece's word-start piece
    and one piece per character of `CHARACTERS` (17 tokens)."""
    import io

    import keras_hub
    import sentencepiece

    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([CHARACTERS, "1+2=3"]),
        model_writer=proto,
        model_type="CHAR",
        vocab_size=len(CHARACTERS) + 5,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        bos_piece="<bos>",
        eos_piece="<eos>",
        unk_piece="<unk>",
        normalization_rule_name="identity",  # ASCII only: no NFKC tables
        minloglevel=2,
    )
    return keras_hub.models.GemmaTokenizer(proto=proto.getvalue())


def training_arrays(split, tokenizer, sequence_length=12):
    """`(x, y, sample_weight)` NumPy arrays of a split for `fit` on a causal
    LM without its preprocessor: `x` holds `token_ids` and `padding_mask`
    of `<bos> question answer <eos>` (padded to `sequence_length`), `y`
    the next tokens, and `sample_weight` is 1 on the answer's tokens and
    its `<eos>` only (the questions are random: nothing to learn there).
    """
    questions, answers = load_questions(split)
    shape = (len(questions), sequence_length)
    token_ids, labels = np.zeros(shape, "int32"), np.zeros(shape, "int32")
    weights = np.zeros(shape, "float32")
    bos, eos = tokenizer.token_to_id("<bos>"), tokenizer.token_to_id("<eos>")
    for i, (question, answer) in enumerate(zip(questions, answers)):
        prompt = [bos] + _ids(tokenizer, question)
        full = [bos] + _ids(tokenizer, question + answer) + [eos]
        if len(full) > sequence_length + 1:
            raise ValueError(
                f"{question + answer!r} takes {len(full)} tokens; "
                f"`sequence_length` must be at least {len(full) - 1}."
            )
        token_ids[i, : len(full) - 1] = full[:-1]
        labels[i, : len(full) - 1] = full[1:]
        # Position t predicts token t + 1: the answer's tokens and <eos>.
        weights[i, len(prompt) - 1 : len(full) - 1] = 1.0
    x = {"token_ids": token_ids, "padding_mask": token_ids != 0}
    return x, labels, weights


def _ids(tokenizer, text):
    return [int(i) for i in np.asarray(tokenizer(text))]


def parse_answer(text):
    """The answer a generation gives: the digits after the first `=` up to
    the first non-digit (`""` when there are none)."""
    answer = text.split("=", 1)[1] if "=" in text else text
    digits = ""
    for character in answer.strip():
        if not character.isdigit():
            break
        digits += character
    return digits
