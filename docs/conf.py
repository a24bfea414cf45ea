"""Sphinx configuration for the skdpp documentation.

Build (warnings are errors; the examples gallery is NOT executed by default)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Build and execute the gallery examples (slow; needs matplotlib)::

    python -m sphinx -W --keep-going -b html -D plot_gallery=1 docs docs/_build/html

The API reference (``api/index.rst``) and the gallery sources are generated at
build time from what the installed ``skdpp`` actually exports (see
``api_reference.py`` and ``_gallery.py``), so an estimator that is not yet
exported never breaks the build: its entry is simply absent.
"""

import re
import shutil
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # api_reference.py, _gallery.py

import skdpp  # noqa: E402

import _gallery  # noqa: E402
import api_reference  # noqa: E402

# -- Project information -------------------------------------------------------
project = "skdpp"
author = "The skdpp developers"
copyright = f"{date.today().year}, {author}"
release = skdpp.__version__
version = ".".join(release.split(".")[:2])

# -- General configuration -----------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "_gallery_src", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"
default_role = "literal"

# autodoc / autosummary (scikit-learn's set-up: numpydoc renders the
# docstrings, autosummary generates one page per public object).
autosummary_generate = True
# set_output: scikit-learn's inherited docstring links to labels of its own docs.
autodoc_default_options = {"members": True, "inherited-members": True,
                           "exclude-members": "set_output"}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- HTML ----------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skdpp {release}"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_show_sourcelink = False

# -- Examples gallery (sphinx-gallery) -----------------------------------------
# Not executed by default (CI builds the docs in seconds); pass
# ``-D plot_gallery=1`` to run every example and embed its figures.
plot_gallery = "False"
sphinx_gallery_conf = {
    # Staged copies of the project's examples/plot_*.py (see _gallery.py).
    "examples_dirs": [str(_gallery.STAGING_DIR)],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "min_reported_time": 10,
}


def _prepare_generated_sources(app, config):
    # Runs before Sphinx reads any source: renders api/index.rst from the
    # objects skdpp really exports and stages the gallery examples.
    # Stale stubs of objects that are no longer exported would be orphans.
    shutil.rmtree(HERE / "api" / "generated", ignore_errors=True)
    api_reference.write_api_index(HERE / "api" / "index.rst")
    _gallery.stage_examples(HERE.parent / "examples")


_SECTION_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_PARAM_LINE = re.compile(r"^(?P<name>[*\w][\w, *\\]*?) : (?P<type>.+)$")
_TRAILING_UNDERSCORE = re.compile(r"(?<![\w`\\])([A-Za-z]\w*?)_(?![\w`])")


def _escape_trailing_underscores(app, what, name, obj, options, lines):
    """Escape ``n_users_``-style names in the *types* of numpydoc entries.

    In reStructuredText ``word_`` is a hyperlink reference, so a type such as
    ``ndarray of shape (n_users_, n_components)`` fails the build with
    "Unknown target name". numpydoc escapes the parameter names but not the
    types; this runs just before numpydoc and escapes them (``n_users\_``).
    """
    in_section = False
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and _SECTION_UNDERLINE.match(lines[i + 1]) and line.strip():
            in_section = line.strip() in {"Parameters", "Attributes", "Returns",
                                          "Yields", "Other Parameters", "Raises"}
            continue
        if not in_section or line[:1].isspace() or not line.strip():
            continue
        match = _PARAM_LINE.match(line)
        if match:
            typ = _TRAILING_UNDERSCORE.sub(r"\1\\_", match.group("type"))
            lines[i] = f"{match.group('name')} : {typ}"


def setup(app):
    app.connect("config-inited", _prepare_generated_sources, priority=0)
    # before numpydoc's own autodoc-process-docstring handler (priority 500)
    app.connect("autodoc-process-docstring", _escape_trailing_underscores, priority=400)
