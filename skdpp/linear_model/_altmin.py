"""The estimator :class:`PrivAltMinRegressor` (Jain, Rush, Smith, Song & Thakurta 2021).

Parameters, constraints, documentation and predictions; the algorithm (its
configuration, budget plan, driver and kernels) is
:mod:`skdpp.linear_model._algorithms.altmin`.
"""

from numbers import Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._algorithms import altmin
from ._representation import _clip_constraint, _RepresentationRegressor

__all__ = ["PrivAltMinRegressor"]


class PrivAltMinRegressor(_RepresentationRegressor):
    """Priv-AltMin: private alternating minimisation for a shared linear embedding.

    The model of :class:`PrivateFedRepRegressor` (``y ≈ b_i + <x, U v_i>``,
    ``U`` released under user-level (ε, δ)-DP, heads and intercepts local)
    fitted by Jain, Rush, Smith, Song & Thakurta (2021): Alg. 1 (alternating
    minimisation) with Alg. 2 (the ``U`` step by perturbing the
    least-squares sufficient statistics) and optionally Alg. 3 (private
    initialisation), with the same scale-free defaults. Derivations:
    :ref:`altmin`.

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding. ``"private_spectral"``: Snedeker et al. (2025),
        Alg. 2 (uses ``init_clip_norm``). ``"private_pairwise"``: Jain et al.'s
        Alg. 3 (labels clipped to ``label_clip``). ``"random"``: random
        orthonormal (free). An array: a *public* warm start.
    max_iter : int, default=1
        Number of rounds ``T >= 0`` of Alg. 1; one full-batch epoch was best
        on the papers' setting for ``ε <= 8``.
    schedule : {"full", "disjoint"}, default="full"
        Every user in every round (the paper's experiment; ``2T`` releases),
        or each user in one round chosen by a keyed hash of its id (Alg. 1,
        lines 2-4; the loop costs one round, see Notes).
    fit_intercept : bool, default=True
        Per-user intercepts, as in :class:`PrivateFedRepRegressor`.
    personal_rows : {"all", "holdout"}, default="all"
        All of a user's rows, or the paper's ``S^1``, for the personal parts.
    personal_ridge : float, default=10.0
        ``κ >= 0``, as in :class:`PrivateFedRepRegressor`; ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``η``: each row's ``vec(x v^T)`` is clipped to this norm (Alg. 2, line 1).
        ``"auto"``: the ``clip_quantile`` of the users' root mean square
        ``||x_r|| ||v_i||`` at ``U_0``. ``None`` only with ``epsilon=np.inf``.
    label_clip : float, "auto" or None, default="auto"
        ``ζ``: each (centred) label is clipped to ``[-ζ, ζ]`` (Alg. 2 and
        Alg. 3). ``"auto"``: the ``clip_quantile`` of the users' root mean
        square centred targets.
    psd_floor : float, default=32.0
        ``>= 0``: the eigenvalues of the noisy Gram ``W_priv`` are raised to at
        least ``psd_floor * σ * sqrt(dk)`` (``σ`` its noise std) before the
        solve of Alg. 2, line 3 (post-processing, see Notes). No effect with
        ``epsilon=np.inf``.
    init_clip_norm, head_clip_norm : float, "auto" or None, default="auto"
        As in :class:`PrivateFedRepRegressor` (``init_clip_norm``: with
        ``init="private_spectral"``).
    clip_quantile : float in (0, 1], default=0.5
        As in :class:`PrivateFedRepRegressor`.
    budget_shares : dict or None, default=None
        Shares of phases ``"clip"``, ``"init"``, ``"cold_start"``, as in
        :class:`PrivateFedRepRegressor`.
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: heads and ``U`` statistics on the same ``S^0`` rows.
        ``"disjoint"``: on two keyed random halves of ``S^0`` (Alg. 1).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf``: no noise.
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1).
    random_state : int, RandomState instance or None, default=None
        Seeds the noise, the random init and the key of the split, halves
        and rounds.
    verbose : int, default=0
        Print one line per round when positive (public quantities only).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads, aligned with ``user_ids_`` (local, not released).
    intercepts_ : ndarray of shape (n_users_,)
        Personal intercepts (local; zeros with ``fit_intercept=False``).
    clip_norm_, label_clip_, init_clip_norm_, head_clip_norm_ : float or None
        The bounds used (released when ``"auto"``; None when unused).
    cold_start_head_, cold_start_intercept_, intercept_clip_, feature_scales_, \
            label_range_, local_only_, own_label_ranges_, user_ids_, n_users_, n_iter_, \
            privacy_report_, n_features_in_
        As for :class:`PrivateFedRepRegressor` (``n_iter_``: rounds run).

    See Also
    --------
    PrivateFedRepRegressor : Snedeker et al. (2025), private federated gradient
        steps on ``U``.

    Notes
    -----
    **Guarantee, randomness, input domain**: as for
    :class:`PrivateFedRepRegressor` (``label_clip_`` is released too; halves
    and rounds are keyed hashes). **Scales, label range, cold start, useless
    fits**: :ref:`auto_rules`.

    **The U step (Alg. 2).** Each row gives ``W_r = clip(vec(x_r v_i^T); η)``
    (formed from unit vectors, so the bound holds in floating point) and
    ``ỹ_r = clip(y_r; ζ)``; each user contributes the *mean* over its rows
    of ``W_r W_r^T`` and of ``ỹ_r W_r``; the sums are released as ``W_priv``
    (symmetric noise) and ``b_priv``, then ``U = QR(unvec(argmin u^T W_priv
    u - 2 u^T b_priv))``.

    **Budget plan and sensitivities** (replace one user, Frobenius / L2):
    ``W_priv``, ``sqrt(2) η^2`` (PSD contributions of trace ``<= η^2``);
    ``b_priv``, ``2 ζ η``; ``init``, ``2 ψ_init`` or ``2 ζ^2``
    (``"private_pairwise"``); ``cold_start`` and ``clip`` as for
    :class:`PrivateFedRepRegressor`. Phases ``clip``, ``init``, ``iterations``
    (``2T`` releases, 2 with ``schedule="disjoint"``; the rest) and
    ``cold_start``, calibrated jointly on the exact (μ-GDP) composition (not
    the paper's ``Δ_{ε,δ}``). With ``schedule="disjoint"`` every user enters
    only the round its id hashes to, so by parallel composition only round 1
    is charged (later rounds are ledger branches at no cost); a replacing
    user with another id adds and removes one user in two rounds
    (sensitivities ``η^2`` and ``ζ η``), no more than one round's cost.

    **Deviations from the paper** (none affects privacy).

    * Per-user means instead of Jain et al.'s sum of ``m/4`` rows (unbounded
      with unequal row counts; with equal counts the same solve).
    * Line 3 is not convex when noise makes ``W_priv`` indefinite: its
      eigenvalues are raised to ``psd_floor * σ sqrt(dk)`` (``2 σ sqrt(dk)``
      is about the noise's spectral norm). ``psd_floor=32`` was tuned on the
      papers' setting (n=20 000, d=50, k=2, m=10;
      ``benchmarks/bench_representation.py``): the step becomes ``U =
      QR(unvec(b_priv))`` for ``ε <= 8`` and the test MSE at ε = 1, 2, 4, 8
      drops from 0.07, 0.17, 0.08, 0.02 (``psd_floor=2``) to 0.028, 0.007,
      0.003, 0.002; for much larger ε the exact solve is recovered.
    * ``batch_mode="same"``: the halves of ``"disjoint"`` hold 2-3 rows at
      ``m = 10``, too few for the heads.
    * Initialisation and iterations use ``S^0``; final heads ``S^1``
      (Theorem 4.2) only with ``personal_rows="holdout"``. Alg. 3's ``sym``
      is ``(M + M^T)/2``. ``schedule="disjoint"`` rounds hold about ``n / T``
      users (binomial sizes).
    * Added, as in :class:`PrivateFedRepRegressor`: the cold-start part,
      intercepts, shrinkage and ``"auto"`` bounds; ``personal_rows="holdout"``,
      ``personal_ridge=0``, ``fit_intercept=False`` and numeric bounds give
      the paper's algorithm.

    References
    ----------
    .. [1] Jain, P., Rush, J., Smith, A., Song, S. and Thakurta, A. G. (2021).
           Differentially Private Model Personalization. Advances in Neural
           Information Processing Systems 34 (NeurIPS 2021), 29723-29735.
    .. [2] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. ICML. arXiv:2506.19220.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model import PrivAltMinRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivAltMinRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape, est.heads_.shape
    ((10, 2), (2000, 2))
    >>> [(p.name, p.count) for p in est.privacy_report_.phases]
    [('clip', 163), ('init', 1), ('iterations', 2), ('cold_start', 3)]
    """

    _algorithm = altmin
    _parameter_constraints = {
        **_RepresentationRegressor._parameter_constraints,
        "schedule": [StrOptions({"full", "disjoint"})],
        "label_clip": _clip_constraint(),
        "psd_floor": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=1,
                 schedule="full", fit_intercept=True, personal_rows="all",
                 personal_ridge=10.0, clip_norm="auto", label_clip="auto", psd_floor=32.0,
                 init_clip_norm="auto", head_clip_norm="auto", clip_quantile=0.5,
                 budget_shares=None, batch_mode="same", epsilon=1.0, delta=1e-6,
                 random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.schedule = schedule
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.clip_norm = clip_norm
        self.label_clip = label_clip
        self.psd_floor = psd_floor
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.clip_quantile = clip_quantile
        self.budget_shares = budget_shares
        self.batch_mode = batch_mode
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose
