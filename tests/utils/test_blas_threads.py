"""The fit template's BLAS thread policy (skdpp.base.blas_threads)."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from skdpp.base import MULTITHREAD_MIN_FEATURES, blas_threads
from tests._toy import ToyPersonalizedMean

pytestmark = pytest.mark.skipif(
    not any(i["user_api"] == "blas" for i in threadpool_info()),
    reason="no BLAS library visible to threadpoolctl")


def _blas_threads_now():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


class _Recording(ToyPersonalizedMean):
    """Records the BLAS thread counts seen inside the core and the personal fit."""

    seen = []

    def _fit_config(self, meta):  # called inside the fit's environment
        _Recording.seen.append(("fit", _blas_threads_now()))
        return super()._fit_config(meta)

    def _fit_personal(self, X, y, index):
        _Recording.seen.append(("personalize", _blas_threads_now()))
        return super()._fit_personal(X, y, index)


class _Failing(ToyPersonalizedMean):
    def _fit_config(self, meta):
        raise RuntimeError("boom")


def _data(d, n_users=20):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(n_users), 3)
    return rng.normal(size=(groups.size, d)), rng.normal(size=groups.size), groups


def test_rule_is_one_thread_below_threshold():
    assert blas_threads(1) == 1
    assert blas_threads(MULTITHREAD_MIN_FEATURES - 1) == 1
    assert blas_threads(MULTITHREAD_MIN_FEATURES) is None


def test_limit_applied_during_fit_and_restored():
    X, y, g = _data(3)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads_now()
        _Recording.seen.clear()
        est = _Recording(epsilon=1.0, random_state=0).fit(X, y, groups=g)
        assert _blas_threads_now() == before
        est.personalize(X[:6], y[:6], groups=g[:6] + 100)
        assert _blas_threads_now() == before
    assert [name for name, _ in _Recording.seen] == ["fit", "personalize"]
    for _, threads in _Recording.seen:
        assert threads and all(t == 1 for t in threads)


def test_limit_restored_after_failed_fit():
    X, y, g = _data(3)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads_now()
        with pytest.raises(RuntimeError, match="boom"):
            _Failing(epsilon=1.0).fit(X, y, groups=g)
        assert _blas_threads_now() == before


def test_wide_data_keeps_the_callers_limit():
    """At or above the threshold the fit neither lowers nor raises the limit."""
    X, y, g = _data(MULTITHREAD_MIN_FEATURES, n_users=4)
    with threadpool_limits(limits=1, user_api="blas"):
        _Recording.seen.clear()
        _Recording(epsilon=np.inf).fit(X, y, groups=g)
        assert _Recording.seen == [("fit", _blas_threads_now())]
        assert all(t == 1 for t in _blas_threads_now())
