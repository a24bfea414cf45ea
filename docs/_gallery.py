"""Stage the project's ``examples/plot_*.py`` scripts for sphinx-gallery.

sphinx-gallery needs a gallery header file next to the scripts; the
``examples/`` folder belongs to the estimator authors, so the docs build copies
the scripts into ``docs/_gallery_src/`` (generated, git-ignored) next to the
header below. Only top-level ``plot_*.py`` files are used. A script whose module
docstring does not start with a reStructuredText title (which sphinx-gallery
requires) is left out with a message, instead of failing the whole build; a
title whose over/underline is shorter than the title is fixed in the copy.
"""

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

# optional overline, title line, underline
# In the raw source: the docstring opening, an optional overline, the title and
# its underline.
_SOURCE_TITLE = re.compile(
    r'^(?P<head>(?:[ \t]*#[^\n]*\n|[ \t]*\n)*[rRuU]?(?:"""|\'\'\')[ \t]*\n?)'
    r'(?:(?P<over>[ \t]*([=\-*#~])\3*)[ \t]*\n)?'
    r'(?P<title>[^\n]*\S)[ \t]*\n'
    r'(?P<under>[ \t]*([=\-*#~])\6*)[ \t]*(?=\n)'
)


def _normalise_title(text):
    """Return ``(text, fixed)`` with the docstring title's adornment lengths fixed.

    sphinx-gallery renders the module docstring as reStructuredText, where an
    overline/underline shorter than the title is a warning (an error with
    ``-W``). The staged copy gets adornments exactly as long as the title.
    Returns ``(None, False)`` when the docstring does not start with a title.
    """
    match = _SOURCE_TITLE.match(text)
    if not match:
        return None, False
    title = match.group("title").strip()
    char = match.group("under").strip()[0]
    over = match.group("over")
    fixed = (len(match.group("under").strip()) != len(title)
             or (over is not None and len(over.strip()) != len(title)))
    new = match.group("head")
    if over is not None:
        new += char * len(title) + "\n"
    new += title + "\n" + char * len(title)
    return new + text[match.end():], fixed


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
        text, fixed = _normalise_title(script.read_text(encoding="utf-8"))
        if text is None:
            logger.info(
                f"[skdpp docs] gallery: skipping {script.name}: its module docstring "
                "must start with a title underlined with '=' (sphinx-gallery format)."
            )
            continue
        if fixed:
            logger.info(f"[skdpp docs] gallery: {script.name}: title over/underline "
                        "length adjusted to the title in the staged copy.")
        (STAGING_DIR / script.name).write_text(text, encoding="utf-8")
        staged.append(script.name)
    logger.info(f"[skdpp docs] gallery: {len(staged)} example(s) staged: {staged}")
    return staged
