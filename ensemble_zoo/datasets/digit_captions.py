"""Captions of the bundled digits, and the tokenizer of the digits CLIP.

The digits CLIP preset (`clip_zero_shot_tiny_digits`) is trained
contrastively on the digits' training images, each paired with a caption
that names its class in words ("a photo of a seven."), drawn from
`TEMPLATES` with a fixed seed. Its tokenizer is keras-hub's
`CLIPTokenizer` on a byte-pair vocabulary built here from `WORDS` (every
word a token of its own, reached by one merge per letter), so that
keras-hub's `CLIPPreprocessor` tokenizes the captions and any prompt
made of these words; the end token has the largest id, as CLIP's text
pooler needs (it pools at the largest id).

Example:

```python
from ensemble_zoo.datasets import digit_captions

preprocessor = digit_captions.caption_preprocessor()
images, captions = digit_captions.load_captioned("validation")
preprocessor({"images": None, "prompts": captions[:2]})["token_ids"].shape  # (2, 10)
```
"""

import numpy as np

from ensemble_zoo.datasets import digits

#: The class names of the ten digits, by label.
CLASS_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: The caption templates of training; the first is the Hydra paper's (and
#: CLIP's) zero-shot prompt, which the zero-shot presets use.
TEMPLATES = (
    "a photo of a {}.",
    "a handwritten {}.",
    "the digit {}.",
    "a blurry photo of the number {}.",
    "a scan of a {}.",
)
#: Every word of the captions: the tokenizer's vocabulary.
WORDS = (
    tuple(dict.fromkeys(w for t in TEMPLATES for w in t.replace(".", " .").split() if w != "{}"))
    + CLASS_NAMES
)
#: Tokens per caption, with the start and end tokens.
SEQUENCE_LENGTH = 10


def caption_vocabulary():
    """`(vocabulary, merges)` of the digits' `CLIPTokenizer`: a token per
    letter and per word (with CLIP's end-of-word mark `</w>`), the merges
    that build each word letter by letter, and the start and end tokens
    last."""
    vocabulary = {"<|pad|>": 0}
    merges = []
    for letter in sorted(set("".join(WORDS))):
        vocabulary.setdefault(letter, len(vocabulary))
        vocabulary.setdefault(letter + "</w>", len(vocabulary))
    for word in WORDS:
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            merges.append(f"{parts[0]} {parts[1]}")
            parts = [parts[0] + parts[1]] + parts[2:]
            vocabulary.setdefault(parts[0], len(vocabulary))
    vocabulary["<|startoftext|>"] = len(vocabulary)
    vocabulary["<|endoftext|>"] = len(vocabulary)
    return vocabulary, list(dict.fromkeys(merges))


def caption_preprocessor(sequence_length=SEQUENCE_LENGTH):
    """keras-hub's `CLIPPreprocessor` with the digits' `CLIPTokenizer`
    (`caption_vocabulary`), padding to `sequence_length` tokens."""
    import keras_hub

    vocabulary, merges = caption_vocabulary()
    tokenizer = keras_hub.models.CLIPTokenizer(vocabulary=vocabulary, merges=merges)
    return keras_hub.models.CLIPPreprocessor(tokenizer, sequence_length=sequence_length)


def load_captioned(split, seed=0):
    """`(images, captions)` of an in-distribution digits split: each image
    with `TEMPLATES[k]` of its class name, `k` drawn with `seed`."""
    if split not in ("train", "validation", "test"):
        raise ValueError(
            f"`split` must be 'train', 'validation' or 'test' (captioned splits); got {split!r}."
        )
    images, labels = digits.load_arrays(split)
    picks = np.random.default_rng(seed).integers(len(TEMPLATES), size=len(labels))
    captions = [TEMPLATES[k].format(CLASS_NAMES[y]) for k, y in zip(picks, labels)]
    return images, captions
