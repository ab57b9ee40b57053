/* The MLflow client prints "<tracking URI>/#/experiments/<id>/runs/<run id>" (and "…/#/experiments/<id>").
   A fragment never reaches the server, so /mlflow/ (templates/dashboard/mlflow_link.html) is this page: read
   the fragment and go on to /mlflow/runs/<run id>?experiment=<id> or /mlflow/experiments/<id>, which send the
   signed-in person to the run's or the project's page. No fragment: the projects. A static file, as the
   CSP (script-src 'self') wants. */
(function () {
  "use strict";
  var el = document.querySelector("[data-mlflow-link]");
  if (!el) return;
  // "#/experiments/2/runs/abc?workspace=x" → ["experiments", "2", "runs", "abc"]
  var parts = window.location.hash.replace(/^#\/?/, "").split("?")[0].split("/");
  var experiment = parts[0] === "experiments" && parts[1] ? decodeURIComponent(parts[1]) : "";
  var run = experiment && parts[2] === "runs" && parts[3] ? decodeURIComponent(parts[3]) : "";
  var target = el.dataset.projects;
  if (run) {
    target = el.dataset.runs.replace("RUN", encodeURIComponent(run)) +
      "?experiment=" + encodeURIComponent(experiment);
  } else if (experiment) {
    target = el.dataset.experiments.replace("EXPERIMENT", encodeURIComponent(experiment));
  }
  window.location.replace(target);
})();
