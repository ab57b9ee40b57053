"""The git-workspace source: a project whose one run is a branch of a local git repository.

Read with the `git` CLI (argument lists, no shell, `git -C <repo>`, no network), written through the
tracking services like every other source:

- every commit on the branch that changes the scenario's `artifact_path` (as `git log -- <path>` lists
  them, oldest first) → an artifact version (content-addressed blob, `commit` = the commit) and a
  restorable checkpoint `git:<commit>`;
- each line of `.smrweb/scores.jsonl` at the branch head → a score (a submission) with the id
  `git:<commit>:<line hash>`, linked to the artifact bytes of the commit it names;
- a rollback → a new commit on top of the branch that restores the path's bytes from the chosen commit,
  built without a checkout (a temporary index) and published with a compare-and-swap `update-ref`:
  history is never rewritten.

The run's cursor (`Run.source_cursor`) holds the last synced commit and the scores file's blob id.
See docs/integrations.md#git-workspace-source.

One module per job (import the one you need; this package re-exports nothing):
  cli.py        the hardened `git` CLI: a private environment, SAFE_CONFIG, argument lists, timeouts;
                branch and path checks; the errors
  ownership.py  the repository at the bound path is the agent's own (red-team N3), and its pin
  mirror.py     `Repo`: one branch read through the bare mirror smrweb keeps, and its plumbing writes
  worktree.py   writing a restored file into a work tree without following a symlink
  sync.py       a sync: commits touching the artifact path, and the scores file → events
  branches.py   the writes a person asks for: `roll_back` (a rollback commit) and `start_branch` (the
                next run's branch); a branch's run id
"""
