"""gunicorn's own settings (`gunicorn -c python:smrweb.gunicorn_conf`): with SMRWEB_LOG_FORMAT=json its
start-up, worker and access lines are JSON objects like every other process's (docs/operations.md#logs);
otherwise gunicorn's readable defaults. The access line names the request id the app answered with."""

import os

from smrweb.core import logcontext

access_log_format = '%(h)s "%(r)s" %(s)s %(M)sms %({x-request-id}o)s'

if os.environ.get("SMRWEB_LOG_FORMAT", "console") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": logcontext.CONTEXT_FILTER},
        "formatters": {"json": logcontext.JSON_FORMATTER},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["context"],
                "stream": "ext://sys.stdout",
            },
            "error_console": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["context"],
                "stream": "ext://sys.stderr",
            },
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
