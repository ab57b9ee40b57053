"""`smrweb` console script (placeholder until the CLI lands in this change)."""


def main() -> None:
    raise SystemExit("smrweb: the CLI is being built")
