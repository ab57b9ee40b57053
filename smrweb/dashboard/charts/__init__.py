"""Plotly figures of the dashboard, one module per page, one style (`style`)."""

from smrweb.dashboard.charts.project import project_scores_figure  # noqa: F401
from smrweb.dashboard.charts.run import metric_figure, run_timeline_figure  # noqa: F401
from smrweb.dashboard.charts.style import x_time  # noqa: F401
