"""Stage the project's ``examples/plot_*.py`` scripts for sphinx-gallery.

sphinx-gallery needs a gallery header file next to the scripts; the
``examples/`` folder belongs to the estimator authors, so the docs build copies
the scripts into ``docs/_gallery_src/`` (generated, git-ignored) next to the
header below. Only top-level ``plot_*.py`` files are used. A script whose module
docstring does not start with a reStructuredText title (which sphinx-gallery
requires) is left out with a message, instead of failing the whole build.
"""

import ast
import re
import shutil
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

STAGING_DIR = Path(__file__).resolve().parent / "_gallery_src"

HEADER = """\
.. _examples:

Examples
========

Runnable scripts that reproduce each paper's experiment with skdpp's
estimators. They are rendered here **without being executed** (so the
documentation builds in seconds); run any of them with
``python examples/plot_<name>.py``, or build the documentation with
``-D plot_gallery=1`` to execute them all and embed their figures.
"""

_TITLE = re.compile(r"^\s*(\S[^\n]*)\n(=+|-+|\*+|#+|~+)\s*(\n|$)")


def _has_title(path):
    """Whether the script's module docstring starts with an RST title."""
    try:
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")),
                                      clean=True)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    if not docstring:
        return False
    match = _TITLE.match(docstring)
    return bool(match) and len(match.group(2)) >= len(match.group(1).rstrip())


def stage_examples(examples_dir):
    """Copy ``examples_dir/plot_*.py`` into :data:`STAGING_DIR`.

    Returns the list of staged file names.
    """
    examples_dir = Path(examples_dir)
    if STAGING_DIR.exists():
        shutil.rmtree(STAGING_DIR)
    STAGING_DIR.mkdir(parents=True)
    (STAGING_DIR / "GALLERY_HEADER.rst").write_text(HEADER, encoding="utf-8")
    staged = []
    for script in sorted(examples_dir.glob("plot_*.py")) if examples_dir.is_dir() else []:
        if not _has_title(script):
            logger.info(
                f"[skdpp docs] gallery: skipping {script.name}: its module docstring "
                "must start with a title underlined with '=' (sphinx-gallery format)."
            )
            continue
        shutil.copy2(script, STAGING_DIR / script.name)
        staged.append(script.name)
    logger.info(f"[skdpp docs] gallery: {len(staged)} example(s) staged: {staged}")
    return staged
