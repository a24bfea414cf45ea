"""skdpp never imports dask unless skdpp.distributed is imported."""

import subprocess
import sys


def test_import_skdpp_does_not_import_dask():
    code = ("import sys, skdpp, skdpp.linear_model, skdpp.decomposition, "
            "skdpp.model_selection; "
            "assert not [m for m in sys.modules if m.split('.')[0] in "
            "('dask', 'distributed')], 'dask imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
