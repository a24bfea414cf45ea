"""Exceptions and warnings raised by skdpp."""


class PrivacyBudgetError(RuntimeError):
    """Raised when the composition of a fit's releases would exceed the requested ε at δ."""


class PrivacyLeakWarning(UserWarning):
    """Warns about a use that weakens the privacy guarantee (e.g. ``delta >= 1 / n_users``,
    or a clip norm chosen from the private data)."""


class UselessFitWarning(UserWarning):
    """Warns that a fit's plan predicts mostly-noise shared parts (computed from public
    values only: ``n_users``, ε, δ and the plan's count noise)."""


class SecureNoiseSeedWarning(UserWarning):
    """Warns that an int ``random_state`` cannot seed secure noise: it seeds only the
    public randomness (:ref:`secure_noise`), so two fits with the same int differ.
    Once per fit, from the parameter alone."""
