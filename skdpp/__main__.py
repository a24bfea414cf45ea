"""A short tour of skdpp: ``python -m skdpp`` fits each estimator on synthetic data
(seconds each) and prints a score and its privacy report."""

import importlib
import sys
import time

# One demo module per estimator family, in the order of the README's table
_DEMOS = (
    ("PrivateFedRepRegressor / PrivAltMinRegressor", "skdpp._demo._representation"),
    ("PPSGDRegressor", "skdpp._demo._ppsgd"),
    ("AdaptiveWeightMF", "skdpp._demo._adaptive_mf"),
    ("JLMarginClassifier", "skdpp._demo._jl_margin"),
)


def main(argv=None):
    """Run every demo; return a process exit code."""
    import skdpp

    print(f"skdpp {skdpp.__version__}: user-level differentially private personalization")
    print("Each demo fits on synthetic data, prints a score and the privacy report.\n")
    for title, module in _DEMOS:
        print(f"{'=' * 78}\n{title}\n{'=' * 78}")
        start = time.perf_counter()
        importlib.import_module(module).run(random_state=0)
        print(f"[{time.perf_counter() - start:.1f} s]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
