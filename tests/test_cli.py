import re

import numpy as np

import ensemble_zoo as ez
from ensemble_zoo import cli


def test_list_prints_every_preset(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ez.presets.list_presets():
        assert name in out


def test_demo_prints_the_numbers_of_an_independent_evaluation(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"^vit_tiny_digits\s+1\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", out, re.M)
    assert row, out
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    x, y = ez.datasets.load_arrays("digits", "test")
    logits = np.asarray(model.predict(x, verbose=0), dtype=np.float64)
    z = logits - logits.max(-1, keepdims=True)
    probs = (np.exp(z) / np.exp(z).sum(-1, keepdims=True)).mean(1)
    assert float(row[1]) == round(float(np.mean(probs.argmax(1) == y)), 4)
    nll = -np.mean(np.log(probs[np.arange(len(y)), y]))
    assert abs(float(row[2]) - nll) < 1e-4
