"""The architecture picture of the docs, drawn from the real imports (tests/structure_kit.py).

    .venv/bin/python tests/architecture_kit.py            # writes docs/explanation/architecture.svg
    .venv/bin/python tests/architecture_kit.py --check    # exit 1 if that file is not current

Each box is a *unit* (a package, or the modules of one layer that no package
groups: the client's modules, bridges' core), placed in its layer
(:data:`structure_kit.LAYERS`, bottom up), with what it holds; each arrow
says that some module of one unit imports some module of the other. An arrow
that a longer path of arrows implies is not drawn (the face's, say, or the
CLI's to the client). The SVG is plain (no script, no font to fetch), and the
same structure always draws the same bytes (no line counts: the picture
changes only when the structure does), so a test holds the committed picture
to the code (tests/test_structure.py).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping
from html import escape
from typing import Final

from structure_kit import LAYERS, ROOT, import_graph, layer_of

PICTURE: Final = ROOT / "docs" / "explanation" / "architecture.svg"

#: The boxes, left to right within a layer (so that long arrows pass between boxes), and
#: what each holds. A module is in the box of the longest name that is it or one of its
#: packages; the rest of a top package is one box (``trio_stomp``: the client; ``bridges
#: core``).
_UNITS: Final = {
    "trio_stomp.frame": "the wire format, sans-IO",
    "trio_stomp": "Client, connect, subscriptions",
    "trio_stomp.broker": "the embedded broker",
    "trio_stomp.testing": "pytest plugin, fakes",
    "trio_stomp.cli": "trio-stomp command",
    "bridges core": "Route, config, registry",
    "bridges.endpoints.file": "files",
    "bridges.endpoints.stomp": "STOMP",
    "bridges.endpoints.http": "webhooks",
    "bridges.endpoints.mqtt": "MQTT",
    "bridges.endpoints.redis": "Redis Streams",
    "bridges.endpoints.nats": "NATS",
    "bridges.endpoints.amqp": "AMQP",
    "bridges.endpoints": "asyncio bridge, ids",
    "bridges.service": "the bridge process",
    "bridges.testing": "contract kit, fakes",
    "bridges.spark": "routes on Spark",
    "bridges": "the public names",
    "bridges._cli": "bridges command",
}
#: Boxes that are not one package and all under it.
_GROUPS: Final = ("trio_stomp", "bridges core", "bridges")

_WIDTH: Final = 980
_ROW: Final = 86
_BOX: Final = 44
_LEFT: Final = 140
_CHAR: Final = 7.4  # px per character of the 12 px font, roughly


def unit_of(module: str) -> str:
    """The box ``module`` is drawn in."""
    packages = [
        unit
        for unit in _UNITS
        if unit not in _GROUPS and (module == unit or module.startswith(f"{unit}."))
    ]
    if packages:
        return max(packages, key=len)
    if module == "bridges":
        return module
    return "bridges core" if module.startswith("bridges.") else "trio_stomp"


def unit_graph(graph: Mapping[str, frozenset[str]]) -> Counter[tuple[str, str]]:
    """(importing unit, imported unit) -> how many module imports join them."""
    return Counter(
        (unit_of(module), unit_of(target))
        for module, targets in graph.items()
        for target in targets
        if unit_of(module) != unit_of(target)
    )


def implied(edges: Counter[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges that a longer path of ``edges`` implies (not drawn: the picture stays legible)."""
    targets: dict[str, set[str]] = {}
    for source, target in edges:
        targets.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str) -> bool:
        todo, seen = list(targets.get(start, ())), set()
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += targets.get(node, ())
        return False

    return {
        (source, target)
        for source, target in edges
        if any(reaches(step, target) for step in targets[source] if step != target)
    }


def _label(unit: str) -> str:
    return {
        "bridges": "bridges (the face)",
        "bridges._cli": "bridges CLI",
        "bridges.endpoints": "endpoints, shared",
        "trio_stomp": "trio_stomp (client)",
    }.get(unit, unit.removeprefix("bridges.endpoints.") if unit.count(".") == 2 else unit)


def _width(unit: str, note: str) -> float:
    # (12 px and 10 px sans-serif, a little over their average character width)
    return max(len(_label(unit)) * _CHAR, len(note) * _CHAR * 0.85, 48) + 18


def render(graph: Mapping[str, frozenset[str]]) -> str:
    """The SVG of the units of ``graph`` in their layers."""
    modules: dict[str, list[str]] = {}
    for module in sorted(graph):
        modules.setdefault(unit_of(module), []).append(module)
    rows: dict[int, list[str]] = {}
    for unit, members in modules.items():
        layers = {layer_of(member) for member in members}
        if len(layers) != 1:
            raise ValueError(f"{unit} spans layers {sorted(layers)}: give it its own box")
        rows.setdefault(layers.pop(), []).append(unit)
    order = {unit: index for index, unit in enumerate(_UNITS)}
    notes = {unit: _UNITS.get(unit, "") for unit in modules}
    boxes: dict[str, tuple[float, float, float]] = {}  # unit -> (x, y, width)
    height = 40 + _ROW * len(LAYERS)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        "<title>trio-stomp and bridges: layers and imports</title>",
        '<defs><marker id="a" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#556"/></marker></defs>',
        f'<rect width="{_WIDTH}" height="{height}" fill="#fff"/>',
    ]
    for layer, (name, _) in enumerate(LAYERS):
        y = 20 + _ROW * (len(LAYERS) - 1 - layer)
        shade = "#eef3fa" if name.startswith("bridges") else "#f4f1ea"
        out.append(
            f'<rect x="4" y="{y}" width="{_WIDTH - 8}" height="{_ROW - 10}" fill="{shade}"/>'
        )
        out.append(f'<text x="12" y="{y + 42}" font-weight="bold">{escape(name)}</text>')
        units = sorted(rows.get(layer, []), key=lambda u: order.get(u, -1))
        widths = [_width(unit, notes[unit]) for unit in units]
        room = _WIDTH - _LEFT - 24 - sum(widths)
        # One box in the middle; more spread out to the edges, out of the long arrows' way.
        gap = room / (len(units) - 1) if len(units) > 1 else room / 2
        x: float = _LEFT + 12 + (0 if len(units) > 1 else gap)
        for unit, width in zip(units, widths, strict=True):
            boxes[unit] = (x, y + 16, width)
            x += width + gap
    for unit, (left, top, width) in sorted(boxes.items()):
        out.append(f"<g><title>{escape(unit)}</title>")
        out.append(
            f'<rect x="{left:.0f}" y="{top}" width="{width:.0f}" height="{_BOX}" rx="5" '
            'fill="#fff" stroke="#334"/>'
        )
        out.append(f'<text x="{left + 8:.0f}" y="{top + 18}">{escape(_label(unit))}</text>')
        note = f'x="{left + 8:.0f}" y="{top + 34}" fill="#556" font-size="10"'
        out.append(f"<text {note}>{escape(notes[unit])}</text></g>")
    # Arrows over the boxes: one that passes a box is seen to pass it.
    edges = unit_graph(graph)
    hidden = implied(edges)
    for source, target in sorted(edges):
        if (source, target) in hidden:
            continue
        sx, sy, sw = boxes[source]
        tx, ty, tw = boxes[target]
        stroke = 'stroke="#556" stroke-opacity="0.6" stroke-width="1.2"'
        if sy == ty:  # within one layer: a curve under the boxes
            x1, x2, y1 = sx + sw / 2, tx + tw / 2, sy + _BOX
            path = f"M{x1:.0f},{y1} Q{(x1 + x2) / 2:.0f},{y1 + 24} {x2:.0f},{y1 + 2}"
            out.append(f'<path d="{path}" fill="none" {stroke} marker-end="url(#a)"/>')
        else:
            out.append(
                f'<line x1="{sx + sw / 2:.0f}" y1="{sy + _BOX}" x2="{tx + tw / 2:.0f}" y2="{ty}" '
                f'{stroke} marker-end="url(#a)"/>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def picture() -> str:
    """The picture of the library as it stands."""
    return render(import_graph())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the picture is stale")
    args = parser.parse_args(argv)
    drawn = picture()
    if args.check:
        current = PICTURE.exists() and PICTURE.read_text(encoding="utf-8") == drawn
        if not current:
            print(f"{PICTURE.relative_to(ROOT)} is stale: run tests/architecture_kit.py")
        return 0 if current else 1
    PICTURE.write_text(drawn, encoding="utf-8")
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
