"""MLflow's tracking REST API under /mlflow (docs/integrations.md, "MLflow client"); the mapping is
smrweb/sources/mlflow/, these views only read the request and answer."""
