"""User-level differentially private preprocessing (:ref:`preprocessing`).

Transformers with the conventions of skdpp's estimators (``fit(X, y=None,
groups=None)``, ``epsilon`` / ``delta`` / ``random_state``, ``privacy_report_``):
:class:`PrivateStandardScaler` (per-feature location and scale),
:class:`PrivateOneHotEncoder` (categories chosen by private partition selection, or
given) and :class:`PrivateSimpleImputer` (per-column mean or median). In a ``Pipeline``
they make the preprocessing part of the guarantee.
"""

from ._data import PrivateStandardScaler
from ._encoders import PrivateOneHotEncoder
from ._impute import PrivateSimpleImputer

__all__ = ["PrivateOneHotEncoder", "PrivateSimpleImputer", "PrivateStandardScaler"]
