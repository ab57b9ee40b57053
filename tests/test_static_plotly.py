"""plotly.js as pages load it: the basic bundle (scatter, bar, pie) vendored in static/vendor by
scripts/vendor_plotly.py, at the version of the plotly.js inside the pinned Python package, served
from the app itself (never a CDN). The basic bundle is a quarter of the full one; evaluating it is what
a page waits for before its first chart (bench/browser.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from django.contrib.staticfiles import finders

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "static" / "vendor" / "plotly.min.js"
BASIC_TRACES = {"scatter", "bar", "pie"}  # what plotly.js-basic-dist registers
AXIS_TYPES = {"date", "linear", "log", "category", "-"}


def test_the_vendored_bundle_is_plotly_basic_at_the_python_packages_version():
    import plotly

    packaged = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()[:200]
    version = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", packaged).group(1)
    head = BUNDLE.read_text()[:200]
    assert f"plotly.js (basic - minified) v{version}" in head, "run scripts/vendor_plotly.py"
    assert finders.find("vendor/plotly.min.js") == str(BUNDLE)
    assert (BUNDLE.parent / "plotly.LICENSE").read_text().startswith("MIT License")


def test_every_trace_the_charts_build_is_in_the_basic_bundle():
    """A trace type outside the bundle draws nothing in the browser, silently: every "type" the chart
    builders write is a basic trace or an axis type."""
    found: set[str] = set()
    for path in (ROOT / "smrweb" / "dashboard" / "charts").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "type":
                        for leaf in ast.walk(value):
                            if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                                found.add(leaf.value)
    assert {"scatter", "bar"} <= found  # the walk sees the charts
    assert found <= BASIC_TRACES | AXIS_TYPES, found - BASIC_TRACES - AXIS_TYPES
