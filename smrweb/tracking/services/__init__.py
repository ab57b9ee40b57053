"""The one write path. The REST API, the pollers, the demo and the management commands call these
functions; none writes tracked data another way. Services own their transaction and audit trail,
raise `tracking.errors.*`, and know nothing of HTTP or Celery.

One module per noun; this package re-exports every verb so callers keep `services.verb(...)` (and a
test that patches `services.verb` patches what those callers call)."""

from smrweb.tracking.services.accounts import (  # noqa: F401
    password_changed,
)
from smrweb.tracking.services.alerts.rules import (  # noqa: F401
    create_alert_rule,
    delete_alert_rule,
    mark_read,
    send_test,
    snooze_run,
    unsnooze_run,
    update_alert_rule,
)
from smrweb.tracking.services.annotations import (  # noqa: F401
    add_comment,
    check_tag,
    delete_comment,
    edit_comment,
    parse_tag,
    remove_tag,
    save_note,
    set_tag,
    update_run_labels,
)
from smrweb.tracking.services.archive import (  # noqa: F401
    archive_project,
    archive_refusal,
    archive_role,
    archive_run,
    check_writable,
    may_archive,
    restore_project,
    restore_run,
)
from smrweb.tracking.services.artifacts import (  # noqa: F401
    SHA256_RE,
    artifact_storage,
    blob_stored,
    check_artifact_path,
    collect_blob,
    collect_unreferenced_blobs,
    name_awaited_artifact,
    open_blob,
    project_storage_bytes,
    save_blob,
    store_artifact,
    store_known_artifact,
)
from smrweb.tracking.services.audit import (  # noqa: F401
    record_audit,
)
from smrweb.tracking.services.control import (  # noqa: F401
    MESSAGE_MAX,
    confirm_reported,
    control_accepted,
    request_control,
)
from smrweb.tracking.services.deletion import (  # noqa: F401
    DeletionSummary,
    StoredBodies,
    confirmation_word,
    delete_event_rows,
    delete_project,
    delete_run,
    delete_turn_bodies,
    deletion_refusal,
    deletion_summary,
    may_delete,
    stored_turn_bodies,
)
from smrweb.tracking.services.ingest import (  # noqa: F401
    IngestResult,
    experiments_named,
    ingest_events,
    name_experiments,
    unnamed_experiments,
)
from smrweb.tracking.services.invitations import (  # noqa: F401
    accept_invitation,
    invitation_for_token,
    invitation_token,
    invite_member,
    join_with_new_account,
    record_invitation_sent,
    resend_invitation,
    revoke_invitation,
)
from smrweb.tracking.services.launches import (  # noqa: F401
    compose_kickoff,
    request_launch,
)
from smrweb.tracking.services.members import (  # noqa: F401
    add_member,
    remove_member,
    set_member,
)
from smrweb.tracking.services.metric_rollups import rebuild_metric_rollups  # noqa: F401
from smrweb.tracking.services.params import (  # noqa: F401
    check_param,
    log_params,
)
from smrweb.tracking.services.prices import current_prices  # noqa: F401, E402
from smrweb.tracking.services.projects import (  # noqa: F401
    GIT_BRANCH_RE,
    GIT_PIN,
    PROJECT_SETTINGS,
    SLUG_RE,
    check_outbound_url,
    create_project,
    create_scenario,
    generic_scenario,
    may_bind_sources,
    may_create_projects,
    pin_git_repository,
    set_source_backend,
    update_project,
)
from smrweb.tracking.services.retention import (  # noqa: F401
    RetentionReport,
    apply_all_retention,
    apply_retention,
    check_retention,
    update_retention,
)
from smrweb.tracking.services.rollups import (  # noqa: F401
    advance_turn_rollup,
    rebuild_turn_rollups,
)
from smrweb.tracking.services.runs import (  # noqa: F401
    RUN_ID_RE,
    RUN_SETTINGS,
    attribute_turns,
    close_run,
    flag_stalled_runs,
    recompute_scores,
    recompute_spend,
    recompute_state,
    record_stop_result,
    reprice_turns,
    request_stop,
    update_run_settings,
)
from smrweb.tracking.services.saved_views import (  # noqa: F401
    delete_view,
    may_delete_view,
    save_view,
)
from smrweb.tracking.services.shares import (  # noqa: F401
    create_share_link,
    may_revoke,
    may_share,
    resolve_share_link,
    revoke_share_link,
)
from smrweb.tracking.services.source_health import (  # noqa: F401
    POLL_FIELDS,
    SOURCE_DIRECTIONS,
    choose_score_metric,
    claim_due_projects,
    claim_source_lease,
    note_declared_metrics,
    record_full_listing,
    record_poll,
    record_polled_unchanged,
    record_results_reach,
    record_source_failure,
    record_source_success,
    record_sync,
    release_source_lease,
    replace_smr_api_key,
    source_health,
)
from smrweb.tracking.services.sso import (  # noqa: F401
    apply_project_claim,
    parse_project_claim,
)
from smrweb.tracking.services.summaries import (  # noqa: F401
    claimed_summary,
    record_summary,
    start_summary,
)
from smrweb.tracking.services.tokens import (  # noqa: F401
    authenticate_token,
    create_api_token,
    revoke_api_token,
)
