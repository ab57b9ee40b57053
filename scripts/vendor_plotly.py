"""Fetch plotly.js's basic bundle from the npm registry into static/vendor/plotly.min.js.

The basic bundle (scatter, bar, pie: every trace smrweb draws) is 1.2 MB against the full bundle's
4.7 MB, and evaluating it costs a page ~0.2 s of main thread instead of ~1.5 s (docs/benchmarks.md,
bench/browser.py). Its version follows the plotly.js inside the pinned Python `plotly` package
(tests/test_static_plotly.py fails when they differ): after `make lock` moves plotly, run
`.venv/bin/python scripts/vendor_plotly.py` and commit the file. The tarball is checked against the
registry's own integrity digest before anything is written.

    .venv/bin/python scripts/vendor_plotly.py            # the version the plotly package carries
    .venv/bin/python scripts/vendor_plotly.py 4.1.1      # a given version
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "https://registry.npmjs.org/plotly.js-basic-dist-min"


def packaged_version() -> str:
    import plotly

    head = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()[:200]
    return re.search(r"plotly\.js v(\d+\.\d+\.\d+)", head).group(1)


def main() -> None:
    version = sys.argv[1] if len(sys.argv) > 1 else packaged_version()
    with urllib.request.urlopen(f"{REGISTRY}/{version}", timeout=30) as answer:
        dist = json.load(answer)["dist"]
    with urllib.request.urlopen(dist["tarball"], timeout=60) as answer:
        tarball = answer.read()
    algorithm, _, digest = dist["integrity"].partition("-")
    if base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode() != digest:
        sys.exit(f"{dist['tarball']}: the tarball does not match the registry's {algorithm} digest")
    with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
        bundle = archive.extractfile("package/plotly-basic.min.js").read()
        licence = archive.extractfile("package/LICENSE").read()
    (ROOT / "static" / "vendor" / "plotly.min.js").write_bytes(bundle)
    (ROOT / "static" / "vendor" / "plotly.LICENSE").write_bytes(licence)
    print(f"static/vendor/plotly.min.js: plotly.js basic {version}, {len(bundle):,} bytes")


if __name__ == "__main__":
    main()
