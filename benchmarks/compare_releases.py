"""Compare the released values of two source trees on MovieLens (all five estimators).

Usage::

    python benchmarks/compare_releases.py OLD_TREE NEW_TREE [--data PATH]

``OLD_TREE`` / ``NEW_TREE`` are checkouts of skdpp (e.g. ``git worktree add
/tmp/old <commit>``). Each tree fits every estimator with its defaults, only
``epsilon`` and ``random_state=0`` set, at epsilon 1 and inf on the split of
``bench_real_data.py`` (seed 0), in a fresh subprocess that imports that tree,
and the predictions (decision values for JL) are compared: bit-identical, or
the largest relative difference.
"""

import argparse
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

_CHILD = r"""
import pickle, sys
import numpy as np
tree, data_path, out = sys.argv[1:4]
sys.path[:0] = [tree, tree + "/benchmarks"]
import skdpp
assert skdpp.__file__.startswith(tree), skdpp.__file__
import bench_real_data as b
data = b.load(data_path, "all")
tr, te = b.split(data, 0)
res = {}
for name in b.ESTIMATORS:
    for eps in (1.0, np.inf):
        kind, value, est = b.run_estimator(name, tr, te, eps, 0)
        if name == "mf":
            p = est.predict(te["I"], groups=te["g"])
        elif name == "jl":
            p = est.decision_function(te["X"], groups=te["g"])
        else:
            p = est.predict(te["X"], groups=te["g"])
        res[(name, eps)] = (kind, value, np.asarray(p, dtype=float))
pickle.dump(res, open(out, "wb"))
"""


def run(tree, data, out):
    subprocess.run([sys.executable, "-c", _CHILD, str(Path(tree).resolve()), data, out],
                   check=True, cwd=tempfile.gettempdir())
    with open(out, "rb") as f:
        return pickle.load(f)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2]
                                              / "shared" / "data" / "ml-latest-small"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old = run(args.old, args.data, f"{tmp}/old.pkl")
        new = run(args.new, args.data, f"{tmp}/new.pkl")
    print("| estimator | epsilon | metric old | metric new | predictions |")
    print("|---|---|---|---|---|")
    for key, (kind, v_old, p_old) in old.items():
        _, v_new, p_new = new[key]
        if np.array_equal(p_old, p_new):
            diff = "bit-identical"
        else:
            rel = np.abs(p_old - p_new) / np.maximum(np.abs(p_old), np.finfo(float).tiny)
            diff = f"max relative difference {np.max(rel):.2e}"
        print(f"| {key[0]} | {key[1]} | {kind} {v_old:.6f} | {v_new:.6f} | {diff} |")


if __name__ == "__main__":
    main()
