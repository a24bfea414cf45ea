"""Mutation check of the privacy tests (issue 19: "tests must check behaviour").

Applies small privacy-critical mutations to the release code, one at a time,
to a temporary copy of the repository, runs the privacy tests there and
reports each mutation as *killed* (some test fails) or *survived*.

Usage::

    python benchmarks/mutation_check.py [--out benchmarks/results/mutation_check.md]
                                        [--only NAME ...] [--tests PATH_OR_NODE ...]

The unmutated copy is run first and must pass (otherwise the check stops).
A mutation whose text is not found in the source (the code moved on) is
reported as "not applied", never as killed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, file, old text, new text, what it breaks)
MUTATIONS = [
    ("altmin-gram-sqrt2-dropped", "skdpp/linear_model/_algorithms/altmin.py",
     "else np.sqrt(2.0) * clip_norm**2", "else clip_norm**2",
     "AltMin's Gram sensitivity sqrt(2) eta^2 lowered by sqrt(2)"),
    ("altmin-moments-halved", "skdpp/linear_model/_algorithms/altmin.py",
     "else 2.0 * label_clip * clip_norm", "else 1.0 * label_clip * clip_norm",
     "AltMin's moment sensitivity 2 zeta eta lowered by 2"),
    ("altmin-moments-sqrt2", "skdpp/linear_model/_algorithms/altmin.py",
     "else 2.0 * label_clip * clip_norm", "else np.sqrt(2.0) * label_clip * clip_norm",
     "AltMin's moment sensitivity lowered by sqrt(2)"),
    ("jl-cold-start-multiclass", "skdpp/linear_model/_algorithms/jl_margin.py",
     "return 1.0 if n_problems == 1 else math.sqrt(2.0)", "return 1.0",
     "JL multi-class cold-start sensitivity sqrt(2) -> 1"),
    ("jl-subspace-sqrt2", "skdpp/linear_model/_algorithms/jl_margin.py",
     "return math.sqrt(2.0 * n_problems)", "return math.sqrt(n_problems)",
     "JL subspace sensitivity sqrt(2P) -> sqrt(P)"),
    ("jl-label-cap+1", "skdpp/linear_model/_labels.py",
     "kept = code[order][rank < max_per_user]", "kept = code[order][rank <= max_per_user]",
     "per-user label cap raised by one"),
    ("jl-label-sensitivity", "skdpp/linear_model/_labels.py",
     "return math.sqrt(2.0 * max_per_user)", "return math.sqrt(max_per_user)",
     "label-count sensitivity sqrt(2L) -> sqrt(L)"),
    ("mf-count-cap+1", "skdpp/decomposition/_algorithms/_als_kernels.py",
     '"mf-count-sample")) < cap]', '"mf-count-sample")) <= cap]',
     "per-user item cap raised by one"),
    ("mf-count-sensitivity", "skdpp/decomposition/_algorithms/adaptive_mf.py",
     "else float(np.sqrt(2.0 * cfg.count_cap))", "else float(np.sqrt(cfg.count_cap))",
     "item-count sensitivity sqrt(2 cap) -> sqrt(cap)"),
    ("mf-item-bias-sensitivity", "skdpp/decomposition/_algorithms/_item_biases.py",
     "sens_w = float(np.sqrt(2.0 * cap))", "sens_w = float(np.sqrt(cap))",
     "item-bias weight sensitivity lowered by sqrt(2)"),
    ("selection-threshold-per-user", "skdpp/privacy/_release.py",
     "sigma, delta_t / int(max_partitions), sensitivity=sens",
     "sigma, delta_t, sensitivity=sens",
     "partition-selection threshold ignores the per-user candidate count"),
    ("gaussian-sum-2C", "skdpp/privacy/_release.py",
     "sens = None if clip_norm is None else 2.0 * float(clip_norm)",
     "sens = None if clip_norm is None else 1.0 * float(clip_norm)",
     "sum of clipped contributions: 2C -> C"),
    ("ppsgd-gradient-2C", "skdpp/linear_model/_algorithms/ppsgd.py",
     "sensitivity = None if clip_norm is None else 2.0 * float(clip_norm)",
     "sensitivity = None if clip_norm is None else np.sqrt(2.0) * float(clip_norm)",
     "PPSGD gradient-sum sensitivity lowered by sqrt(2)"),
    ("fedrep-gradient-2C", "skdpp/linear_model/_algorithms/fedrep.py",
     "sensitivity = None if clip_norm is None else 2.0 * clip_norm",
     "sensitivity = None if clip_norm is None else np.sqrt(2.0) * clip_norm",
     "FedRep gradient-sum sensitivity lowered by sqrt(2)"),
    ("cold-start-heads-2C", "skdpp/linear_model/_algorithms/representation.py",
     "sensitivity = None if head_clip_norm is None else 2.0 * head_clip_norm",
     "sensitivity = None if head_clip_norm is None else 1.0 * head_clip_norm",
     "FedRep/AltMin cold-start head sum: 2C -> C"),
    ("spectral-init-sqrt2", "skdpp/linear_model/_algorithms/spectral_init.py",
     "sensitivity = None if clip is None else 2.0 * clip\n",
     "sensitivity = None if clip is None else np.sqrt(2.0) * clip\n",
     "spectral init sensitivity 2 psi -> sqrt(2) psi (PSD contributions: still valid?)"),
    ("quantile-count-halved", "skdpp/privacy/_quantile.py",
     "noisy = release.gaussian(phase, counts[mid], sensitivity=1.0)",
     "noisy = release.gaussian(phase, counts[mid], sensitivity=0.5)",
     "private quantile's user count sensitivity 1 -> 0.5"),
    ("clip-loosened-1pct", "skdpp/privacy/_clipping.py",
     "scale[big] = clip_norm / norms[big]", "scale[big] = 1.01 * clip_norm / norms[big]",
     "clip factor min(1, C/||v||) loosened by 1%"),
    ("clip-factors-loosened-1pct", "skdpp/privacy/_clipping.py",
     "factors[big] = clip_norm / norms[big]", "factors[big] = 1.01 * clip_norm / norms[big]",
     "clipped magnitudes loosened by 1%"),
    ("plan-count-dropped", "skdpp/privacy/calibration.py",
     "lambda rho, count: math.sqrt(count / (2.0 * rho))",
     "lambda rho, count: math.sqrt(1 / (2.0 * rho))",
     "calibration ignores a phase's number of releases (accounting term dropped)"),
    ("threshold-delta-not-reserved", "skdpp/privacy/accounting.py",
     "return self._epsilon_without_thresholds(delta - t_delta) \\",
     "return self._epsilon_without_thresholds(delta) \\",
     "the thresholds' delta not subtracted before converting the rest"),
    ("keyed-uniforms-global-stream", "skdpp/utils/_grouped.py",
     "return keyed_uniform(key, stream, self.expand(self.user_hash), self.rank, *words)",
     "return np.random.default_rng().random(self.rank.shape[0])",
     "keyed per-row randomness replaced by a global stream"),
]

TESTS = [  # run whole
    "tests/privacy/test_attained_sensitivity.py",
    "tests/privacy/test_budget_plans.py",
]
ONE_USER = "tests/privacy/test_one_user.py"  # run with the selection below
# the fast, privacy-critical part of the one-user suite (no cluster, no search)
SELECT = ("delta or broken or seed or (entry_points and default and "
          "(huge or single_row or zeros or duplicate or one_class or rank_deficient) "
          "and None)")


def _copy(dst):
    for name in ("skdpp", "tests", "pyproject.toml"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst / name)


def _run(workdir, tests):
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONDONTWRITEBYTECODE": "1"}
    base = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "-m", "not slow"]
    start = time.perf_counter()
    summaries = []
    for cmd in (base + list(tests), base + ["-k", SELECT, ONE_USER]):
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
        out = proc.stdout.strip()
        summaries.append(out.splitlines()[-1] if out else proc.stderr[-300:])
        if proc.returncode != 0:
            return proc.returncode, lines[:1], summaries[-1], time.perf_counter() - start
    return 0, [], "; ".join(summaries), time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/mutation_check.md"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--tests", nargs="*", default=TESTS)
    args = parser.parse_args(argv)
    mutations = [m for m in MUTATIONS if args.only is None or m[0] in args.only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="skdpp-mutation-") as tmp:
        work = Path(tmp)
        _copy(work)
        check = subprocess.run([sys.executable, "-c", "import skdpp; print(skdpp.__file__)"],
                               cwd=work, env={**os.environ, "PYTHONPATH": str(work)},
                               capture_output=True, text=True).stdout.strip()
        assert check.startswith(str(work)), f"the copy is not imported: {check}"
        code, failed, summary, secs = _run(work, args.tests)
        print(f"baseline: {summary} ({secs:.0f} s)", flush=True)
        if code != 0:
            raise SystemExit(f"the unmutated tests fail: {failed} {summary}")
        for name, path, old, new, what in mutations:
            target = work / path
            source = target.read_text()
            if source.count(old) != 1:
                rows.append((name, what, "not applied", f"{source.count(old)} matches", 0.0))
                print(f"{name}: not applied", flush=True)
                continue
            target.write_text(source.replace(old, new))
            try:
                code, failed, summary, secs = _run(work, args.tests)
            finally:
                target.write_text(source)
            status = "killed" if code != 0 else "SURVIVED"
            detail = failed[0].replace("FAILED ", "") if failed else summary
            rows.append((name, what, status, detail, secs))
            print(f"{name}: {status} ({secs:.0f} s) {detail}", flush=True)
    killed = sum(r[2] == "killed" for r in rows)
    applied = sum(r[2] != "not applied" for r in rows)
    lines = [
        "# Mutation check of the privacy tests",
        "",
        f"`python benchmarks/mutation_check.py` ({time.strftime('%Y-%m-%d')}): "
        f"{killed} of {applied} applied mutations killed.",
        "",
        f"Tests run per mutation (`-x -m 'not slow'`): {', '.join(args.tests)}; then "
        f"{ONE_USER} with `-k \"{SELECT}\"`.",
        "",
        "| mutation | what it breaks | result | first failing test / summary | s |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {n} | {w} | {s} | {d.replace('|', '/')[:160]} | {t:.0f} |"
              for n, w, s, d, t in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"{killed}/{applied} killed; written to {args.out}")


if __name__ == "__main__":
    main()
