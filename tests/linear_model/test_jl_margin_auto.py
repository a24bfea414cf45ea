"""JLMarginClassifier's default ``margin="auto"`` (issue 20, item 3): scale-free, no budget.

``margin="auto"`` is the limit ``rho -> 0+`` of Alg. 3's margin loss: the
selection scores the 0-1 loss of the projected rows, which no positive
scaling of the rows changes, so the score needs no data-dependent scale.
A fixed margin relative to the clip radius (the old default 0.1) exceeds the
margins of rows whose shared part is a small fraction of their norm (unit
rows in d = 200: ~0.07) and leaves the selection at chance.
"""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from skdpp.linear_model._algorithms import jl_margin as jla
from skdpp.linear_model._algorithms import jl_kernels as ms
from skdpp.linear_model._jl_margin import JLMarginClassifier
from tests.linear_model.test_jl_margin import _LABELS, _fit_on, labelled_users
from tests.privacy.harness import adversarial_neighbours, assert_sensitivity


def sphere_rank2(n_users, n_features, n_rows, n_test, seed):
    """Unit-sphere rows, labels ``sign(<U* v_i, x>)`` with a shared rank-2 ``U*``."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((n_features, 2)))[0]
    V = rng.standard_normal((n_users, 2))

    def rows(m):
        X = rng.standard_normal((n_users * m, n_features))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        g = np.repeat(np.arange(n_users), m)
        y = np.where(np.einsum("nd,dk,nk->n", X, U, V[g]) > 0, 1, -1)
        return X, y, g

    return rows(n_rows), rows(n_test)


def local_logistic(train, test):
    """Accuracy of one (non-private) logistic regression per user on its own rows."""
    (X, y, g), (Xt, yt, gt) = train, test
    correct = []
    for u in np.unique(g):
        a, b = g == u, gt == u
        if np.unique(y[a]).size < 2:
            correct.append(yt[b] == y[a][0])
            continue
        correct.append(LogisticRegression().fit(X[a], y[a]).predict(Xt[b]) == yt[b])
    return float(np.mean(np.concatenate(correct)))


def accuracy(clf, train, test):
    (X, y, g), (Xt, yt, gt) = train, test
    clf.fit(X, y, groups=g)
    return float(np.mean(clf.predict(Xt, groups=gt) == yt))


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_margin_beats_local_logistic_on_unit_sphere_rank2(seed):
    """d = 200, unit rows, epsilon = 8: the old fixed margin 0.1 was at chance here."""
    train, test = sphere_rank2(1000, 200, 20, 20, seed)
    local = local_logistic(train, test)
    auto = accuracy(JLMarginClassifier(n_components=2, epsilon=8.0, n_candidates=64,
                                       random_state=seed), train, test)
    assert auto >= local + 0.05, (auto, local)


def test_auto_margin_is_invariant_to_the_feature_scale():
    train, test = sphere_rank2(600, 50, 20, 10, seed=3)
    accs = []
    for scale in (1e-3, 1.0, 1e3):
        tr = (train[0] * scale,) + train[1:]
        te = (test[0] * scale,) + test[1:]
        accs.append(accuracy(JLMarginClassifier(n_components=2, epsilon=8.0,
                                                n_candidates=32, random_state=0), tr, te))
    # the released clip radius lies on a power-of-two grid, so the clipped rows
    # differ slightly with the scale; the 0-1 score itself is scale-free
    assert max(accs) - min(accs) <= 0.02, accs


def test_auto_threshold_is_zero_and_fixed_margin_is_relative():
    assert jla.margin_threshold("auto", 3.0) == 0.0
    assert jla.margin_threshold("auto", None) == 0.0
    assert jla.margin_threshold(0.1, 2.0) == pytest.approx(0.2)
    assert jla.margin_threshold(0.1, None) == pytest.approx(0.1)


def test_auto_margin_uses_the_jl_cap():
    """rho -> 0+ in Alg. 3's k' = log(n / beta) / rho^2: the cap min(d, 256)."""
    X, y, g = labelled_users(30, 4, 6, seed=2)
    clf = JLMarginClassifier(n_components=1, n_candidates=8, n_directions=4,
                             epsilon=np.inf, clip_norm=1.0, classes=["neg", "pos"],
                             random_state=0).fit(X, y, groups=g)
    assert clf.jl_dim_ == 6


def test_report_names_the_margin_rule():
    X, y, g = labelled_users(30, 4, 6, seed=2)
    common = dict(n_components=1, jl_dim=4, n_candidates=8, n_directions=4, epsilon=4.0,
                  classes=["neg", "pos"], random_state=0)
    auto = JLMarginClassifier(**common).fit(X, y, groups=g)
    assert auto.margin == "auto"
    assert any("Margin: 'auto'" in note for note in auto.privacy_report_.notes)
    fixed = JLMarginClassifier(margin=0.1, **common).fit(X, y, groups=g)
    assert any("Margin: 0.1 times the clip radius" in n for n in fixed.privacy_report_.notes)


def test_auto_margin_selection_sensitivity_on_adversarial_neighbours():
    """Every release (labels, clip, subspace, selection, cold start) within its sensitivity."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(**_LABELS, margin="auto")
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, n_rows=500):
        ratios = assert_sensitivity(fit, (X, y, g), (X2, y2, g2))
        assert max(ratios) <= 1 + 1e-9, name


def test_sensitivity_harness_catches_a_score_with_larger_sensitivity(monkeypatch):
    """Broken variant: per-user loss *counts* (not fractions) as the selection's score."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(**_LABELS, margin="auto")
    neighbours = {name: (X2, y2, g2)
                  for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, n_rows=500)}
    assert_sensitivity(fit, (X, y, g), neighbours["many_rows"])  # correct: passes

    def counts_block(block, state, bc):
        yZ = state.Y[:, bc.problem, None] * state.Z
        losses = ms.candidate_user_losses(state.score, yZ, bc.candidates, bc.directions,
                                          bc.threshold)
        return (losses * state.score.counts[None, :]).sum(axis=1), state

    monkeypatch.setattr(jla, "candidate_scores_block", counts_block)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(fit, (X, y, g), neighbours["many_rows"])
