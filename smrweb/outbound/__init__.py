"""Requests smrweb makes on its own initiative: rollbacks, launches, steering and stops sent to a
project's source, alert deliveries and mail. `http` is the one POST and the one rule of which answers
are retried; `webhooks` the signed-webhook protocol; `dispatch` the one attempt loop over `targets`."""
