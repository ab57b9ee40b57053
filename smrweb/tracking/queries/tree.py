"""The tree of attempts (issue 39): one node per run of a project, joined by how each run came from another.

Edges, each with its kind:

- `launch`: "start the next run" — `Run.parent`, set when the launch's run appeared (services.launches);
- `branch`: a run branched from a checkpoint of another run (SMR's branch-from-checkpoint): its first
  checkpoint continues (`Checkpoint.parent_external_id`) a checkpoint of another run of the project;
- `nested`: an MLflow nested run, whose `mlflow.parentRunId` tag (set by the MLflow client) names its
  parent's run id;
- `rollback`: a run rolled back to an earlier submission or checkpoint of its own (`Rollback`); a marker
  on the run, from the point it went back to (an edge from the run to itself).

A run has at most one parent in the tree: the first of launch, branch, nested that names a run in the
tree (never one that would close a cycle); the others are still edges. A node shows its state, its best
verified score, its spend and turns. It is dead — dimmed — when it failed, was abandoned, or its best
verified score is worse than its parent's, unless the project's best came from it; the path from a root
to the project's best verified run is highlighted.

The runs table's filters narrow it (`matching`: the filtered runs): the runs that match, with the runs
they come from as context. Six queries whatever the number of runs: the runs (with their launch parent),
the matching ids, the verified bests, the branch checkpoints, the nested tags, the rollbacks with their
targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Exists, Max, Min, OuterRef, Q, Subquery

from smrweb.tracking.models import (
    Checkpoint,
    Project,
    Rollback,
    Run,
    RunState,
    RunTag,
    Submission,
    counted_q,
)
from smrweb.tracking.queries import budget

LAUNCH, BRANCH, NESTED, ROLLBACK = "launch", "branch", "nested", "rollback"
EDGE_KINDS = (LAUNCH, BRANCH, NESTED, ROLLBACK)
PARENT_KINDS = (LAUNCH, BRANCH, NESTED)  # in the order that decides a run's one parent in the tree
MLFLOW_PARENT_TAG = "mlflow.parentRunId"
DEAD_STATES = (RunState.FAILED, RunState.ABANDONED)
REGRESSED = "regressed"
OPEN_UP_TO = 12  # a subtree of at most this many runs starts open; a larger one starts closed
FOLD_FROM = 3  # under filters, this many runs in a row that only lead on to a match are drawn as one line


@dataclass(frozen=True)
class Edge:
    parent: int  # run pk (for a rollback, the run itself)
    child: int
    kind: str
    via: str = ""  # the checkpoint a branch came from, where a rollback went back to
    status: str = ""  # a rollback's status


@dataclass
class Node:
    run: Run  # with `spend` annotated
    best: float | None  # the best verified score of the run (its submissions that count, verified ones)
    parent: int | None = None
    kind: str = ""  # the parent edge's kind ("" for a root)
    via: str = ""
    children: list[int] = field(default_factory=list)
    rollbacks: list[Edge] = field(default_factory=list)
    dead: str = ""  # "failed", "abandoned", REGRESSED or ""
    on_best_path: bool = False
    matches: bool = True  # False: shown only because a matching run comes from it
    size: int = 1  # runs in its subtree, itself included

    @property
    def pk(self) -> int:
        return self.run.pk

    @property
    def spend_usd(self) -> Decimal:
        return self.run.spend


@dataclass(frozen=True)
class Row:
    """One line of the drawn tree. `open` starts a collapsible subtree headed by `node` and `close` ends
    it; `sides` starts the runs that came from the run just drawn other than the one its line goes on
    with, and `end_sides` ends them; `node` is a run (`continues`: it comes from the run drawn last at its
    level, `parent` named when other runs were drawn in between)."""

    kind: str  # "open" | "close" | "sides" | "end_sides" | "node" | "fold"
    node: Node | None = None
    continues: bool = False
    open: bool = False
    parent: Node | None = None  # a "fold": the last run folded
    folded: int = 0  # a "fold": runs that match nothing, one after the other, drawn as one line


@dataclass
class Tree:
    project: Project
    nodes: dict[int, Node]  # the shown runs by pk
    roots: list[int]
    edges: list[Edge]
    best: int | None  # the run holding the project's best verified score, when it is shown
    best_score: float | None
    total: int  # the project's runs read (archived ones only when asked)
    matched: int  # the runs the filters keep
    narrowed: bool

    @property
    def best_node(self) -> Node | None:
        return self.nodes[self.best] if self.best is not None else None

    def rows(self, fold: bool = True) -> list[Row]:
        """The tree as lines: a run's child on its way to the best (else its largest subtree) goes on at
        the run's own level; its other children are drawn first, one level in, each with runs after it a
        collapsible subtree. Built without recursion, and a chain of 2,000 launches is one level, not
        2,000."""
        out: list[Row] = []
        work: list[tuple] = []
        for pk in reversed(self.roots):  # a root with runs after it heads a subtree too
            has_children = bool(self.nodes[pk].children)
            work.extend((("close",), ("head", pk)) if has_children else [("line", pk)])
        while work:
            item = work.pop()
            if item[0] in ("close", "sides", "end_sides"):
                out.append(Row(item[0]))
                continue
            node = self.nodes[item[1]]
            if fold and self.narrowed and item[0] != "head":
                chain, last = [], node
                while not last.matches and len(last.children) == 1 and not last.on_best_path:
                    chain.append(last)
                    last = self.nodes[last.children[0]]
                if len(chain) >= FOLD_FROM:
                    out.append(
                        Row(
                            "fold", chain[0], continues=item[0] == "main", parent=chain[-1], folded=len(chain)
                        )
                    )
                    work.append(("main", last.pk, True))
                    continue
            if item[0] == "head":
                out.append(Row("open", node, open=self._starts_open(node)))
            else:
                after_sides = item[0] == "main" and item[2]
                parent = self.nodes[node.parent] if after_sides else None
                out.append(Row("node", node, continues=item[0] == "main", parent=parent))
            if not node.children:
                continue
            main = self._main_child(node)
            sides = [c for c in node.children if c != main]
            if main is not None:
                work.append(("main", main, bool(sides)))
            if sides:
                work.append(("end_sides",))
                for side in reversed(sides):
                    work.extend(
                        (("close",), ("head", side)) if self.nodes[side].children else [("line", side)]
                    )
                work.append(("sides",))
        return out

    def _main_child(self, node: Node) -> int | None:
        """The child its line goes on with: the one on the way to the best, else the one with the most runs
        after it; None when two or more children are all leaves (they are all drawn one level in)."""
        on_path = [c for c in node.children if self.nodes[c].on_best_path]
        if on_path:
            return on_path[0]
        main = max(
            node.children, key=lambda c: (self.nodes[c].size, -self.nodes[c].run.started_at.timestamp())
        )
        return main if self.nodes[main].size > 1 or len(node.children) == 1 else None

    def _starts_open(self, node: Node) -> bool:
        """Open: the way to the best, a small subtree, and under filters every one (each holds a match)."""
        return node.on_best_path or node.size <= OPEN_UP_TO or self.narrowed


def _bests(project: Project) -> dict[int, float]:
    best = Max("score") if project.scenario.maximize else Min("score")
    verified = Submission.objects.filter(project=project).filter(counted_q(unverified=False, of_run=True))
    return dict(verified.order_by().values("run_id").annotate(best=best).values_list("run_id", "best"))


def _parent_edges(project: Project, runs: dict[int, Run]) -> list[Edge]:
    """Every launch, branch and nested edge between the runs (two queries: the runs carry their launch
    parent)."""
    edges = [
        Edge(r.parent_id, pk, LAUNCH) for pk, r in runs.items() if r.parent_id in runs and r.parent_id != pk
    ]
    # Branch: a checkpoint continuing one that is not its own run's, found by the id the source gave it.
    own = Checkpoint.objects.filter(run_id=OuterRef("run_id"), external_id=OuterRef("parent_external_id"))
    other = Checkpoint.objects.filter(
        run__project=project, external_id=OuterRef("parent_external_id")
    ).exclude(run_id=OuterRef("run_id"))
    branches = (
        Checkpoint.objects.filter(run__project=project)
        .exclude(parent_external_id="")
        .exclude(Exists(own))
        .annotate(
            from_run=Subquery(other.values("run_id")[:1]),
            from_label=Subquery(other.values("label")[:1]),
        )
        .filter(from_run__isnull=False)
        .order_by("ts", "id")
        .values_list("run_id", "from_run", "parent_external_id", "from_label")
    )
    seen: set[int] = set()
    for run_id, from_id, checkpoint, label in branches:
        if run_id in runs and from_id in runs and run_id not in seen:
            seen.add(run_id)  # the run's first branch point is where it came from
            edges.append(Edge(from_id, run_id, BRANCH, via=label or checkpoint))
    # Nested: MLflow's parent tag names the parent's run id.
    by_external = {r.external_id: pk for pk, r in runs.items()}
    tags = RunTag.objects.filter(run__project=project, key=MLFLOW_PARENT_TAG).values_list("run_id", "value")
    for run_id, value in tags:
        parent = by_external.get(value)
        if run_id in runs and parent is not None and parent != run_id:
            edges.append(Edge(parent, run_id, NESTED))
    return edges


def _rollback_edges(project: Project, runs: dict[int, Run]) -> list[Edge]:
    rows = (
        Rollback.objects.filter(run__project=project)
        .select_related("target_submission", "target_checkpoint")
        .order_by("created", "id")
    )
    edges = []
    for rb in rows:
        if rb.run_id not in runs:
            continue
        if rb.target_submission_id:
            sub = rb.target_submission
            via = f"submission #{sub.pk} ({sub.score:g})"
        else:
            via = f"checkpoint {rb.target_checkpoint.label or rb.target_checkpoint.external_id}"
        edges.append(Edge(rb.run_id, rb.run_id, ROLLBACK, via=via, status=rb.status))
    return edges


def _worse(score: float, than: float, maximize: bool) -> bool:
    return score < than if maximize else score > than


def project_tree(project: Project, *, matching=None, archived: bool = False) -> Tree:
    """The project's tree of attempts. `matching`: the runs the runs table's filters keep (a queryset of
    the project's runs), or None for every run; `archived`: include archived runs (as the table does)."""
    maximize = project.scenario.maximize
    base = Run.objects.filter(project=project)
    if not archived:
        base = base.filter(archived_at__isnull=True)
    runs = {
        r.pk: r
        for r in base.annotate(spend=budget.spend_usd())
        .only(
            *("id", "project_id", "external_id", "display_name", "state", "failure_family", "failure_detail"),
            *("failure_source", "stalled_since", "last_progress_at", "turn_count", "started_at", "parent_id"),
            "excluded_at",
        )
        .order_by("started_at", "id")
    }
    keep = (
        set(runs) if matching is None else set(matching.order_by().values_list("pk", flat=True)) & set(runs)
    )
    bests = _bests(project)
    edges = _parent_edges(project, runs)
    rollback_edges = _rollback_edges(project, runs)

    for run in runs.values():
        run.project = project  # for its URL and state, without a query per run
    nodes = {pk: Node(run=r, best=bests.get(pk)) for pk, r in runs.items()}
    # One parent per run, by kind, never closing a cycle.
    rank = {kind: i for i, kind in enumerate(PARENT_KINDS)}
    for edge in sorted(edges, key=lambda e: rank[e.kind]):
        child = nodes[edge.child]
        if child.parent is not None:
            continue
        up, cycle = edge.parent, False
        while up is not None:
            if up == edge.child:
                cycle = True
                break
            up = nodes[up].parent
        if not cycle:
            child.parent, child.kind, child.via = edge.parent, edge.kind, edge.via
    for edge in rollback_edges:
        nodes[edge.child].rollbacks.append(edge)

    # The project's best verified run (excluded runs do not count in the project's numbers).
    scored = [
        (n.best, n.run.started_at, pk)
        for pk, n in nodes.items()
        if n.best is not None and not n.run.excluded_at
    ]
    # Ties go to the run that reached the score first.
    best_pk = min(scored, key=lambda s: (-s[0] if maximize else s[0], s[1], s[2]))[2] if scored else None

    # The shown runs: the matching ones and every run they come from.
    shown: set[int] = set()
    for pk in keep:
        up = pk
        while up is not None and up not in shown:
            shown.add(up)
            up = nodes[up].parent
    for pk, node in nodes.items():
        node.matches = pk in keep
    nodes = {pk: n for pk, n in nodes.items() if pk in shown}
    roots = []
    for pk, node in nodes.items():  # in start order
        if node.parent is None:
            roots.append(pk)
        else:
            nodes[node.parent].children.append(pk)
        if node.run.state in DEAD_STATES:
            node.dead = str(node.run.state)
        elif node.parent is not None and node.best is not None:
            parent_best = nodes[node.parent].best
            if parent_best is not None and _worse(node.best, parent_best, maximize):
                node.dead = REGRESSED
    up = best_pk if best_pk in nodes else None
    while up is not None:
        nodes[up].on_best_path = True
        nodes[up].dead = ""  # a run the best came from did not end a branch, whatever its own end
        up = nodes[up].parent
    # Subtree sizes, children before parents: reversed start order is not enough (a parent may start
    # after its child in odd data), so walk an explicit post-order.
    order: list[int] = []
    stack = list(roots)
    while stack:
        pk = stack.pop()
        order.append(pk)
        stack.extend(nodes[pk].children)
    for pk in reversed(order):
        node = nodes[pk]
        node.size = 1 + sum(nodes[c].size for c in node.children)

    shown_edges = [e for e in edges + rollback_edges if e.parent in nodes and e.child in nodes]
    return Tree(
        project=project,
        nodes=nodes,
        roots=roots,
        edges=shown_edges,
        best=best_pk if best_pk in nodes else None,
        best_score=nodes[best_pk].best if best_pk in nodes else None,
        total=len(runs),
        matched=len(keep),
        narrowed=matching is not None,
    )


@dataclass(frozen=True)
class Lineage:
    """A run's links on its page: the run it was started from and the runs started from it (launches),
    the MLflow run it is nested in and its nested runs."""

    parent: Run | None
    children: list[Run]
    nested_in: Run | None
    nested: list[Run]


def lineage(run: Run) -> Lineage:
    """The run page's "started from / next runs / nested in / nested runs", in one query."""
    names_me = RunTag.objects.filter(run_id=OuterRef("pk"), key=MLFLOW_PARENT_TAG, value=run.external_id)
    named_by_me = RunTag.objects.filter(run_id=run.pk, key=MLFLOW_PARENT_TAG, value=OuterRef("external_id"))
    launch = Q(parent_id=run.pk) | (Q(pk=run.parent_id) if run.parent_id else Q(pk__in=[]))
    related = list(
        Run.objects.filter(project_id=run.project_id)
        .exclude(pk=run.pk)
        .annotate(nests_in_me=Exists(names_me), nests_me=Exists(named_by_me))
        .filter(launch | Q(nests_in_me=True) | Q(nests_me=True))
        .only("pk", "project_id", "external_id", "display_name", "parent_id", "started_at")
        .order_by("started_at", "id")
    )
    for r in related:
        r.project = run.project  # for get_absolute_url, without a query per run
    return Lineage(
        parent=next((r for r in related if r.pk == run.parent_id), None),
        children=[r for r in related if r.parent_id == run.pk],
        nested_in=next((r for r in related if r.nests_me), None),
        nested=[r for r in related if r.nests_in_me],
    )
