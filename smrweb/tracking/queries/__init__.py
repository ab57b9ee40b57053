"""The read side, shared by the API and the dashboard; one module per noun. Each answers in a fixed
number of queries, whatever the number of runs or points. This package re-exports the project, run,
carry-forward and launch-prefill reads (`queries.project_summaries(...)`); the timeline, compare and
budget read models are imported by name (`from smrweb.tracking.queries import timeline`)."""

from smrweb.tracking.queries.exports import (  # noqa: F401
    metric_point_rows,
)
from smrweb.tracking.queries.failures import failed_calls  # noqa: F401
from smrweb.tracking.queries.knowledge import (  # noqa: F401
    N_DEFAULT,
    N_MAX,
    N_MIN,
    Approach,
    CarryForward,
    carry_forward,
    parse_n,
    render_carry_forward,
)
from smrweb.tracking.queries.launches import (  # noqa: F401
    Defaults,
    launch_defaults,
)
from smrweb.tracking.queries.projects import (  # noqa: F401
    SPARK_SCORES,
    BoardPage,
    Pending,
    ProjectScores,
    ProjectSummary,
    Regression,
    ResultsGap,
    counted_leaderboard,
    excluded_run_ids,
    leaderboard,
    leaderboard_page,
    pending_scores,
    project_summaries,
    regressions,
    results_gap,
    run_condition_counts,
)
from smrweb.tracking.queries.runs import (  # noqa: F401
    GAP_CHANNELS,
    TOTAL_CHANNELS,
    ScorePoint,
    SeriesPoint,
    SourceGap,
    SourceGaps,
    kept_score_histories,
    kept_score_history_keys,
    metric_keys,
    metric_series,
    runtime_messages,
    score_histories,
    source_gaps,
    stalled_for,
)
from smrweb.tracking.queries.spend import (  # noqa: F401
    project_spend_by_day,
    run_spend_by_model,
)
from smrweb.tracking.queries.views import find_view, saved_views  # noqa: F401, E402
