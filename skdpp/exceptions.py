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


class UselessFitWarning(UserWarning):
    """Warns that a fit's plan predicts mostly-noise shared parts.

    Computed from public values only (``n_users``, ε, δ and the fit's plan:
    the noise of its count releases), never from the data: neighbouring data
    sets give the same warning.
    """


class SecureNoiseSeedWarning(UserWarning):
    """Warns that an int ``random_state`` cannot seed secure noise.

    Under ``skdpp.set_config(noise="secure")`` every privacy-relevant draw comes
    from OpenDP's samplers or the operating system's cryptographic source, which
    no seed reproduces: the fit's ``random_state`` then seeds only its public
    randomness (initialisation, candidates), and two fits with the same int
    differ. Raised once per fit, from the parameter alone (never from the data).
    """
