"""MLflow's tracking API as a way in (docs/integrations.md, "MLflow client"): what an unchanged MLflow client
sends, mapped onto the ingest contract and the write path, and smrweb's rows read back in MLflow's shapes.

Experiments are projects (name = slug, id = the project's pk as text; "0", MLflow's default experiment,
is a token's own project). Runs keep their smrweb external id as MLflow's run id (new runs get a uuid hex,
as MLflow gives them). Metrics are `metric` events whose id is a digest of (run, key, step, timestamp,
value), so a client's retry writes nothing twice; a metric named like the scenario's score metric is also
a `score` event (a submission) naming its artifact: the run's `smrweb.artifact` tag, else the scenario's
artifact path (its latest version then, or the first to arrive when the file is logged after the score).
Run status is `state` events (FINISHED → done, FAILED → failed, KILLED → stopped, at the end time given).
Params (`RunParam`) and tags (`RunTag`, the review workbench's tags) have no event: they go through their
services. A request is written all or nothing.

Requests arrive as the decoded JSON (or query) dicts; `MlflowError` carries MLflow's error code.

One module per half (import the one you need; this package re-exports nothing):
  wire.py    what both halves share: MLflow's error shape, request fields, timestamps, artifact locations;
  ingest.py  the way in: runs created and updated, metrics, params, tags, artifact uploads → the write path;
  read.py    the read API: experiments, runs, metric history and artifact listings in MLflow's JSON shapes;
  search.py  search-runs and search-experiments: MLflow's filter language and ordering.
"""
