"""Synthetic personalized data sets matching the papers' experiments.

Every generator returns ``X, y, groups, info``: ``groups`` the int64 user id of each row
(``0..n_users-1``, rows sorted by user), ``info`` a :class:`sklearn.utils.Bunch` with the
ground truth and, when requested, held-out rows of the same users (``X_test, y_test,
groups_test``). All randomness comes from ``random_state``.
"""

import numbers

import numpy as np
from sklearn.utils import Bunch, check_random_state

from ..utils._grouped import UserIndex, split_within_users

__all__ = [
    "make_additive_personalized_regression",
    "make_personalized_margin_classification",
    "make_shared_representation_regression",
    "make_skewed_ratings",
]

_FEATURE_DISTS = ("gaussian", "uniform", "rademacher")


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def _check_float(name, value, low, high, *, low_open=False, high_open=True):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and not np.isnan(value) and (value > low if low_open else value >= low) \
        and (value < high if high_open else value <= high)
    if not ok:
        raise ValueError(f"`{name}` must be a number in {'([' [not low_open]}{low}, "
                         f"{high}{')]' [not high_open]}; got {value!r}.")
    return float(value)


def _check_sizes(n_users, n_features, n_components, m, m_test):
    n_users, d, k, m = (_check_int(name, v, 1) for name, v in (
        ("n_users", n_users), ("n_features", n_features),
        ("n_components", n_components), ("n_samples_per_user", m)))
    if k > d:
        raise ValueError(f"`n_components` must be <= n_features={d}; got {k}. Lower "
                         "n_components.")
    return n_users, d, k, m, _check_int("n_test_samples_per_user", m_test, 0)


def _orthonormal(rng, d, k):
    """U* from the QR decomposition of a d x k standard Gaussian matrix."""
    return np.linalg.qr(rng.standard_normal((d, k)))[0]


def _draw_features(rng, shape, feature_dist):
    if feature_dist == "gaussian":
        return rng.standard_normal(shape)
    if feature_dist == "uniform":  # unit variance, 1-sub-Gaussian
        return rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=shape)
    return rng.choice(np.array([-1.0, 1.0]), size=shape)  # rademacher


def _unit_rows(V):
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.where(norms > 0, norms, 1.0)


def _regression_rows(rng, n_users, m_rows, features, signal, noise):
    """``m_rows`` rows per user (sorted by user): ``X = features(n_rows)``,
    ``y = signal(X, groups) + noise * N(0, 1)``."""
    groups = np.repeat(np.arange(n_users, dtype=np.int64), m_rows)
    X = features(groups.shape[0])
    y = signal(X, groups)
    y += noise * rng.standard_normal(groups.shape[0])
    return X, y, groups


def make_shared_representation_regression(
    n_users=20000, n_features=50, n_components=2, n_samples_per_user=10, *, noise=0.01,
    head_norm="unit", feature_dist="gaussian", n_test_samples_per_user=10, random_state=None,
):
    """Linear regression with a shared low-rank representation and personal heads.

    ``y = <x, U* v_i*> + noise * N(0, 1)`` for user ``i``, with a shared orthonormal
    ``U*`` (``d x k``) and a personal head ``v_i*`` (Snedeker et al. 2025, Section 3.4
    and App. B.4; Jain et al. 2021, Section 6).

    Parameters
    ----------
    n_users : int, default=20000
        Number of users ``n``.
    n_features : int, default=50
        Dimension ``d``.
    n_components : int, default=2
        Rank ``k <= d`` of the shared representation.
    n_samples_per_user : int, default=10
        Training rows per user ``m``.
    noise : float, default=0.01
        Standard deviation ``R`` of the Gaussian label noise.
    head_norm : {"unit", "gaussian"}, default="unit"
        ``"gaussian"``: ``v_i* ~ N(0, I_k)`` as in the papers; ``"unit"``: that draw
        normalised, as in the authors' code (App. B.4 is tuned for it).
    feature_dist : {"gaussian", "uniform", "rademacher"}, default="gaussian"
        I.i.d. coordinates: ``N(0, 1)`` (the papers), uniform on ``[-sqrt(3), sqrt(3)]``
        or ``±1`` (1-sub-Gaussian, identity covariance: Snedeker et al., Assumption 5).
    n_test_samples_per_user : int, default=10
        Held-out rows per user from the same distributions; 0 for none.
    random_state : int, RandomState instance or None, default=None
        Seed of all draws.

    Returns
    -------
    X, y, groups : ndarray of shapes (n_rows, n_features), (n_rows,), (n_rows,)
        ``n_rows = n_users * n_samples_per_user``.
    info : Bunch
        ``U`` (d, k) ``U*``, the Q factor of a Gaussian matrix (App. B.4); ``V``
        (n_users, k) heads ``v_i*``; ``coef`` (n_users, d) ``U* v_i*``; ``noise`` (the
        Bayes risk is ``noise ** 2``); test rows.

    References
    ----------
    .. [1] Snedeker, Zhou, Bassily. "Private Model Personalization Revisited", ICML 2025,
       arXiv:2506.19220, Section 3.4 and App. B.4.
    .. [2] Jain, Rush, Smith, Song, Thakurta. "Differentially Private Model
       Personalization", NeurIPS 2021, Section 6.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> X, y, groups, info = make_shared_representation_regression(
    ...     n_users=100, n_features=5, n_components=2, random_state=0)
    >>> X.shape, y.shape, groups.shape, info.U.shape, info.V.shape
    ((1000, 5), (1000,), (1000,), (5, 2), (100, 2))
    >>> info.X_test.shape
    (1000, 5)
    """
    n_users, d, k, m, m_test = _check_sizes(n_users, n_features, n_components,
                                            n_samples_per_user, n_test_samples_per_user)
    noise = _check_float("noise", noise, 0, np.inf)
    for name, value, options in (("head_norm", head_norm, ("unit", "gaussian")),
                                 ("feature_dist", feature_dist, _FEATURE_DISTS)):
        if value not in options:
            raise ValueError(f"`{name}` must be one of {list(options)}; got {value!r}.")
    rng = check_random_state(random_state)
    U = _orthonormal(rng, d, k)
    V = rng.standard_normal((n_users, k))
    if head_norm == "unit":
        V = _unit_rows(V)

    def draw(m_rows):
        return _regression_rows(
            rng, n_users, m_rows, lambda n: _draw_features(rng, (n, d), feature_dist),
            lambda X, groups: np.einsum("ij,ij->i", X @ U, V[groups]), noise)

    X, y, groups = draw(m)
    info = Bunch(U=U, V=V, coef=V @ U.T, noise=noise)
    if m_test > 0:
        info.X_test, info.y_test, info.groups_test = draw(m_test)
    return X, y, groups, info


def make_additive_personalized_regression(
    n_users=1000, n_features=100, n_samples_per_user=100, *, n_personal_features=5,
    personal_scale=0.01, global_scale=10.0, noise=0.01, n_test_samples_per_user=0,
    random_state=None,
):
    """Linear regression with a global model plus personal offsets (additive model).

    Bietti et al. (2022), Section 6: ``theta_i* = theta_0 + delta_i`` with ``theta_0 ~
    N(0, global_scale^2 I_d)`` and ``delta_i`` zero except on the last
    ``n_personal_features`` coordinates (``N(0, personal_scale^2)``); ``x ~ N(0,
    diag(1/k))``, ``k = 1..d``; ``y = <theta_i*, x> + noise * N(0, 1)``.

    Parameters
    ----------
    n_users : int, default=1000
        Number of users ``N``.
    n_features : int, default=100
        Dimension ``d``.
    n_samples_per_user : int, default=100
        Training rows per user (the paper streams fresh minibatches instead).
    n_personal_features : int, default=5
        Number of trailing coordinates on which users differ.
    personal_scale : float, default=0.01
        Standard deviation of the personal offsets.
    global_scale : float, default=10.0
        Standard deviation of the shared parameters ``theta_0``.
    noise : float, default=0.01
        Standard deviation ``tau`` of the label noise.
    n_test_samples_per_user : int, default=0
        Held-out rows per user; 0 for none.
    random_state : int, RandomState instance or None, default=None
        Seed of all draws.

    Returns
    -------
    X, y, groups : ndarray of shapes (n_rows, n_features), (n_rows,), (n_rows,)
        ``n_rows = n_users * n_samples_per_user``.
    info : Bunch
        ``w`` (n_features,) ``theta_0``; ``theta`` (n_users, n_features) offsets
        ``delta_i``; ``coef`` ``w + theta``; ``feature_variances`` the diagonal of
        ``Sigma``; ``bayes_risk`` ``noise ** 2``; ``noise``; test rows.

    Notes
    -----
    The paper's excess risk of a model ``(w, theta)`` is ``mean(((w + theta - info.coef)
    ** 2) @ info.feature_variances)``; add ``bayes_risk`` for the population MSE.

    References
    ----------
    .. [1] Bietti, Wei, Dudík, Langford, Wu. "Personalization Improves Privacy-Accuracy
       Tradeoffs in Federated Learning", ICML 2022, arXiv:2202.05318, Section 6
       (synthetic dataset) and App. A.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.datasets import make_additive_personalized_regression
    >>> X, y, groups, info = make_additive_personalized_regression(
    ...     n_users=10, n_features=8, n_samples_per_user=20, n_personal_features=2,
    ...     random_state=0)
    >>> X.shape, info.theta.shape
    ((200, 8), (10, 8))
    >>> bool(np.all(info.theta[:, :6] == 0))
    True
    """
    n_users, d, m, p, m_test = (_check_int(name, v, low) for name, v, low in (
        ("n_users", n_users, 1), ("n_features", n_features, 1),
        ("n_samples_per_user", n_samples_per_user, 1),
        ("n_personal_features", n_personal_features, 0),
        ("n_test_samples_per_user", n_test_samples_per_user, 0)))
    if p > d:
        raise ValueError(f"`n_personal_features` must be <= n_features={d}; got {p}.")
    personal_scale, global_scale, noise = (
        _check_float(name, v, 0, np.inf) for name, v in (
            ("personal_scale", personal_scale), ("global_scale", global_scale),
            ("noise", noise)))
    rng = check_random_state(random_state)
    w = global_scale * rng.standard_normal(d)
    theta = np.zeros((n_users, d))
    theta[:, d - p:] = personal_scale * rng.standard_normal((n_users, p))
    coef = w + theta
    variances = 1.0 / np.arange(1, d + 1)
    std = np.sqrt(variances)

    def draw(m_rows):
        return _regression_rows(
            rng, n_users, m_rows, lambda n: rng.standard_normal((n, d)) * std,
            lambda X, groups: np.einsum("ij,ij->i", X, coef[groups]), noise)

    X, y, groups = draw(m)
    info = Bunch(w=w, theta=theta, coef=coef, feature_variances=variances,
                 bayes_risk=noise ** 2, noise=noise)
    if m_test > 0:
        info.X_test, info.y_test, info.groups_test = draw(m_test)
    return X, y, groups, info


def _project_unit_ball(A):
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1.0)


def make_skewed_ratings(
    n_users=10000, n_items=100, n_components=5, *, power=1.0, mean_items_per_user=20.0,
    noise=1e-3, test_size=0.2, random_state=None,
):
    """Ratings with a skewed (power-law) item frequency: multi-task regression.

    Krichene et al. (2023), App. C: item vectors ``theta_i`` and user vectors ``u_j``,
    ``N(0, I_d)`` projected onto the unit ball; item frequencies ``q_i`` of density ``a
    x^(a-1)`` on ``[0, 1]`` scaled to ``sum_i q_i = mean_items_per_user``; each (user,
    item) pair observed with probability ``q_i``, rating ``<theta_i, u_j> + noise * N(0,
    1)``.

    Parameters
    ----------
    n_users : int, default=10000
        Number of users ``n`` (users without an observed item are absent).
    n_items : int, default=100
        Number of items (tasks) ``m``.
    n_components : int, default=5
        Dimension ``d`` of the user and item vectors.
    power : float, default=1.0
        Power-law exponent ``a > 0`` (the paper uses 1 and 2).
    mean_items_per_user : float, default=20.0
        Sum of the item probabilities (clipped to 1 each).
    noise : float, default=1e-3
        Standard deviation ``sigma_F`` of the rating noise.
    test_size : float in [0, 1), default=0.2
        Fraction of each user's ratings held out (the paper's 80-20 split, by
        :func:`skdpp.utils.split_within_users`); 0 for no split.
    random_state : int, RandomState instance or None, default=None
        Seed of all draws.

    Returns
    -------
    X, y, groups : ndarray of shapes (n_ratings, 1), (n_ratings,), (n_ratings,)
        Item id (int64, ``0..n_items-1``), rating and user id of each training rating.
    info : Bunch
        ``user_factors`` ``u_j``; ``item_factors`` ``theta_i``; ``item_probabilities``
        ``q_i``; ``item_counts`` the training ratings per item; ``noise``; test rows.

    References
    ----------
    .. [1] Krichene, Jain, Song, Sundararajan, Thakurta, Zhang. "Multi-Task Differential
       Privacy Under Distribution Skew", ICML 2023, arXiv:2302.07975, App. C.

    Examples
    --------
    >>> from skdpp.datasets import make_skewed_ratings
    >>> X, y, groups, info = make_skewed_ratings(n_users=200, random_state=0)
    >>> X.shape[1], info.item_factors.shape, info.user_factors.shape
    (1, (100, 5), (200, 5))
    >>> bool(set(info.groups_test) <= set(groups))
    True
    """
    n_users, n_items, d = (_check_int(name, v, 1) for name, v in (
        ("n_users", n_users), ("n_items", n_items), ("n_components", n_components)))
    power, mean_items = (_check_float(name, v, 0, np.inf, low_open=True)
                         for name, v in (("power", power),
                                         ("mean_items_per_user", mean_items_per_user)))
    noise = _check_float("noise", noise, 0, np.inf)
    test_size = _check_float("test_size", test_size, 0, 1)
    rng = check_random_state(random_state)
    item_factors = _project_unit_ball(rng.standard_normal((n_items, d)))
    user_factors = _project_unit_ball(rng.standard_normal((n_users, d)))
    q = rng.random_sample(n_items) ** (1.0 / power)  # inverse CDF of a x^(a-1)
    q = np.minimum(q * (mean_items / q.sum()), 1.0)
    observed = rng.random_sample((n_users, n_items)) < q
    users, items = (a.astype(np.int64) for a in np.nonzero(observed))  # sorted by user
    y = np.einsum("ij,ij->i", user_factors[users], item_factors[items])
    y += noise * rng.standard_normal(users.shape[0])
    info = Bunch(user_factors=user_factors, item_factors=item_factors,
                 item_probabilities=q, noise=noise)
    if test_size > 0 and users.shape[0] > 0:
        train = split_within_users(UserIndex.from_groups(users), 1.0 - test_size, rng)
        info.X_test, info.y_test, info.groups_test = items[~train][:, None], y[~train], \
            users[~train]
        users, items, y = users[train], items[train], y[train]
    info.item_counts = np.bincount(items, minlength=n_items)
    return items[:, None], y, users, info


def make_personalized_margin_classification(
    n_users=1000, n_features=50, n_components=2, n_samples_per_user=10, *, radius=1.0,
    margin=0.05, head_norm=1.0, flip_y=0.0, n_test_samples_per_user=0, random_state=None,
):
    """Binary classification with a shared representation and a margin.

    Snedeker et al. (2025), Section 4: features uniform in the ball of radius ``r``, a
    shared orthonormal ``U*`` (``d x k``), heads with ``||v_i*|| = Gamma``, labels
    ``sign(<x, U* v_i*>)`` in ``{-1, +1}``; points with ``|<x, U* v_i*>| < rho`` are
    redrawn, so the true model has margin ``rho`` (zero margin loss ``l_rho``).

    Parameters
    ----------
    n_users : int, default=1000
    n_features : int, default=50
        Dimension ``d``.
    n_components : int, default=2
        Rank ``k <= d``.
    n_samples_per_user : int, default=10
        Training rows per user ``m``.
    radius : float, default=1.0
        Radius ``r`` of the feature ball (features uniform in it).
    margin : float, default=0.05
        Margin ``rho`` in ``[0, radius * head_norm)``; far above the score's std
        ``radius * head_norm / sqrt(n_features + 2)`` the rejection sampling raises
        (< ~0.1% of the draws accepted).
    head_norm : float, default=1.0
        Norm ``Gamma`` of the heads (``v_i* ~ N(0, I_k)`` rescaled).
    flip_y : float in [0, 0.5], default=0.0
        Probability of flipping each label after the margin selection (training and
        test rows); flipped rows are in ``info``.
    n_test_samples_per_user : int, default=0
        Held-out rows per user; 0 for none.
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    X, y, groups : ndarray of shapes (n_rows, n_features), (n_rows,), (n_rows,)
        ``n_rows = n_users * n_samples_per_user``; ``||x|| <= radius``; int64 labels
        in ``{-1, +1}``.
    info : Bunch
        ``U``, ``V``, ``margin``, ``flipped`` (bool per row); test rows and
        ``flipped_test``.

    References
    ----------
    .. [1] Snedeker, Zhou, Bassily. "Private Model Personalization Revisited", ICML 2025,
       arXiv:2506.19220, Section 4 (Definition 13, Algorithm 3).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.datasets import make_personalized_margin_classification
    >>> X, y, groups, info = make_personalized_margin_classification(
    ...     n_users=20, n_features=10, margin=0.1, random_state=0)
    >>> sorted(set(y.tolist()))
    [-1, 1]
    >>> scores = np.einsum("ij,ij->i", X @ info.U, info.V[groups])
    >>> bool(np.all(y * scores >= 0.1))
    True
    """
    n_users, d, k, m, m_test = _check_sizes(n_users, n_features, n_components,
                                            n_samples_per_user, n_test_samples_per_user)
    radius, head_norm = (_check_float(name, v, 0, np.inf, low_open=True)
                         for name, v in (("radius", radius), ("head_norm", head_norm)))
    margin = _check_float("margin", margin, 0, radius * head_norm)
    flip_y = _check_float("flip_y", flip_y, 0, 0.5, high_open=False)
    rng = check_random_state(random_state)
    U = _orthonormal(rng, d, k)
    V = head_norm * _unit_rows(rng.standard_normal((n_users, k)))
    W = V @ U.T  # (n_users, d) true weight vector of each user

    def draw(m_rows):
        pending = np.repeat(np.arange(n_users, dtype=np.int64), m_rows)
        n_total, n_draws = pending.shape[0], 0
        X_parts, g_parts = [], []
        while pending.shape[0] > 0:  # rounds of rejection sampling
            n = pending.shape[0]
            g = rng.standard_normal((n, d))
            g /= np.linalg.norm(g, axis=1, keepdims=True)
            x = g * (radius * rng.random_sample(n) ** (1.0 / d))[:, None]
            ok = np.abs(np.einsum("ij,ij->i", x, W[pending])) >= margin
            X_parts.append(x[ok])
            g_parts.append(pending[ok])
            pending = pending[~ok]
            n_draws += n
            if n_draws > 1000 * n_total and pending.shape[0] > 0:
                raise ValueError(
                    f"`margin`={margin} rejects almost every point (radius={radius}, "
                    f"head_norm={head_norm}, n_features={d}); use a margin below "
                    f"~{radius * head_norm / np.sqrt(d + 2):.3g} or a larger radius.")
        groups = np.concatenate(g_parts)
        order = np.argsort(groups, kind="stable")
        X, groups = np.concatenate(X_parts)[order], groups[order]
        y = np.where(np.einsum("ij,ij->i", X, W[groups]) >= 0, 1, -1).astype(np.int64)
        flipped = rng.random_sample(n_total) < flip_y
        y[flipped] *= -1
        return X, y, groups, flipped

    X, y, groups, flipped = draw(m)
    info = Bunch(U=U, V=V, margin=margin, flipped=flipped)
    if m_test > 0:
        info.X_test, info.y_test, info.groups_test, info.flipped_test = draw(m_test)
    return X, y, groups, info
