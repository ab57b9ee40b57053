"""A run's log: text lines pushed by a harness (`POST …/runs/{run}/logs`, `smrweb log`, the logging
handler) or read from the SMR backend's run log archives, and the batches they came in (a batch id
makes a retried push a no-op)."""

from __future__ import annotations

from django.db import models

from smrweb.tracking.models.run import Run

LOG_LINE_MAX = 4000  # characters kept of one line; a longer line is cut (and marked) by the write path


class LogLevel(models.IntegerChoices):
    """Python's logging levels, so a handler's `record.levelno` is stored as it is."""

    DEBUG = 10, "debug"
    INFO = 20, "info"
    WARNING = 30, "warning"
    ERROR = 40, "error"
    CRITICAL = 50, "critical"

    @classmethod
    def name_of(cls, levelno: int) -> str:
        """The level's name ("warning" for 30); a custom levelno keeps its number ("15")."""
        return cls(levelno).label if levelno in cls.values else str(levelno)

    @classmethod
    def parse(cls, value: object) -> int:
        """A level from a name ("warning", any case; "warn" and "fatal" as Python's logging has them) or a
        levelno 1..50 (a custom levelno is kept as it is, so "warning and worse" still compares). Raises
        ValueError naming what is accepted."""
        if isinstance(value, bool):
            raise ValueError(LEVEL_HELP)
        if isinstance(value, int):
            if 1 <= value <= cls.CRITICAL:
                return value
            raise ValueError(LEVEL_HELP)
        if isinstance(value, str):
            name = value.strip().lower()
            if name.isdigit():
                return cls.parse(int(name))
            if name in LEVEL_NAMES:
                return LEVEL_NAMES[name]
        raise ValueError(LEVEL_HELP)


LEVEL_NAMES = {
    **{label: int(value) for value, label in LogLevel.choices},
    "warn": LogLevel.WARNING,
    "fatal": LogLevel.CRITICAL,
    "err": LogLevel.ERROR,
}
LEVEL_HELP = "Level must be one of debug, info, warning, error, critical (or warn, fatal) or a levelno 1-50."


class LogSource(models.TextChoices):
    PUSH = "push", "pushed"
    SMR = "smr", "SMR log archive"


class RunLogLine(models.Model):
    """One line. `seq` numbers a run's lines in the order they were kept (1, 2, …): the Logs card pages
    and tails by it, so a line's place never depends on clocks that disagree."""

    # No index of its own: the two below lead with run.
    run = models.ForeignKey(Run, models.CASCADE, related_name="log", db_index=False)
    seq = models.PositiveBigIntegerField()
    ts = models.DateTimeField()
    level = models.PositiveSmallIntegerField(choices=LogLevel.choices, default=LogLevel.INFO)
    text = models.TextField()
    source = models.CharField(max_length=10, choices=LogSource.choices, default=LogSource.PUSH)
    stream = models.CharField(max_length=200, blank=True)  # e.g. "stderr", "worker-3", an archive's name

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="logline_run_seq_uniq")]
        indexes = [
            # The level filter ("warnings and worse") pages by seq within the levels asked for.
            models.Index(fields=["run", "level", "seq"], name="logline_run_level_seq_idx"),
        ]


class RunLogBatch(models.Model):
    """A batch of lines as it arrived: a push's `batch_id`, or an SMR archive (`smr:<archive key>`).
    Sending the same batch id again keeps nothing new and answers what the first time kept."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="log_batches")
    batch_id = models.CharField(max_length=200)
    source = models.CharField(max_length=10, choices=LogSource.choices, default=LogSource.PUSH)
    kept = models.PositiveIntegerField(default=0)
    dropped = models.PositiveIntegerField(default=0)  # lines over the run's cap: counted, not kept
    first_seq = models.PositiveBigIntegerField(null=True, blank=True)
    last_seq = models.PositiveBigIntegerField(null=True, blank=True)
    # An SMR archive that could not be read: why (kept 0). Never retried: the backend's archive is what
    # it is; a fault worth retrying (a timeout, a 5xx) leaves no batch.
    problem = models.CharField(max_length=500, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "batch_id"], name="logbatch_run_batch_uniq")]
