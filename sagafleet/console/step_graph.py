"""A saga's steps and compensations as a picture of its dependency graph: inline SVG, drawn
on the server (no script), styled by classes from ``static/sagas.css``.

Layout (pure, :func:`layout`): a step's column is its depth (the longest chain of
``depends_on`` before it), steps of one column keep the definition's order; each step's
compensation, when it declares one, sits under it. Edges: a solid arrow from a dependency to
its dependent (forward order), a dashed arrow between compensations in the reverse direction
(the order undoing runs in), a dotted tie from a step to its own compensation. Every box
carries its state as text and as a class (``st-<state>``), so the picture never depends on
colour alone, and links to the step's row in the steps table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from saga_core.definitions.definition import SagaDefinition
from saga_core.engine.state import RunStatus
from sagafleet.console.markup import Markup, html, join

NODE_W, NODE_H, COMP_H = 190, 56, 36
COL_GAP, ROW_GAP, COMP_GAP, MARGIN = 64, 30, 16, 16
NOT_STARTED = str(RunStatus.PENDING)
"""The state shown for an operation a running saga has not reached (no run recorded yet)."""
NOT_RUN = "not run"
"""The state shown for an operation a finished saga never reached."""

_CLASS_SAFE = re.compile(r"[^a-z0-9_-]")


@dataclass(frozen=True)
class Box:
    """One operation's box: where it is drawn and what it shows."""

    step_id: str
    kind: str  # "forward" or "compensation"
    label: str
    detail: str
    state: str
    x: int
    y: int
    w: int
    h: int
    pivot: bool = False


@dataclass(frozen=True)
class Edge:
    """An arrow from one box to another; ``style`` is ``depends``, ``undo`` or ``tie``."""

    source: Box
    target: Box
    style: str


@dataclass(frozen=True)
class Picture:
    """Everything to draw, and the canvas size."""

    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int


def _depths(definition: SagaDefinition) -> dict[str, int]:
    # Definitions need not list a step after its dependencies: relax until nothing changes
    # (validation refused cycles, so at most one pass per step).
    depth = {step.id: 0 for step in definition.steps}
    for _ in definition.steps:
        changed = False
        for step in definition.steps:
            wanted = max((depth[d] + 1 for d in step.depends_on if d in depth), default=0)
            if wanted != depth[step.id]:
                depth[step.id], changed = wanted, True
        if not changed:
            break
    return depth


def _undone_before(definition: SagaDefinition, step_id: str,
                   undo: Mapping[str, Box]) -> list[str]:
    """The nearest steps before ``step_id`` that have a compensation: through steps without
    one (read-only, say), so the reverse order stays drawn across them."""
    found: list[str] = []
    seen: set[str] = set()
    waiting = list(definition.step(step_id).depends_on)
    while waiting:
        dep = waiting.pop(0)
        if dep in seen or not definition.has_step(dep):
            continue
        seen.add(dep)
        if dep in undo:
            found.append(dep)
        else:
            waiting.extend(definition.step(dep).depends_on)
    return found


def layout(definition: SagaDefinition, states: Mapping[tuple[str, str], str], *,
           unreached: str = NOT_STARTED) -> Picture:
    """Where each step's box (and its compensation's) goes; ``states`` maps
    ``(step_id, kind)`` to the run's state (absent: ``unreached``)."""
    depth = _depths(definition)
    rows_in: dict[int, int] = {}
    forward: dict[str, Box] = {}
    undo: dict[str, Box] = {}
    row_h = NODE_H + COMP_GAP + COMP_H + ROW_GAP
    for step in definition.steps:
        column = depth[step.id]
        row = rows_in.get(column, 0)
        rows_in[column] = row + 1
        x = MARGIN + column * (NODE_W + COL_GAP)
        y = MARGIN + row * row_h
        forward[step.id] = Box(
            step.id, "forward", step.id, f"{step.tool} v{step.version} · {step.semantics}",
            states.get((step.id, "forward"), unreached), x, y, NODE_W, NODE_H, step.pivot)
        if step.compensation is not None:
            comp = step.compensation
            undo[step.id] = Box(
                step.id, "compensation", f"undo {step.id}", f"{comp.tool} v{comp.version}",
                states.get((step.id, "compensation"), unreached),
                x + 12, y + NODE_H + COMP_GAP, NODE_W - 24, COMP_H)
    edges: list[Edge] = []
    for step in definition.steps:
        edges += [Edge(forward[dep], forward[step.id], "depends")
                  for dep in step.depends_on if dep in forward]
        if step.id in undo:
            edges.append(Edge(forward[step.id], undo[step.id], "tie"))
            edges += [Edge(undo[step.id], undo[before], "undo")
                      for before in _undone_before(definition, step.id, undo)]
    columns = max(depth.values(), default=0) + 1
    rows = max(rows_in.values(), default=1)
    width = 2 * MARGIN + columns * NODE_W + (columns - 1) * COL_GAP
    height = 2 * MARGIN + rows * row_h - ROW_GAP
    return Picture(tuple([*forward.values(), *undo.values()]), tuple(edges), width, height)


def state_class(state: str) -> str:
    """The CSS class of a state (``st-succeeded``); only [a-z0-9_-] survive."""
    return "st-" + _CLASS_SAFE.sub("_", state.lower())


def _edge(edge: Edge) -> Markup:
    a, b = edge.source, edge.target
    if edge.style == "tie":
        x = a.x + a.w // 2
        return html('<line class="edge tie" x1="{}" y1="{}" x2="{}" y2="{}"/>',
                    x, a.y + a.h, x, b.y)
    if edge.style == "undo":  # from a dependent's compensation back to its dependency's
        x1, y1, x2, y2 = a.x, a.y + a.h // 2, b.x + b.w, b.y + b.h // 2
    else:
        x1, y1, x2, y2 = a.x + a.w, a.y + a.h // 2, b.x, b.y + b.h // 2
    bend = (x2 - x1) // 2  # control points half way: a gentle S, either direction
    marker = "arrow-undo" if edge.style == "undo" else "arrow"
    return html('<path class="edge {}" d="M{} {} C{} {} {} {} {} {}" marker-end="url(#{})"/>',
                edge.style, x1, y1, x1 + bend, y1, x2 - bend, y2, x2, y2, marker)


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _box(box: Box) -> Markup:
    classes = f"node {box.kind} {state_class(box.state)}" + (" pivot" if box.pivot else "")
    title = f"{box.label} ({box.kind}): {box.state} · {box.detail}"
    anchor = f"#step-{box.step_id}-{box.kind}"
    name = box.label + (" ★ pivot" if box.pivot else "")
    # Three lines in a step's box (name, state, tool and semantics), two in an undo box.
    detail_line = (html('<text class="detail" x="{}" y="{}">{}</text>',
                        box.x + 8, box.y + 48, _clipped(box.detail, 34))
                   if box.kind == "forward" else Markup(""))
    return html(
        '<a href="{}" class="step-link"><g class="{}" data-step="{}" data-kind="{}" '
        'data-state="{}"><title>{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="6"/>'
        '<text class="name" x="{}" y="{}">{}</text>'
        '<text class="state" x="{}" y="{}">{}</text>{}</g></a>',
        anchor, classes, box.step_id, box.kind, box.state, title,
        box.x, box.y, box.w, box.h,
        box.x + 8, box.y + 15, _clipped(name, 28),
        box.x + 8, box.y + 30, box.state,
        detail_line)


def render(picture: Picture, *, caption: str) -> Markup:
    """The picture as an ``<svg>`` element (accessible: a title and one group per box)."""
    return html(
        '<figure class="step-graph"><svg xmlns="http://www.w3.org/2000/svg" role="group" '
        'aria-labelledby="graph-title" viewBox="0 0 {} {}" width="{}" height="{}">'
        '<title id="graph-title">{}</title>'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0 0 L10 5 L0 10 z" class="arrowhead"/>'
        '</marker><marker id="arrow-undo" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto">'
        '<path d="M0 0 L10 5 L0 10 z" class="arrowhead undo"/></marker></defs>'
        '{}{}</svg><figcaption>{}</figcaption></figure>',
        picture.width, picture.height, picture.width, picture.height, caption,
        join(_edge(e) for e in picture.edges), join(_box(b) for b in picture.boxes),
        Markup("Solid arrows: a step runs after the one it depends on. Dashed arrows: "
               "compensations run in the reverse order. ★ marks the pivot."))


def step_graph(definition: SagaDefinition, states: Mapping[tuple[str, str], str], *,
               caption: str, unreached: str = NOT_STARTED) -> Markup:
    """The dependency graph of ``definition`` with each operation's state, as inline SVG."""
    return render(layout(definition, states, unreached=unreached), caption=caption)
