"""Write the golden outputs: ``python -m tests.golden.generate [--only synthetic|movielens]``.

Run only when released values change on purpose (say why in the commit message).
"""

import argparse
import time
import warnings

import numpy as np

from tests.golden import cases as C


def generate(which):
    table = C.SYNTHETIC if which == "synthetic" else C.MOVIELENS_CASES
    arrays = {"fingerprint": np.asarray(C.fingerprint())}
    for name, case in table.items():
        tic = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est, data = C.fit_case(case)
            out = C.outputs(est, data)
        for key, value in out.items():
            arrays[f"{name}/{key}"] = value
        print(f"{name}: {len(out)} arrays, {time.perf_counter() - tic:.1f} s")
    np.savez_compressed(C.HERE / f"{which}.npz", **arrays)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["synthetic", "movielens"])
    args = parser.parse_args(argv)
    for which in ("synthetic", "movielens"):
        if args.only not in (None, which):
            continue
        if which == "movielens" and not C.movielens_available():
            print("MovieLens absent: movielens.npz not written")
            continue
        generate(which)


if __name__ == "__main__":
    main()
