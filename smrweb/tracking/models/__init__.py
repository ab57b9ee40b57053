"""The tracked data, one module per noun (scenario → project → run → artifact → submission → rollback,
knowledge, audit, annotation, alert, control, share: each imports only those before it). This package
re-exports every model and choice, so `from smrweb.tracking.models import Run` keeps working and Django
finds the models of the app."""

from smrweb.tracking.models.alert import (  # noqa: F401
    AlertRule,
    Channel,
    Delivery,
    LoopFinding,
    LoopPattern,
    Notification,
    NotificationKind,
    NotificationStatus,
    RunSnooze,
    Trigger,
)
from smrweb.tracking.models.annotation import (  # noqa: F401
    TAG_KEY_MAX,
    TAG_KEY_RE,
    TAG_VALUE_MAX,
    Comment,
    RunNote,
    RunTag,
    check_tag,
    clean_text,
    parse_tag,
)
from smrweb.tracking.models.artifact import (  # noqa: F401
    Artifact,
    ArtifactBlob,
    BlobSummary,
    SummaryStatus,
    blob_storage_name,
)
from smrweb.tracking.models.audit import (  # noqa: F401
    AuditEvent,
    AuditVerb,
)
from smrweb.tracking.models.common import (  # noqa: F401
    FLOAT_MAX,
    USD,
    finite,
)
from smrweb.tracking.models.control import (  # noqa: F401
    OPEN_DISPATCH,
    ControlKind,
    DispatchStatus,
    GuardAction,
    GuardEpisode,
    GuardKind,
    RunControl,
    RunLaunch,
)
from smrweb.tracking.models.figures import ProjectFigures, RunDaySpend, RunModelSpend  # noqa: F401, E402
from smrweb.tracking.models.invitation import (  # noqa: F401
    ProjectInvitation,
)
from smrweb.tracking.models.knowledge import (  # noqa: F401
    KnowledgeEntry,
    KnowledgeKind,
)
from smrweb.tracking.models.logs import (  # noqa: F401
    LOG_LINE_MAX,
    LogLevel,
    LogSource,
    RunLogBatch,
    RunLogLine,
)
from smrweb.tracking.models.pricing import ModelPrice  # noqa: F401, E402
from smrweb.tracking.models.project import (  # noqa: F401
    POLLED_SOURCES,
    ApiToken,
    Membership,
    Project,
    ProjectQuerySet,
    Role,
    SourceHealth,
    SourceKind,
    SpendStop,
    hash_token,
)
from smrweb.tracking.models.rollback import (  # noqa: F401
    Rollback,
    RollbackStatus,
)
from smrweb.tracking.models.run import (  # noqa: F401
    STALLED,
    TERMINAL_STATES,
    AgentTurn,
    Checkpoint,
    Experiment,
    MetricPoint,
    MetricRollup,
    Run,
    RunParam,
    RunState,
    RuntimeMessage,
    StateChange,
    TurnBody,
    TurnKind,
    TurnRollup,
)
from smrweb.tracking.models.saved_view import SavedView, SavedViewQuerySet  # noqa: F401
from smrweb.tracking.models.scenario import (  # noqa: F401
    ArtifactKind,
    Direction,
    Scenario,
    ScenarioQuerySet,
)
from smrweb.tracking.models.share import PROJECT_KINDS, ShareKind, ShareLink  # noqa: F401
from smrweb.tracking.models.submission import (  # noqa: F401
    NEVER_COUNTED,
    RUN_RULE,
    UNVERIFIED_STATUSES,
    VERIFIED_STATUSES,
    ArenaResult,
    Review,
    Submission,
    SubmissionQuerySet,
    SubmissionStatus,
    SubmissionTransition,
    Verdict,
    VerificationOutcome,
    counted_q,
    standing,
)
