import numpy as np
import pytest
from zoo_testing import np_token_figures

import ensemble_zoo as ez


def generation(rng, members=3, batch=3, length=7):
    """Arrays laid out as `generate(..., return_uncertainty=True)` returns
    them: row 0 generates 4 tokens (the last one the end token), row 1 the
    whole length, row 2 none; zeros outside the generated tokens."""
    logits = rng.normal(size=(batch, members, length, 11)) * 2
    tokens = rng.integers(0, 11, size=(batch, length))
    figures = np_token_figures(logits, tokens)
    mask = np.zeros((batch, length), bool)
    mask[0, 2:6] = True
    mask[1] = True
    # Expectation of products: members weighted by their likelihood of
    # the generated tokens before each position.
    taken = np.where(mask[:, None], figures["member_log_probs"], 0.0)
    prefix = np.cumsum(taken, axis=-1) - taken
    weights = np.exp(prefix) / np.exp(prefix).sum(axis=1, keepdims=True)
    ep = np_token_figures(logits, tokens, weights=weights)
    for name in (
        "total",
        "aleatoric",
        "epistemic",
        "expected_pairwise_kl",
        "reverse_mutual_information",
    ):
        figures["ep_" + name] = ep[name]
    out = {"generated_mask": mask}
    for name, value in figures.items():
        where = mask[:, None] if value.ndim == 3 else mask
        out[name] = np.where(where, value, 0.0).astype("float32")
    return out


def reference(out, member=None):
    """Loops over rows and generated tokens, from the definitions."""
    scores = {}
    for row in range(out["generated_mask"].shape[0]):
        ts = np.flatnonzero(out["generated_mask"][row])
        if member is None:
            lp, h = out["log_prob"][row, ts], out["total"][row, ts]
        else:
            lp, h = out["member_log_probs"][row, member, ts], out["member_entropy"][row, member, ts]
        if not len(ts):
            continue
        row_scores = {
            "maximum_sequence_probability": -lp.sum(),
            "perplexity": -lp.mean(),
            "mean_token_entropy": h.mean(),
            "max_token_entropy": h.max(),
        }
        if member is None:
            for name, figure in [
                ("total", "total"),
                ("data", "aleatoric"),
                ("mutual_information", "epistemic"),
                ("expected_pairwise_kl", "expected_pairwise_kl"),
                ("reverse_mutual_information", "reverse_mutual_information"),
            ]:
                row_scores["pe_" + name] = np.mean([out[figure][row, t] for t in ts])
                row_scores["ep_" + name] = np.mean([out["ep_" + figure][row, t] for t in ts])
            ll = [
                sum(float(out["member_log_probs"][row, m, t]) for t in ts)
                for m in range(out["member_log_probs"].shape[1])
            ]
            log_ep = np.log(np.mean(np.exp(ll)))
            row_scores["ep_mc_total"] = -log_ep / len(ts)
            row_scores["ep_mc_reverse_mutual_information"] = (log_ep - np.mean(ll)) / len(ts)
        scores[row] = row_scores
    return scores


def test_every_estimator_equals_a_loop_over_the_generated_tokens(rng):
    out = generation(rng)
    scores = ez.metrics.sequence_uncertainty(out)
    assert sorted(scores) == sorted(
        (
            "maximum_sequence_probability",
            "perplexity",
            "mean_token_entropy",
            "max_token_entropy",
            "pe_total",
            "pe_data",
            "pe_mutual_information",
            "pe_expected_pairwise_kl",
            "pe_reverse_mutual_information",
            "ep_total",
            "ep_data",
            "ep_mutual_information",
            "ep_expected_pairwise_kl",
            "ep_reverse_mutual_information",
            "ep_mc_total",
            "ep_mc_reverse_mutual_information",
        )
    )
    expected = reference(out)
    for name, values in scores.items():
        assert values.shape == (3,) and values.dtype == np.float64
        for row in (0, 1):
            assert values[row] == pytest.approx(expected[row][name], rel=1e-5, abs=1e-6), (
                name,
                row,
            )
        assert np.isnan(values[2]), name  # nothing generated
    for kind in ("pe", "ep"):
        np.testing.assert_allclose(
            scores[f"{kind}_expected_pairwise_kl"][:2],
            scores[f"{kind}_mutual_information"][:2]
            + scores[f"{kind}_reverse_mutual_information"][:2],
            atol=1e-5,
        )
    assert (scores["ep_mc_reverse_mutual_information"][:2] > 0).all()
    assert (
        np.abs(scores["ep_mutual_information"] - scores["pe_mutual_information"])[:2].max() > 1e-4
    )
    # One member's baselines.
    member = ez.metrics.sequence_uncertainty(out, member=1)
    assert sorted(member) == sorted(
        ("maximum_sequence_probability", "perplexity", "mean_token_entropy", "max_token_entropy")
    )
    for name, values in member.items():
        for row in (0, 1):
            assert values[row] == pytest.approx(reference(out, member=1)[row][name], rel=1e-5)


def test_one_member_has_zero_ensemble_divergences(rng):
    scores = ez.metrics.sequence_uncertainty(generation(rng, members=1))
    # The PE measures average the token figures (0 up to the float64
    # reference's round-off here; exactly 0 from `ez.ops.token_uncertainty`).
    for kind in ("pe", "ep"):
        for name in ("mutual_information", "expected_pairwise_kl", "reverse_mutual_information"):
            np.testing.assert_allclose(scores[f"{kind}_{name}"][:2], 0.0, atol=1e-12, err_msg=name)
    assert (scores["ep_mc_reverse_mutual_information"][:2] == 0.0).all()
    np.testing.assert_allclose(scores["ep_mc_total"][:2], scores["perplexity"][:2], rtol=1e-6)


def test_bad_outputs_are_clear_errors(rng):
    out = generation(rng)
    with pytest.raises(TypeError, match="dict"):
        ez.metrics.sequence_uncertainty([out])
    with pytest.raises(ValueError, match="lacks.*member_entropy"):
        ez.metrics.sequence_uncertainty({k: v for k, v in out.items() if k != "member_entropy"})
    with pytest.raises(ValueError, match="bool"):
        ez.metrics.sequence_uncertainty(dict(out, generated_mask=out["generated_mask"].astype(int)))
    with pytest.raises(ValueError, match=r"total.*\(batch, length\)"):
        ez.metrics.sequence_uncertainty(dict(out, total=out["total"][:, :3]))
    bad = dict(out, epistemic=np.where(out["generated_mask"], np.nan, 0.0))
    with pytest.raises(ValueError, match="NaN"):
        ez.metrics.sequence_uncertainty(bad)
    with pytest.raises(ValueError, match=r"member.*\[0, 3\)"):
        ez.metrics.sequence_uncertainty(out, member=3)
