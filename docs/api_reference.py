"""Render the API reference page (``api/index.rst``) from what skdpp exports.

The page is generated at every build (``conf.py`` calls
:func:`write_api_index`), in the spirit of scikit-learn's ``api_reference.py``:
each section lists a module's public objects (its ``__all__``, or the public
classes and functions defined in it when it has none), in the order given in
:data:`SECTIONS` and then alphabetically for anything new. Objects listed in
:data:`SECTIONS` that the installed package does not export (an estimator that
has not landed yet) are left out with a log message, so they never break the
build; new public objects appear automatically.

Every object is documented once, under the module listed here; the top-level
``skdpp`` namespace is summarised by a table linking to those pages.
"""

import importlib
import inspect
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

# (title, module, preferred order, description)
SECTIONS = [
    (
        "Personalized linear models",
        "skdpp.linear_model",
        ["PrivateFedRepRegressor", "PrivAltMinRegressor", "PPSGDRegressor",
         "JLMarginClassifier"],
        "Estimators that release a shared model under user-level differential "
        "privacy and fit a personal part for every user. See the "
        ":ref:`estimator pages <estimators>` of the user guide for how each "
        "parameter maps to its paper.",
    ),
    (
        "Personalized matrix factorization",
        "skdpp.decomposition",
        ["AdaptiveWeightMF"],
        "Private matrix factorization for recommendation: item embeddings are "
        "released, user embeddings stay with each user.",
    ),
    (
        "Private preprocessing",
        "skdpp.preprocessing",
        ["PrivateStandardScaler", "PrivateSimpleImputer", "PrivateOneHotEncoder"],
        "User-level private transformers, so that a whole Pipeline is covered by one "
        "report (see :ref:`preprocessing` and :func:`skdpp.privacy.privacy_report`).",
    ),
    (
        "Pipelines and export",
        "skdpp.pipeline",
        ["personalize", "to_dense", "transform_then"],
        "Helpers for Pipelines ending in a personalized estimator; "
        ":func:`skdpp.export_released` keeps only what may be published.",
    ),
    (
        "Model selection",
        "skdpp.model_selection",
        ["PerUserKFold", "PerUserShuffleSplit", "per_user_train_test_split"],
        "Splitters that hold out rows *within* each user, so that test users are "
        "seen in training (see :ref:`groups`).",
    ),
    (
        "Metrics and scorers",
        "skdpp.metrics",
        ["make_personalized_scorer", "rmse", "recall_at_k"],
        "A scorer that passes ``groups`` to ``predict``, and the papers' metrics.",
    ),
    (
        "Datasets",
        "skdpp.datasets",
        ["make_shared_representation_regression", "make_additive_personalized_regression",
         "make_skewed_ratings", "make_personalized_margin_classification",
         "load_movielens"],
        "Synthetic generators matching each paper's experiments, and a MovieLens "
        "loader.",
    ),
    (
        "Privacy: report",
        "skdpp.privacy",
        ["PrivacyReport", "PhaseReport", "privacy_report", "split_budget",
         "PipelinePrivacyReport"],
        "What every fitted estimator exposes as ``privacy_report_`` (see "
        ":ref:`privacy_report`), and the one report (and one budget) of a whole "
        "Pipeline or search.",
    ),
    (
        "Privacy: accounting and calibration",
        "skdpp.privacy",
        ["PrivacyAccountant", "LedgerEntry", "Phase", "calibrate", "plan_events",
         "gaussian_epsilon", "gaussian_delta", "gaussian_mu", "DEFAULT_RDP_ORDERS"],
        "One accountant per fit composes every release; calibration solves for the "
        "noise of a named budget plan.",
    ),
    (
        "Privacy: events",
        "skdpp.privacy",
        ["DpEvent", "GaussianEvent", "LaplaceEvent", "ExponentialEvent",
         "SelfComposedEvent", "ComposedEvent", "PoissonSampledEvent", "NoOpEvent",
         "NonPrivateEvent"],
        "Descriptions of each release, in the vocabulary of dp-accounting.",
    ),
    (
        "Privacy: mechanisms",
        "skdpp.privacy",
        ["clip_by_norm", "gaussian_mechanism", "gaussian_sum", "laplace_mechanism",
         "noisy_counts", "exponential_mechanism", "exponential_mechanism_probabilities"],
        "The functions of :mod:`skdpp.privacy.mechanisms`, the only place where "
        "privacy noise is drawn.",
    ),
    (
        "Fitting on a Dask cluster",
        "skdpp.distributed",
        ["UserBlocks", "fit_distributed", "predict_distributed", "DistributedPersonalParts",
         "DaskExecutor", "local_cluster"],
        "The same estimators on a Dask cluster: users' rows stay on the workers, every "
        "release happens once on the driver (see :ref:`distributed`). Needs the "
        "optional dependencies ``skdpp[dask]``.",
    ),
    (
        "Base classes",
        "skdpp.base",
        ["BasePersonalizedEstimator", "PersonalizedRegressorMixin",
         "PersonalizedClassifierMixin"],
        "For writing a new personalized estimator.",
    ),
    (
        "Exceptions and warnings",
        "skdpp.exceptions",
        ["PrivacyBudgetError", "PrivacyLeakWarning"],
        "",
    ),
]

def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is not None:
        return [n for n in names if hasattr(module, n)]
    return sorted(
        n for n, obj in vars(module).items()
        if not n.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", "").startswith(module.__name__)
    )


def _kind(obj):
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return "exception"
        try:
            from sklearn.base import BaseEstimator
            from sklearn.model_selection import BaseCrossValidator
            from sklearn.model_selection._split import BaseShuffleSplit
        except ImportError:  # pragma: no cover
            return "class"
        if issubclass(obj, (BaseEstimator, BaseCrossValidator, BaseShuffleSplit)):
            return "estimator"
        return "class"
    if callable(obj):
        return "function"
    return "data"


_TEMPLATES = {"estimator": "estimator.rst", "class": "class.rst",
              "exception": "class.rst", "function": "function.rst", "data": "data.rst"}


def _data_entry(modname, name, obj):
    """Name under which to document a module-level constant.

    autodoc reads a constant's ``#:`` doc comment from the module that assigns
    it; when ``name`` is only re-exported by ``modname``, return the dotted path
    relative to ``modname`` of the submodule that defines it (e.g.
    ``accounting.DEFAULT_RDP_ORDERS``), so its documentation is found.
    """
    import pkgutil

    from sphinx.pycode import ModuleAnalyzer

    module = importlib.import_module(modname)
    candidates = [modname]
    if hasattr(module, "__path__"):
        candidates += [f"{modname}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    for cand in candidates:
        try:
            sub = importlib.import_module(cand)
            docs = ModuleAnalyzer.for_module(cand).find_attr_docs()
        except Exception:  # noqa: BLE001 - a module without source is skipped
            continue
        if vars(sub).get(name) is obj and ("", name) in docs:
            return name if cand == modname else f"{cand[len(modname) + 1:]}.{name}"
    return name


def _collect():
    """-> list of (title, module, description, [(name, obj)], missing)."""
    sections, seen = [], {}
    claimed = {}  # module -> names claimed by a section
    for _, modname, order, _ in SECTIONS:
        claimed.setdefault(modname, set()).update(order)
    for title, modname, order, description in SECTIONS:
        try:
            module = importlib.import_module(modname)
        except ImportError as exc:
            logger.info(f"[skdpp docs] API: module {modname} not importable ({exc}); "
                        "section left out.")
            sections.append((title, modname, description, [], list(order)))
            continue
        public = _public_names(module)
        entries, missing = [], []
        for name in order:
            if name in public or (name in vars(module) and not hasattr(module, "__all__")):
                entries.append(name)
            else:
                missing.append(name)
        # new public objects: in the first section of this module not claimed elsewhere
        first_of_module = next(t for t, m, _, _ in SECTIONS if m == modname) == title
        if first_of_module:
            entries += sorted(n for n in public if n not in claimed[modname])
        rows = []
        for name in entries:
            obj = getattr(module, name)
            if id(obj) in seen and not isinstance(obj, (int, float, str, tuple)):
                continue
            seen[id(obj)] = f"{modname}.{name}"
            rows.append((name, obj))
        if missing:
            logger.info(f"[skdpp docs] API: not (yet) exported by {modname}, left out: "
                        f"{missing}")
        sections.append((title, modname, description, rows, missing))
    return sections, seen


def render():
    """Return the reStructuredText of the API reference page."""
    import skdpp

    sections, seen = _collect()
    out = [
        ".. _api:",
        "",
        "=============",
        "API reference",
        "=============",
        "",
        "This page is generated from the objects the installed skdpp exports "
        f"(version {skdpp.__version__}).",
        "",
    ]
    # Top-level namespace: links to the canonical pages.
    top = [n for n in getattr(skdpp, "__all__", []) if hasattr(skdpp, n)]
    top_rows, top_own = [], []
    for name in top:
        obj = getattr(skdpp, name)
        target = seen.get(id(obj))
        if target is not None:
            top_rows.append((name, target))
        elif not name.startswith("__"):
            top_own.append(name)
    out += ["Top-level namespace", "===================", "",
            "``import skdpp`` gives direct access to the estimators and to the "
            "privacy report:", ""]
    if top_rows:
        out += [".. list-table::", "   :header-rows: 1", "", "   * - Name", "     - Documented as"]
        for name, target in top_rows:
            out += [f"   * - ``skdpp.{name}``", f"     - :obj:`{target}`"]
        out.append("")
    else:
        out += ["(No estimator is exported by ``skdpp`` in this build yet.)", ""]
    if top_own:
        out += [".. currentmodule:: skdpp", "", ".. autosummary::",
                "   :toctree: generated/", ""]
        out += [f"   {n}" for n in top_own] + [""]

    for title, modname, description, rows, missing in sections:
        if not rows:
            continue
        out += [title, "=" * len(title), "", f".. currentmodule:: {modname}", "",
                f"Module ``{modname}``.", ""]
        if description:
            out += [description, ""]
        by_template = {}
        for name, obj in rows:
            kind = _kind(obj)
            entry = _data_entry(modname, name, obj) if kind == "data" else name
            by_template.setdefault(_TEMPLATES[kind], []).append(entry)
        # keep the section's order: one table per template, in first-seen order
        for template, names in by_template.items():
            out += [".. autosummary::", "   :toctree: generated/"]
            if template:
                out.append(f"   :template: {template}")
            out.append("")
            out += [f"   {n}" for n in names] + [""]
    return "\n".join(out) + "\n"


def write_api_index(path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render()
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path
