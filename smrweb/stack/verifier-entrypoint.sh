#!/bin/sh
# The Docker verifier's start (docker-compose.yml, service `verifier`): give the validator sandbox the
# delegated cgroup v2 tree it needs (docs/operations.md §Validator sandbox), then run the command.
#
# In a private cgroup namespace /sys/fs/cgroup is the container's own tree, mounted read-only: remounted
# writable (CAP_SYS_ADMIN). A v2 cgroup that hands controllers to its children may hold no processes, so
# this shell (and so the worker it becomes) moves to `worker/`, and the sandboxes are made under
# `sandboxes/`. On a cgroup v1 host nothing is needed. Whatever fails here, the sandbox's own start-up
# check says what is missing ("cannot verify safely: …") and no validator runs with weaker limits.
set -u
root=/sys/fs/cgroup
if [ -f "$root/cgroup.controllers" ]; then
  mount -o remount,rw "$root" 2>/dev/null || echo "verifier: cannot make $root writable (needs CAP_SYS_ADMIN)" >&2
  mkdir -p "$root/worker" "$root/sandboxes" 2>/dev/null
  for pid in $(cat "$root/cgroup.procs" 2>/dev/null); do
    echo "$pid" > "$root/worker/cgroup.procs" 2>/dev/null || true
  done
  echo "+memory +pids" > "$root/cgroup.subtree_control" 2>/dev/null \
    && echo "+memory +pids" > "$root/sandboxes/cgroup.subtree_control" 2>/dev/null \
    || echo "verifier: cannot delegate the memory and pids controllers under $root" >&2
  export SMRWEB_SANDBOX_CGROUP="$root/sandboxes"
fi
exec "$@"
