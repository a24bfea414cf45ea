"""Accuracy check (not a unit test): private vs scikit-learn preprocessing on MovieLens.

Raw columns of ml-latest-small (release year -- NaN when the title has none --,
Unix timestamp, genre string "Comedy|Drama"), a ColumnTransformer feeding
PPSGDRegressor(epsilon=4) with groups routed; the private transformers at
epsilon=4 each vs scikit-learn's SimpleImputer/StandardScaler/OneHotEncoder.

    OPENBLAS_NUM_THREADS=1 nice -n 5 python tests/preprocessing/accuracy_movielens.py
"""

import sys

import numpy as np
import pandas as pd
import sklearn
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.preprocessing import StandardScaler

from skdpp import PPSGDRegressor
from skdpp.datasets import load_movielens
from skdpp.model_selection import per_user_train_test_split
from skdpp.preprocessing import PrivateOneHotEncoder, PrivateSimpleImputer, PrivateStandardScaler

PATH = "/work/shared/data/ml-latest-small"


def frame(path):
    data = load_movielens(path)
    row = np.searchsorted(data.movie_ids, data.item_ids)
    names = np.asarray(data.genre_names)
    genre = np.array(["|".join(names[r]) for r in data.genres], dtype=object)
    X = pd.DataFrame({"year": data.years[row], "timestamp": data.timestamps.astype(float),
                      "genres": genre[row]})
    return X, data.ratings, data.user_ids


def _genre_tokens(s):
    return s.split("|")


def pipeline(private, eps, seed):
    if private:
        num = make_pipeline(PrivateSimpleImputer(epsilon=eps, random_state=seed),
                            PrivateStandardScaler(epsilon=eps, random_state=seed))
        cat, cols = PrivateOneHotEncoder(separator="|", sparse_output=False, epsilon=eps,
                                         random_state=seed), ["genres"]
    else:  # scikit-learn's multi-hot of a "|"-separated string column
        num = make_pipeline(SimpleImputer(), StandardScaler())
        cat, cols = CountVectorizer(tokenizer=_genre_tokens, token_pattern=None,
                                    lowercase=False, binary=True), "genres"
    pre = ColumnTransformer([("num", num, ["year", "timestamp"]), ("cat", cat, cols)],
                            sparse_threshold=0)
    return Pipeline([("pre", pre), ("reg", PPSGDRegressor(epsilon=eps, random_state=seed))])


def main(path=PATH, seeds=(0, 1, 2)):
    X, y, g = frame(path)
    sklearn.set_config(enable_metadata_routing=True)
    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=g, test_size=0.2, random_state=0)
    print(f"{len(np.unique(g))} users, {len(y)} ratings")
    res = {}
    for private in (False, True):
        rmses = []
        for seed in seeds:
            pipe = pipeline(private, 4.0, seed)
            pipe.fit(X_tr, y_tr, groups=g_tr)
            pred = pipe.predict(X_te, groups=g_te)
            rmses.append(float(np.sqrt(np.mean((pred - y_te) ** 2))))
        res[private] = rmses
        print(f"{'private' if private else 'sklearn'} preprocessing: test RMSE "
              f"{np.mean(rmses):.4f} (seeds {', '.join(f'{r:.4f}' for r in rmses)})")
        cat = pipe.named_steps["pre"].named_transformers_["cat"]
        n_genres = len(cat.categories_[0]) if private else len(cat.vocabulary_)
        print(f"  genres encoded: {n_genres}")
    print(f"difference (private - sklearn): {np.mean(res[True]) - np.mean(res[False]):+.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
