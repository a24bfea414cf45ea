"""User-level differentially private preprocessing.

Transformers whose fitted statistics are released under user-level DP, with
the conventions of skdpp's estimators: ``fit(X, y=None, groups=None)`` (groups
requested by default for metadata routing), ``epsilon`` / ``delta`` /
``random_state``, and a ``privacy_report_`` built from the fit's ledger. Inside
a ``Pipeline`` or ``ColumnTransformer`` they make the preprocessing part of
the guarantee instead of a statistic of the private data published as is.

* :class:`PrivateStandardScaler` -- per-feature location and scale;
* :class:`PrivateOneHotEncoder` -- categories chosen by private partition
  selection (or given, public);
* :class:`PrivateSimpleImputer` -- per-column mean or median.
"""

from ._data import PrivateStandardScaler
from ._encoders import PrivateOneHotEncoder
from ._impute import PrivateSimpleImputer

__all__ = ["PrivateOneHotEncoder", "PrivateSimpleImputer", "PrivateStandardScaler"]
