"""Loader for local copies of the MovieLens rating data sets (no downloads)."""

import csv
import io
import re
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

__all__ = ["load_movielens"]

_NO_GENRE = "(no genres listed)"


def _read_text(path):
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # ml-1m / ml-100k movie files are latin-1
        return raw.decode("latin-1")


def _lines(path, sep):
    return [line.split(sep) for line in _read_text(path).splitlines() if line.strip()]


def _read_ratings(path, delimiter, header):
    text = _read_text(path)
    if delimiter == "::":
        text, delimiter = text.replace("::", "\t"), "\t"
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=delimiter,
                           skiprows=1 if header else 0, ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise ValueError(
            f"Could not parse the ratings file {str(path)!r} as MovieLens 'userId{delimiter}"
            f"movieId{delimiter}rating{delimiter}timestamp' rows: {exc}. Check that the file "
            "is an unmodified MovieLens ratings file.") from exc
    if table.shape[0] == 0:
        table = np.empty((0, 4))
    if table.shape[1] != 4:
        raise ValueError(f"The ratings file {str(path)!r} has {table.shape[1]} columns; "
                         "MovieLens ratings files have 4 (user id, movie id, rating, "
                         "timestamp).")
    return (table[:, 0].astype(np.int64), table[:, 1].astype(np.int64),
            table[:, 2].copy(), table[:, 3].astype(np.int64))


def _movies(rows, genre_lists):
    """``(ids, titles, genres, names)``: the multi-hot genre matrix of ``genre_lists``."""
    names = sorted({g for gl in genre_lists for g in gl if g != _NO_GENRE})
    col = {g: j for j, g in enumerate(names)}
    matrix = np.zeros((len(genre_lists), len(names)), dtype=bool)
    matrix[[i for i, gl in enumerate(genre_lists) for g in gl if g in col],
           [col[g] for gl in genre_lists for g in gl if g in col]] = True
    return (np.array([int(r[0]) for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=object), matrix,
            np.array(names, dtype=object))


def _read_movies_csv(path):
    reader = csv.reader(io.StringIO(_read_text(path)))
    header = next(reader, None)
    if header is None or [h.strip() for h in header[:3]] != ["movieId", "title", "genres"]:
        raise ValueError(f"{str(path)!r} must start with the header 'movieId,title,genres'.")
    rows = [r for r in reader if r]
    return _movies(rows, [r[2].split("|") for r in rows])


def _read_movies_dat(path):
    rows = _lines(path, "::")
    return _movies(rows, [r[2].strip().split("|") for r in rows])


def _read_u_item(path):
    rows = _lines(path, "|")
    genre_path = path.parent / "u.genre"
    flags = np.array([[int(v) for v in r[5:]] for r in rows], dtype=np.int64)
    if genre_path.is_file():
        pairs = _lines(genre_path, "|")
        names = [None] * len(pairs)
        for name, idx in pairs:
            names[int(idx)] = name
    else:
        names = [f"genre_{j}" for j in range(flags.shape[1])]
    names = names[: flags.shape[1]]
    keep = np.array([n not in (None, "unknown") for n in names])
    return (np.array([int(r[0]) for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=object), flags[:, keep].astype(bool),
            np.array(names, dtype=object)[keep])


# (ratings file, format, delimiter, header?, movies file, its reader), in lookup order
_RATING_FILES = (
    ("ratings.csv", "ml-latest", ",", True, "movies.csv", _read_movies_csv),
    ("ratings.dat", "ml-1m/ml-10m", "::", False, "movies.dat", _read_movies_dat),
    ("u.data", "ml-100k", "\t", False, "u.item", _read_u_item),
)


def load_movielens(path):
    """Load a local copy of a MovieLens rating data set (numpy only, no download).

    Parameters
    ----------
    path : str or path-like
        A folder holding a ratings file, or the ratings file itself. Formats:

        - ml-latest / ml-latest-small / ml-20m / ml-25m: ``ratings.csv`` with the header
          ``userId,movieId,rating,timestamp``; genres from ``movies.csv``
          (``movieId,title,genres``) if present;
        - ml-1m / ml-10m: ``ratings.dat`` (``::``-separated); genres from ``movies.dat``;
        - ml-100k: ``u.data`` (tab-separated); genres from ``u.item`` and ``u.genre``.

        A folder is searched for ``ratings.csv``, ``ratings.dat`` and ``u.data`` in this
        order.

    Returns
    -------
    data : Bunch
        - ``user_ids``, ``item_ids`` : ndarray of shape (n_ratings,), int64
        - ``ratings`` : ndarray of shape (n_ratings,), float64
        - ``timestamps`` : ndarray of shape (n_ratings,), int64 (Unix seconds)
        - ``X`` : ``item_ids[:, None]``, ``y`` : ``ratings``, ``groups`` : ``user_ids``
          (the inputs of ``AdaptiveWeightMF.fit(X, y, groups)``)
        - ``n_users``, ``n_items`` : number of distinct users and rated items
        - ``format`` : "ml-latest", "ml-1m/ml-10m" or "ml-100k"; ``ratings_file`` : the
          file read
        - if a movie file is present: ``movie_ids`` (n_movies,), ``titles`` (n_movies,),
          ``genres`` (n_movies, n_genres) bool multi-hot matrix with rows aligned to
          ``movie_ids``, ``genre_names`` (n_genres,). "(no genres listed)" (ml-latest)
          and "unknown" (ml-100k) are not genres: such movies have an all-false row.
          ``years`` (n_movies,) float: the release year parsed from the title ("Toy Story
          (1995)"), NaN when the title has none.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist or a folder holds no ratings file.

    Notes
    -----
    Nothing is downloaded: get the data from https://grouplens.org/datasets/movielens/ and
    respect its license.

    References
    ----------
    .. [1] Harper, Konstan. "The MovieLens Datasets: History and Context", ACM TiiS 5(4),
       2015.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from skdpp.datasets import load_movielens
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "u.data").write_text("1\\t10\\t4\\t881250949\\n2\\t10\\t3\\t891717742\\n")
    >>> data = load_movielens(folder)
    >>> data.user_ids, data.item_ids, data.ratings, data.format
    (array([1, 2]), array([10, 10]), array([4., 3.]), 'ml-100k')
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"`path`={str(path)!r} does not exist. Pass the folder of a MovieLens data set "
            "(e.g. ml-latest-small/) or its ratings file; skdpp never downloads data (see "
            "https://grouplens.org/datasets/movielens/).")
    if path.is_dir():
        match = [f for f in _RATING_FILES if (path / f[0]).is_file()]
        if not match:
            raise FileNotFoundError(
                f"No MovieLens ratings file in {str(path)!r}: expected one of "
                f"{[f[0] for f in _RATING_FILES]}. Pass the folder that holds it.")
        ratings_file = path / match[0][0]
    else:
        ratings_file, suffix = path, path.name
        match = [f for f in _RATING_FILES if suffix == f[0]] or \
            [f for f in _RATING_FILES if suffix.endswith(Path(f[0]).suffix)]
        if not match:
            raise ValueError(
                f"Unrecognised ratings file {suffix!r}; expected ratings.csv, ratings.dat or "
                "u.data (or a .csv/.dat/.data file in those formats).")
    _, fmt, delim, header, movies_file, read_movies = match[0]
    user_ids, item_ids, ratings, timestamps = _read_ratings(ratings_file, delim, header)
    data = Bunch(
        user_ids=user_ids, item_ids=item_ids, ratings=ratings, timestamps=timestamps,
        X=item_ids[:, None], y=ratings, groups=user_ids,
        n_users=int(np.unique(user_ids).shape[0]), n_items=int(np.unique(item_ids).shape[0]),
        format=fmt, ratings_file=str(ratings_file))
    movies_file = ratings_file.parent / movies_file
    if movies_file.is_file():
        movies = read_movies(movies_file)
        data.movie_ids, data.titles, data.genres, data.genre_names = movies
        data.years = _release_years(data.titles)
    return data


_YEAR = re.compile(r"\((\d{4})(?:[-\u2013]\d{0,4})?\)\s*$")


def _release_years(titles):
    """Release year parsed from titles such as ``"Toy Story (1995)"`` (NaN if absent)."""
    years = np.full(len(titles), np.nan)
    for i, title in enumerate(titles):  # loop over movies (a few thousand), once
        match = _YEAR.search(str(title).strip())
        if match:
            years[i] = float(match.group(1))
    return years
