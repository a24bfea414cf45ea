"""Exceptions and warnings raised by skdpp."""


class PrivacyBudgetError(RuntimeError):
    """Raised when a fit would spend more privacy budget than requested.

    The accountant composes every release of a fit; if the resulting ε at the
    requested δ exceeds the requested ε, the fit is refused rather than reported.
    """


class PrivacyLeakWarning(UserWarning):
    """Warns about a use of an estimator that weakens its privacy guarantee.

    Examples: ``delta >= 1 / n_users``, or a clip norm chosen from the private data.
    """
