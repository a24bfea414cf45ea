from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.datasets import load_movielens

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "ml-latest-small"

RATINGS = np.array([[1, 10, 4.0, 881250949], [2, 10, 3.5, 891717742],
                    [1, 20, 1.0, 878887116]])


def _write(folder, name, text, encoding="utf-8"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(text.encode(encoding))


def _check(data):
    assert_array_equal(data.user_ids, RATINGS[:, 0].astype(int))
    assert_array_equal(data.item_ids, RATINGS[:, 1].astype(int))
    assert_allclose(data.ratings, RATINGS[:, 2], rtol=0)
    assert_array_equal(data.timestamps, RATINGS[:, 3].astype(int))
    assert data.n_users == 2 and data.n_items == 2
    assert_array_equal(data.X[:, 0], data.item_ids)


def test_ml_latest_csv_with_genres(tmp_path):
    rows = "\n".join(f"{int(u)},{int(i)},{r},{int(t)}" for u, i, r, t in RATINGS)
    _write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n" + rows + "\n")
    _write(tmp_path, "movies.csv", 'movieId,title,genres\n10,"Heat, The (1995)",'
           "Action|Crime\n20,Toy Story (1995),(no genres listed)\n")
    data = load_movielens(tmp_path)
    _check(data)
    assert data.format == "ml-latest"
    assert_array_equal(data.genre_names, ["Action", "Crime"])
    assert_array_equal(data.genres, [[True, True], [False, False]])
    assert data.titles[0] == "Heat, The (1995)"


def test_ml_100k_u_data_with_genres(tmp_path):
    rows = "\n".join(f"{int(u)}\t{int(i)}\t{r}\t{int(t)}" for u, i, r, t in RATINGS)
    _write(tmp_path, "u.data", rows + "\n")
    _write(tmp_path, "u.genre", "unknown|0\nAction|1\nComedy|2\n\n")
    _write(tmp_path, "u.item", "10|Heat (1995)|01-Jan-1995||http://x|0|1|1\n"
           "20|Café (1996)|01-Jan-1996||http://y|1|0|0\n", encoding="latin-1")
    data = load_movielens(tmp_path / "u.data")
    _check(data)
    assert data.format == "ml-100k"
    assert_array_equal(data.genre_names, ["Action", "Comedy"])
    assert_array_equal(data.genres, [[True, True], [False, False]])
    assert data.titles[1] == "Café (1996)"


def test_ml_1m_dat_with_genres(tmp_path):
    rows = "\n".join(f"{int(u)}::{int(i)}::{r}::{int(t)}" for u, i, r, t in RATINGS)
    _write(tmp_path, "ratings.dat", rows + "\n")
    _write(tmp_path, "movies.dat", "10::Heat (1995)::Crime|Action\n20::Toy (1995)::Comedy\n",
           encoding="latin-1")
    data = load_movielens(tmp_path)
    _check(data)
    assert data.format == "ml-1m/ml-10m"
    assert_array_equal(data.genre_names, ["Action", "Comedy", "Crime"])
    assert_array_equal(data.genres, [[True, False, True], [False, True, False]])


def test_ratings_without_movie_file_has_no_genres(tmp_path):
    rows = "\n".join(f"{int(u)}::{int(i)}::{r}::{int(t)}" for u, i, r, t in RATINGS)
    _write(tmp_path, "ratings.dat", rows + "\n")
    data = load_movielens(tmp_path / "ratings.dat")
    _check(data)
    assert "genres" not in data


def test_missing_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_movielens(tmp_path / "nope")


def test_empty_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="No MovieLens ratings file"):
        load_movielens(tmp_path)


def test_malformed_ratings_raise(tmp_path):
    _write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n1,2,x,4\n")
    with pytest.raises(ValueError, match="Could not parse"):
        load_movielens(tmp_path)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/ml-latest-small absent")
def test_ml_latest_small_real_data():
    data = load_movielens(SHARED)
    lines = (SHARED / "ratings.csv").read_text().strip().splitlines()
    first = lines[1].split(",")
    assert data.ratings.shape == (len(lines) - 1,)
    assert data.user_ids[0] == int(first[0]) and data.item_ids[0] == int(first[1])
    assert_allclose(data.ratings[0], float(first[2]), rtol=0)
    assert np.all((data.ratings >= 0.5) & (data.ratings <= 5.0))
    assert set(data.item_ids.tolist()) <= set(data.movie_ids.tolist())
    assert data.genres.shape == (data.movie_ids.shape[0], data.genre_names.shape[0])
    assert "(no genres listed)" not in set(data.genre_names.tolist())


def test_release_years_parsed_from_titles():
    from skdpp.datasets._movielens import _release_years

    years = _release_years(["Toy Story (1995)", "Babylon 5", "Fawlty Towers (1975-1979)",
                            "Road (2000) "])
    np.testing.assert_array_equal(years[[0, 2, 3]], [1995.0, 1975.0, 2000.0])
    assert np.isnan(years[1])
