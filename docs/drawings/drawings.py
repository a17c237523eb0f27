#!/usr/bin/env python3
"""Draws the user guide's figures (lock-core/src/guide/drawings/*.svg) from data.

    python3 docs/drawings/drawings.py          # writes every drawing
    python3 docs/drawings/drawings.py --check  # exit 1, naming each file, if a committed drawing is not what
                                               # this script writes (CI runs this)

Each drawing is a story told as data: lanes (a client, the lock server, the storage) and what happens on them at
which time (spans, point events, messages between lanes), or, for the deployments, boxes and the lines between
them. Change the story by changing the data at the bottom of this file, run the script, and commit the SVGs it
writes. The renderer refuses a label that would leave the canvas, so a longer label fails here, not in a reader's
browser.

The SVGs are made to be pasted inline into rustdoc's markdown: the root tag on the first line, no blank line
anywhere (a blank line ends an HTML block), no external reference (fonts, images, style sheets), explicit closing
tags, a white card of their own so that they read the same in light and dark themes, and at most 760 px wide.
Standard library only.
"""

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "lock-core" / "src" / "guide" / "drawings"

WIDTH = 760
FONT = "sans-serif"

# Mid-contrast colours on the drawing's own white card: each kind has a stroke and a light fill.
INK = "#1f2328"
MUTED = "#57606a"
AXIS = "#8c959f"
CARD = "#ffffff"
KINDS = {
    "plain": ("#57606a", "#f0f2f4"),
    "lease": ("#1a7f37", "#dafbe1"),
    "key": ("#0969da", "#ddf4ff"),
    "pause": ("#9a6700", "#fff3c4"),
    "bad": ("#cf222e", "#ffebe9"),
    "good": ("#1a7f37", "#dafbe1"),
    "quiet": ("#8c959f", "#f6f8fa"),
}


def num(value):
    """A coordinate as the file writes it: at most one decimal, no trailing `.0`."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def text_width(text, size):
    """A generous estimate of a label's width in a sans-serif face (no font metrics without a font)."""
    wide = sum(1 for c in text if c.isupper() or c in "mwMW—")
    narrow = sum(1 for c in text if c in "ijlrtf.,:;()|' 1")
    return size * (0.56 * (len(text) - wide - narrow) + 0.72 * wide + 0.34 * narrow)


class Svg:
    """An SVG document, one element per line, every element closed explicitly."""

    def __init__(self, name, height, label, title):
        self.name = name
        self.height = height
        self.lines = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {num(height)}" width="{WIDTH}" '
            f'height="{num(height)}" role="img" aria-label={quoteattr(label)} font-family="{FONT}" '
            f'style="max-width:100%;height:auto">',
            f"<title>{escape(title)}</title>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{num(height)}" rx="8" fill="{CARD}" stroke="{AXIS}" '
            f'stroke-width="1"></rect>',
        ]
        self.markers = set()

    def marker(self, colour):
        """The id of an arrowhead in `colour` (defined once per drawing; ids carry the drawing's name, so two
        drawings on one page do not share them)."""
        ident = f"{self.name}-arrow-{colour.lstrip('#')}"
        if ident not in self.markers:
            self.markers.add(ident)
            self.lines.append(
                f'<defs><marker id="{ident}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}">'
                f"</path></marker></defs>"
            )
        return ident

    def element(self, tag, attrs, content=""):
        rendered = " ".join(f"{key}={quoteattr(num(v) if isinstance(v, float) else str(v))}" for key, v in attrs)
        self.lines.append(f"<{tag} {rendered}>{content}</{tag}>")

    def line(self, x1, y1, x2, y2, colour, width=1.5, dash=None, arrow=False):
        attrs = [("x1", float(x1)), ("y1", float(y1)), ("x2", float(x2)), ("y2", float(y2)), ("stroke", colour),
                 ("stroke-width", width)]
        if dash:
            attrs.append(("stroke-dasharray", dash))
        if arrow:
            attrs.append(("marker-end", f"url(#{self.marker(colour)})"))
        self.element("line", attrs)

    def rect(self, x, y, w, h, kind, dash=None, rx=3):
        stroke, fill = KINDS[kind]
        attrs = [("x", float(x)), ("y", float(y)), ("width", float(w)), ("height", float(h)), ("rx", rx),
                 ("fill", fill), ("stroke", stroke), ("stroke-width", 1.2)]
        if dash:
            attrs.append(("stroke-dasharray", dash))
        self.element("rect", attrs)

    def circle(self, x, y, r, stroke, fill):
        self.element("circle", [("cx", float(x)), ("cy", float(y)), ("r", r), ("fill", fill), ("stroke", stroke),
                                ("stroke-width", 1.5)])

    def text(self, x, y, text, size=11.5, anchor="start", colour=INK, weight=None, halo=CARD):
        width = text_width(text, size)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        if left < 4 or left + width > WIDTH - 4 or y - size < 2 or y + 3 > self.height:
            raise ValueError(f"{self.name}: label {text!r} leaves the canvas (x {left:.0f}–{left + width:.0f}, "
                             f"y {y:.0f}); move it or shorten it in the data")
        attrs = [("x", float(x)), ("y", float(y)), ("font-size", size), ("fill", colour)]
        if anchor != "start":
            attrs.append(("text-anchor", anchor))
        if weight:
            attrs.append(("font-weight", weight))
        if halo:
            # An outline in the background's colour under the glyphs keeps a label readable across a line.
            attrs += [("stroke", halo), ("stroke-width", 3), ("stroke-linejoin", "round"), ("paint-order", "stroke")]
        self.element("text", attrs, escape(text))

    def render(self):
        lines = self.lines + ["</svg>"]
        svg = "\n".join(lines) + "\n"
        check_embeddable(self.name, svg)
        return svg


def check_embeddable(name, svg):
    """What inline embedding in rustdoc markdown needs (see the module docs)."""
    problems = []
    if any(not line.strip() for line in svg.split("\n")[:-1]):
        problems.append("a blank line (it would end rustdoc's HTML block)")
    for bad in ("href", "@import", "<?xml", "<image", "<style", "<script"):
        if bad in svg:
            problems.append(f"{bad!r} (no external references, styles or scripts)")
    if "url(" in svg.replace("url(#", ""):
        problems.append("a url() that is not a local #id")
    if not svg.startswith("<svg xmlns=") or "\n" in svg.split(">", 1)[0]:
        problems.append("the root tag must open the first line, whole")
    try:
        ElementTree.fromstring(svg)
    except ElementTree.ParseError as err:
        problems.append(f"not well-formed XML ({err})")
    if problems:
        raise ValueError(f"{name}: not embeddable: " + "; ".join(problems))


# --- Timelines ---------------------------------------------------------------------------------------------------

LEFT = 132  # where time starts; the lane names are left of it
RIGHT = WIDTH - 20
TOP = 66  # the first lane's axis
LANE_GAP = 92
ROW = 10  # a span's centre above (row -1) or below (row 1) its lane's axis
BAND = 16  # a span's height


def timeline(d):
    """A timeline: one horizontal axis per lane, time to the right.

    `d["lanes"]`: (id, name) from top to bottom. `d["items"]`, each a dict with `type`:
    - `span`: `lane`, `t0`, `t1`, `kind`, `label` (inside the band, from `label_t` if given, clear of the arrows
      that cross the band), `row` (-1 above the axis, 0 on it, 1 below), `dash` (a dashed outline);
    - `mark`: a point event, `lane`, `t`, `kind`, `label`, `pos` (`above` or `below`), `anchor`
      (`start`, `middle`, `end`), `shape` (`dot` or `cross`);
    - `msg`: a message, `from`/`t0` to `to`/`t1`, `kind`, `label`, `side` (`left` or `right` of the arrow),
      `at` (where along the arrow the label sits, 0 to 1), `dash`.
    """
    lanes = {ident: TOP + i * LANE_GAP for i, (ident, _) in enumerate(d["lanes"])}
    bottom = TOP + (len(d["lanes"]) - 1) * LANE_GAP
    height = bottom + 80
    svg = Svg(d["name"], height, d["label"], d["title"])
    scale = (RIGHT - LEFT) / d["t_end"]

    def x(t):
        return LEFT + t * scale

    svg.text(16, 24, d["title"], size=14, weight="bold", halo=False)
    for ident, name in d["lanes"]:
        y = lanes[ident]
        svg.text(16, y + 4, name, size=12.5, weight="bold", halo=False)
        svg.line(LEFT, y, RIGHT, y, AXIS, width=1)
    axis_y = bottom + 58
    svg.line(LEFT, axis_y, RIGHT, axis_y, MUTED, width=1, arrow=True)
    svg.text(RIGHT - 8, axis_y - 6, "time", size=11, anchor="end", colour=MUTED, halo=False)

    # Shapes first, then every label, so that no line crosses a label's glyphs.
    labels = []
    for item in (i for i in d["items"] if i["type"] == "span"):
        y = lanes[item["lane"]] + item.get("row", 0) * ROW
        x0, x1 = x(item["t0"]), x(item["t1"])
        svg.rect(x0, y - BAND / 2, x1 - x0, BAND, item["kind"], dash=item.get("dash") and "4 3")
        if item.get("label"):
            lx = x(item["label_t"]) if "label_t" in item else x0 + 5
            labels.append(dict(x=lx, y=y + 4, text=item["label"], size=10.5, halo=KINDS[item["kind"]][1]))
    for item in (i for i in d["items"] if i["type"] == "msg"):
        y0, y1 = lanes[item["from"]], lanes[item["to"]]
        x0, x1 = x(item["t0"]), x(item["t1"])
        colour = KINDS[item.get("kind", "plain")][0]
        svg.line(x0, y0, x1, y1, colour, width=1.6, dash=item.get("dash") and "5 4", arrow=True)
        at = item.get("at", 0.5)
        lx, ly = x0 + (x1 - x0) * at, y0 + (y1 - y0) * at + 4
        right = item.get("side", "right") == "right"
        labels.append(dict(x=lx + 6 if right else lx - 6, y=ly, text=item["label"], size=11,
                           anchor="start" if right else "end", colour=colour))
    for item in (i for i in d["items"] if i["type"] == "mark"):
        y = lanes[item["lane"]]
        px = x(item["t"])
        stroke, fill = KINDS[item.get("kind", "plain")]
        if item.get("shape") == "cross":
            svg.line(px - 5, y - 5, px + 5, y + 5, stroke, width=2.2)
            svg.line(px - 5, y + 5, px + 5, y - 5, stroke, width=2.2)
        else:
            svg.circle(px, y, 4.5, stroke, fill)
        above = item.get("pos", "above") == "above"
        labels.append(dict(x=px, y=y - 24 if above else y + 33, text=item["label"], size=11,
                           anchor=item.get("anchor", "middle"), colour=stroke))
    for label in labels:
        svg.text(**label)
    return svg.render()


# --- Boxes and lines (the deployments) ----------------------------------------------------------------------------


def panels(d):
    """Panels side by side in rows, each with a title, boxes, lines between them and a closing note.

    `d["panels"]`: dicts with `title`, `note` (lines under it), `boxes` (id, x, y, w, h, label lines, kind; in the
    panel's own coordinates) and `links` (from, to, kind, dash, arrow, label).
    """
    columns, panel_w, panel_h, gap = 2, (WIDTH - 16 * 3) / 2, d["panel_height"], 16
    rows = (len(d["panels"]) + columns - 1) // columns
    height = 40 + rows * (panel_h + gap)
    svg = Svg(d["name"], height, d["label"], d["title"])
    svg.text(16, 26, d["title"], size=14, weight="bold", halo=False)
    for i, panel in enumerate(d["panels"]):
        ox = 16 + (i % columns) * (panel_w + gap)
        oy = 40 + (i // columns) * (panel_h + gap)
        svg.rect(ox, oy, panel_w, panel_h, "quiet", rx=6)
        svg.text(ox + 12, oy + 20, panel["title"], size=12.5, weight="bold", halo=False)
        boxes = {b["id"]: b for b in panel["boxes"]}

        def centre(box):
            return ox + box["x"] + box["w"] / 2, oy + box["y"] + box["h"] / 2

        def edge(box, towards):
            """Where the line from `box`'s centre towards a point leaves the box."""
            cx, cy = centre(box)
            dx, dy = towards[0] - cx, towards[1] - cy
            if dx == 0 and dy == 0:
                return cx, cy
            sx = (box["w"] / 2) / abs(dx) if dx else float("inf")
            sy = (box["h"] / 2) / abs(dy) if dy else float("inf")
            s = min(sx, sy)
            return cx + dx * s, cy + dy * s

        for link in panel.get("links", []):
            a, b = boxes[link["from"]], boxes[link["to"]]
            start, end = edge(a, centre(b)), edge(b, centre(a))
            colour = KINDS[link.get("kind", "plain")][0]
            svg.line(start[0], start[1], end[0], end[1], colour, width=1.5, dash=link.get("dash") and "5 4",
                     arrow=link.get("arrow", True))
            if link.get("label"):
                mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
                dx, dy = link.get("label_at", (6, -4))
                svg.text(mx + dx, my + dy, link["label"], size=10.5, colour=colour,
                         anchor=link.get("anchor", "start"))
        for box in panel["boxes"]:
            bx, by = ox + box["x"], oy + box["y"]
            svg.rect(bx, by, box["w"], box["h"], box.get("kind", "plain"), dash=box.get("dash") and "4 3")
            lines = box["label"]
            first = by + box["h"] / 2 - (len(lines) - 1) * 6.5 + 4
            for j, label in enumerate(lines):
                if text_width(label, 11 if j == 0 else 10) > box["w"] - 6:
                    raise ValueError(f"{d['name']}: label {label!r} does not fit its box {box['id']!r}; widen the "
                                     f"box or shorten the label in the data")
                svg.text(bx + box["w"] / 2, first + j * 13, label, size=11 if j == 0 else 10, anchor="middle",
                         weight="bold" if j == 0 and box.get("strong") else None, halo=False)
        for j, note in enumerate(panel["note"]):
            svg.text(ox + 12, oy + panel_h - 12 - (len(panel["note"]) - 1 - j) * 14, note, size=10.5,
                     colour=MUTED, halo=False)
    return svg.render()


# --- The stories ------------------------------------------------------------------------------------------------


def pause_story(fenced):
    """Client 1's lease runs out while it is paused; client 2 takes the lock and writes; client 1 wakes up and
    writes. Without a fence the late write lands; with fences 33 and 34 the storage refuses it."""
    f1 = ", fence 33" if fenced else ""
    f2 = ", fence 34" if fenced else ""
    items = [
        {"type": "span", "lane": "c1", "row": -1, "t0": 0.3, "t1": 9.6, "kind": "lease",
         "label": "lease: trusted until valid_until = start + ttl − drift"},
        {"type": "span", "lane": "c1", "row": 1, "t0": 2.6, "t1": 13.1, "kind": "pause", "dash": True,
         "label": "paused: GC, SIGSTOP, swap, a slow disk"},
        {"type": "msg", "from": "c1", "t0": 0.3, "to": "lock", "t1": 0.9, "label": "acquire", "at": 0.3},
        {"type": "msg", "from": "lock", "t0": 1.1, "to": "c1", "t1": 1.7, "label": "granted" + f1, "at": 0.3,
         "kind": "lease"},
        {"type": "span", "lane": "lock", "t0": 0.9, "t1": 10.9, "kind": "key", "label": "key of client 1 (TTL)",
         "label_t": 1.5},
        {"type": "mark", "lane": "c1", "t": 9.6, "kind": "pause", "label": "lost signal fires: nobody runs to see it",
         "pos": "above", "anchor": "end"},
        {"type": "mark", "lane": "lock", "t": 10.9, "kind": "key", "label": "key expires", "pos": "below",
         "anchor": "end"},
        {"type": "msg", "from": "c2", "t0": 11.2, "to": "lock", "t1": 11.7, "label": "acquire", "at": 0.3},
        {"type": "msg", "from": "lock", "t0": 11.9, "to": "c2", "t1": 12.4, "label": "granted" + f2, "at": 0.3,
         "kind": "lease"},
        {"type": "span", "lane": "lock", "t0": 11.7, "t1": 18.0, "kind": "key", "label": "key of client 2",
         "label_t": 14.2},
        {"type": "span", "lane": "c2", "row": -1, "t0": 11.2, "t1": 18.0, "kind": "lease",
         "label": "lease of client 2", "label_t": 14.5},
        {"type": "msg", "from": "c2", "t0": 13.0, "to": "store", "t1": 13.6, "label": "write A" + f2, "side": "left",
         "at": 0.55, "kind": "good"},
        {"type": "mark", "lane": "store", "t": 13.6, "kind": "good", "pos": "below", "anchor": "end",
         "label": "A stored; highest fence 34" if fenced else "A stored"},
        {"type": "mark", "lane": "c1", "t": 13.1, "kind": "bad", "label": "wakes up, still believes it holds",
         "pos": "below", "anchor": "start"},
        {"type": "msg", "from": "c1", "t0": 13.5, "to": "store", "t1": 14.6, "label": "write B" + f1, "at": 0.5,
         "kind": "bad"},
    ]
    if fenced:
        items.append({"type": "mark", "lane": "store", "t": 14.6, "kind": "bad", "shape": "cross", "pos": "below",
                      "anchor": "start", "label": "refused: 33 < 34"})
    else:
        items.append({"type": "mark", "lane": "store", "t": 14.6, "kind": "bad", "pos": "below", "anchor": "start",
                      "label": "B lands over A: A is lost"})
    if fenced:
        name, title = "fenced_write", "The same pause, fenced: the storage refuses fence 33 after 34"
        label = ("Timeline of two clients, the lock server and the storage. Client 1 is granted the lock with "
                 "fence 33, then pauses past its lease; the key expires and client 2 is granted fence 34 and "
                 "writes A. Client 1 wakes up and writes B with fence 33; the storage has seen 34 and refuses it.")
    else:
        name, title = "pause", "A pause outlives the lease: the stale write lands"
        label = ("Timeline of two clients, the lock server and the storage. Client 1 is granted the lock, then "
                 "pauses past its lease; its lost signal fires while nobody runs, and the key expires. Client 2 "
                 "is granted the lock and writes A. Client 1 wakes up, still believing it holds the lock, and "
                 "writes B over A.")
    return {
        "name": name, "title": title, "label": label, "t_end": 18.0,
        "lanes": [("c1", "Client 1"), ("lock", "Lock (Redis)"), ("c2", "Client 2"), ("store", "Storage")],
        "items": items,
    }


WAKEUP = {
    "name": "wakeup",
    "title": "A release wakes one waiting process, not all of them",
    "label": ("Timeline of a holder in process A, Redis, and processes C, B and D, which wait in that order. A "
              "releases; Redis names C, the first process in line. C's only waiter has given up, so C passes the "
              "wake-up on, and Redis names B. B's longest-waiting waiter b1 tries and is granted the lock; b2 in B "
              "and d1 in D sleep on."),
    "t_end": 11.0,
    "lanes": [("a", "Process A"), ("redis", "Redis"), ("c", "Process C"), ("b", "Process B"), ("d", "Process D")],
    "items": [
        {"type": "span", "lane": "a", "row": -1, "t0": 0.0, "t1": 4.0, "kind": "lease", "label": "holds the lock"},
        {"type": "span", "lane": "redis", "row": -1, "t0": 2.4, "t1": 4.5, "kind": "key",
         "label": "waiting: C, B, D"},
        {"type": "span", "lane": "redis", "row": -1, "t0": 4.5, "t1": 6.3, "kind": "key", "label": "B, D"},
        {"type": "span", "lane": "redis", "row": -1, "t0": 6.3, "t1": 11.0, "kind": "key", "label": "D"},
        {"type": "span", "lane": "c", "row": 1, "t0": 0.6, "t1": 2.8, "kind": "quiet", "dash": True,
         "label": "c1 waits"},
        {"type": "mark", "lane": "c", "t": 2.8, "kind": "plain", "label": "c1 gives up (budget spent)",
         "pos": "above", "anchor": "middle"},
        {"type": "span", "lane": "b", "row": -1, "t0": 1.2, "t1": 7.3, "kind": "quiet", "dash": True,
         "label": "b1 waits (longest in B)"},
        {"type": "span", "lane": "b", "row": 1, "t0": 2.0, "t1": 11.0, "kind": "quiet", "dash": True,
         "label": "b2 waits: asleep, not woken"},
        {"type": "span", "lane": "d", "row": 1, "t0": 2.4, "t1": 11.0, "kind": "quiet", "dash": True,
         "label": "d1 waits: asleep, its process not named"},
        {"type": "msg", "from": "a", "t0": 4.0, "to": "redis", "t1": 4.5, "label": "release", "at": 0.35},
        {"type": "msg", "from": "redis", "t0": 4.6, "to": "c", "t1": 5.1, "label": "wake C", "at": 0.45,
         "kind": "key"},
        {"type": "mark", "lane": "c", "t": 5.1, "kind": "pause", "label": "no waiter left", "pos": "below",
         "anchor": "middle"},
        {"type": "msg", "from": "c", "t0": 5.6, "to": "redis", "t1": 6.2, "label": "pass on", "at": 0.55,
         "kind": "pause"},
        {"type": "msg", "from": "redis", "t0": 6.4, "to": "b", "t1": 7.3, "label": "wake B", "at": 0.3,
         "kind": "key"},
        {"type": "msg", "from": "b", "t0": 7.5, "to": "redis", "t1": 8.1, "label": "b1 tries", "at": 0.6,
         "side": "left"},
        {"type": "msg", "from": "redis", "t0": 8.3, "to": "b", "t1": 8.9, "label": "granted", "at": 0.2,
         "kind": "lease"},
        {"type": "span", "lane": "b", "row": -1, "t0": 8.9, "t1": 11.0, "kind": "lease", "label": "b1 holds"},
    ],
}


DEPLOYMENTS = {
    "name": "deployments",
    "title": "Where the lock lives, and what each deployment keeps",
    "label": ("Four deployments. A single Redis server that every application process uses. A primary with a "
              "replica, watched by three Sentinels, with asynchronous replication. Redlock: one client asks five "
              "independent Redis instances and holds the lock when three of them grant it. Redis Cluster: three "
              "shards; a lock's keys share the hash tag {orders}, so they live in one slot on one shard, beside "
              "the data guarded by the same tag."),
    "panel_height": 232,
    "panels": [
        {
            "title": "Single Redis",
            "boxes": [
                {"id": "a1", "x": 24, "y": 44, "w": 96, "h": 30, "label": ["app process"]},
                {"id": "a2", "x": 24, "y": 94, "w": 96, "h": 30, "label": ["app process"]},
                {"id": "a3", "x": 24, "y": 144, "w": 96, "h": 30, "label": ["app process"]},
                {"id": "r", "x": 220, "y": 84, "w": 112, "h": 50, "label": ["Redis", "lock:{orders}"], "kind": "key",
                 "strong": True},
            ],
            "links": [{"from": "a1", "to": "r"}, {"from": "a2", "to": "r"}, {"from": "a3", "to": "r"}],
            "note": ["Holds while the server keeps its data; a restart", "without persistence frees every lock."],
        },
        {
            "title": "Primary + replica, Sentinel",
            "boxes": [
                {"id": "a", "x": 16, "y": 98, "w": 70, "h": 30, "label": ["app"]},
                {"id": "p", "x": 126, "y": 88, "w": 86, "h": 50, "label": ["primary", "grants here"], "kind": "key",
                 "strong": True},
                {"id": "r", "x": 252, "y": 88, "w": 86, "h": 50, "label": ["replica", "promoted"],
                 "dash": True},
                {"id": "s1", "x": 126, "y": 34, "w": 62, "h": 24, "label": ["sentinel"], "kind": "quiet"},
                {"id": "s2", "x": 201, "y": 34, "w": 62, "h": 24, "label": ["sentinel"], "kind": "quiet"},
                {"id": "s3", "x": 276, "y": 34, "w": 62, "h": 24, "label": ["sentinel"], "kind": "quiet"},
            ],
            "links": [
                {"from": "a", "to": "p"},
                {"from": "p", "to": "r", "dash": True, "kind": "pause", "label": "async", "label_at": (0, 18),
                 "anchor": "middle"},
                {"from": "s1", "to": "p", "dash": True, "kind": "quiet", "arrow": False},
                {"from": "s2", "to": "p", "dash": True, "kind": "quiet", "arrow": False},
                {"from": "s3", "to": "r", "dash": True, "kind": "quiet", "arrow": False},
            ],
            "note": ["A failover can lose a fresh grant (and its fence", "increment); WAIT narrows that window only."],
        },
        {
            "title": "Redlock over 5 instances",
            "boxes": [
                {"id": "c", "x": 22, "y": 92, "w": 86, "h": 34, "label": ["client", "quorum 3 of 5"]},
                {"id": "r1", "x": 232, "y": 32, "w": 100, "h": 24, "label": ["Redis 1: granted"], "kind": "lease"},
                {"id": "r2", "x": 232, "y": 62, "w": 100, "h": 24, "label": ["Redis 2: granted"], "kind": "lease"},
                {"id": "r3", "x": 232, "y": 92, "w": 100, "h": 24, "label": ["Redis 3: granted"], "kind": "lease"},
                {"id": "r4", "x": 232, "y": 122, "w": 100, "h": 24, "label": ["Redis 4: slow"], "kind": "quiet"},
                {"id": "r5", "x": 232, "y": 152, "w": 100, "h": 24, "label": ["Redis 5: down"], "kind": "bad",
                 "dash": True},
            ],
            "links": [
                {"from": "c", "to": "r1", "kind": "lease"}, {"from": "c", "to": "r2", "kind": "lease"},
                {"from": "c", "to": "r3", "kind": "lease"}, {"from": "c", "to": "r4", "kind": "quiet"},
                {"from": "c", "to": "r5", "kind": "bad", "dash": True},
            ],
            "note": ["Holds while a majority is up and none restarts", "empty inside a holder's quorum."],
        },
        {
            "title": "Redis Cluster, hash tags",
            "boxes": [
                {"id": "s1", "x": 14, "y": 36, "w": 102, "h": 44, "label": ["shard 1", "slots 0–5460"],
                 "kind": "key", "strong": True},
                {"id": "s2", "x": 122, "y": 36, "w": 102, "h": 44, "label": ["shard 2", "slots 5461–10922"],
                 "kind": "quiet"},
                {"id": "s3", "x": 230, "y": 36, "w": 102, "h": 44, "label": ["shard 3", "slots 10923–16383"],
                 "kind": "quiet"},
                # CRC16("orders") mod 16384 = 105: every key tagged {orders} lives in slot 105, on shard 1.
                {"id": "k", "x": 14, "y": 104, "w": 196, "h": 74,
                 "label": ["slot 105: hash tag {orders}", "lock:{orders}", "lock:{orders}:fence",
                           "{orders}:count, {orders}:fence"], "kind": "key"},
            ],
            "links": [{"from": "s1", "to": "k", "arrow": False, "kind": "key"}],
            "note": ["A lock's keys, and the data fenced beside them,", "share one tag: one slot, one script."],
        },
    ],
}


def drawings():
    """Every drawing: file name → SVG text."""
    return {
        "pause.svg": timeline(pause_story(fenced=False)),
        "fenced_write.svg": timeline(pause_story(fenced=True)),
        "wakeup.svg": timeline(WAKEUP),
        "deployments.svg": panels(DEPLOYMENTS),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed drawing differs from what this script writes")
    args = parser.parse_args()
    wanted = drawings()
    if args.check:
        stale = []
        for name, svg in wanted.items():
            path = OUT / name
            if not path.is_file() or path.read_text(encoding="utf-8") != svg:
                stale.append(path.relative_to(ROOT))
        for path in stale:
            print(f"drawings: {path} is not what docs/drawings/drawings.py writes; run "
                  f"`python3 docs/drawings/drawings.py` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, svg in wanted.items():
        (OUT / name).write_text(svg, encoding="utf-8")
        print(f"wrote {(OUT / name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
