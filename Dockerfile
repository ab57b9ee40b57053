# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    SMRWEB_DATA_DIR=/var/lib/smrweb SMRWEB_STATIC_ROOT=/app/staticfiles
WORKDIR /app

# git: the git-workspace source reads (and rollback commits to) repositories mounted into the worker.
# bubblewrap: the validator sandbox (setpriv and prlimit come with util-linux).
# tzdata: the per-user clock renders pages in IANA zones (zoneinfo reads the system database).
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap tzdata && rm -rf /var/lib/apt/lists/*
COPY requirements.lock pyproject.toml ./
RUN pip install --require-hashes -r requirements.lock

COPY manage.py ./
COPY smrweb ./smrweb
COPY templates ./templates
COPY static ./static
# Static files are collected at build time; the key only exists for this one command.
RUN SMRWEB_PRODUCTION=true SECRET_KEY=collectstatic-only-build-key-not-used-at-runtime-0123456789 \
    python manage.py collectstatic --noinput \
 && useradd --system --home /var/lib/smrweb smrweb && mkdir -p /var/lib/smrweb && chown smrweb /var/lib/smrweb
USER smrweb

EXPOSE 8000
CMD ["gunicorn", "smrweb.wsgi", "--config", "python:smrweb.gunicorn_conf", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--access-logfile", "-"]
