"""The bundled arithmetic task: seeded splits, answers, the in-memory
tokenizer and the answer-only training weights, against plain Python.
Backend-independent: run under one backend."""

import keras
import numpy as np
import pytest

from ensemble_zoo.datasets import arithmetic

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="no Keras computation: one backend suffices"
)


def operands(question):
    a, b = question[:-1].split("+")
    return int(a), int(b)


def test_splits_are_seeded_disjoint_and_in_their_ranges():
    splits = {s: arithmetic.load_questions(s) for s in arithmetic.SPLITS}
    assert [len(splits[s][0]) for s in arithmetic.SPLITS] == [2000, 500, 500]
    assert arithmetic.load_questions("test") == splits["test"]  # seeded
    for split, (questions, answers) in splits.items():
        low, high = arithmetic.OOD_RANGE if split == "ood" else arithmetic.ID_RANGE
        for question, answer in zip(questions, answers):
            a, b = operands(question)
            assert low <= a < high and low <= b < high and answer == str(a + b)
    assert not set(splits["train"][0]) & set(splits["test"][0])
    assert len(set(splits["ood"][0])) == 500  # distinct
    assert len(set(splits["train"][0]) | set(splits["test"][0])) == 2500
    with pytest.raises(ValueError, match="split"):
        arithmetic.load_questions("validation")


def test_tokenizer_and_answer_only_weights():
    tokenizer = arithmetic.tokenizer()
    assert tokenizer.vocabulary_size() == 17
    assert tokenizer.detokenize(tokenizer("17+25=42")) == "17+25=42"
    x, y, weights = arithmetic.training_arrays("train", tokenizer, sequence_length=12)
    questions, answers = arithmetic.load_questions("train")
    bos, eos = tokenizer.token_to_id("<bos>"), tokenizer.token_to_id("<eos>")
    for i in (0, 7, 1999):
        ids = [int(t) for t in np.asarray(tokenizer(questions[i] + answers[i]))]
        full = [bos] + ids + [eos]
        np.testing.assert_array_equal(x["token_ids"][i, : len(full) - 1], full[:-1])
        np.testing.assert_array_equal(y[i, : len(full) - 1], full[1:])
        # Weighted: exactly the targets that are the answer's digits and <eos>.
        targets = y[i][weights[i] > 0]
        assert tokenizer.detokenize(targets[:-1].tolist()).strip() == answers[i]
        assert targets[-1] == eos
    np.testing.assert_array_equal(x["padding_mask"], x["token_ids"] != 0)
    with pytest.raises(ValueError, match="sequence_length"):
        arithmetic.training_arrays("ood", tokenizer, sequence_length=8)


@pytest.mark.parametrize(
    "text, answer",
    [("17+25=42", "42"), ("17+25=42+1", "42"), ("17+25=", ""), ("9+9=18 ", "18"), ("7", "7")],
)
def test_parse_answer(text, answer):
    assert arithmetic.parse_answer(text) == answer
