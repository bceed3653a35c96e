"""The report's `index.html` as plain HTML: the title, provenance, scores, figures, inputs and, for each section, its
title, note and first page of cards, drawn from the same summary and cards as `report.js`. A reader without
JavaScript (a text browser, grep, a CI artifact viewer, a mail attachment) sees them; with JavaScript, `report.js`
replaces the header, the section links and the view with its own pages, sorting and the other cards.

Every text and attribute from the inputs (ids, captions, titles, file names) is HTML-escaped through `el`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from importlib import resources
from string import Template


class Html(str):
    """Markup made by `el`: inserted as it is, where any other text is escaped."""


def el(tag: str, attrs: dict[str, object] | None = None, *children: object) -> Html:
    """One element: attributes whose value is None are left out; children that are not `Html` are escaped text."""
    opening = tag + "".join(f' {key}="{escape(str(value))}"' for key, value in (attrs or {}).items()
                            if value is not None)
    inner = "".join(child if isinstance(child, Html) else escape(str(child)) for child in children
                    if child is not None)
    return Html(f"<{opening}>" if tag == "img" else f"<{opening}>{inner}</{tag}>")


def div(cls: str, *children: object) -> Html:
    """A `<div>` of a class (most of a card)."""
    return el("div", {"class": cls}, *children)


def fmt(value: object) -> str:
    """A value as report.js shows it: integers whole, other numbers to 4 significant digits, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    rounded = value if value.is_integer() else float(f"{value:.4g}")
    return str(int(rounded)) if rounded.is_integer() and abs(rounded) < 1e21 else f"{rounded:g}"


def picture(ref: dict | None) -> Html:
    """An image reference's thumbnail, or the reason it has none."""
    ref = ref or {}
    if ref.get("src"):
        return el("img", {"src": ref["src"], "alt": ref.get("id", ""), "title": ref.get("id", ""),
                          "width": ref.get("w"), "height": ref.get("h")})
    prefix = f"{ref['id']}: " if ref.get("id") else ""
    return el("div", {"class": "missing", "title": ref.get("missing", "")}, prefix + ref.get("missing", "no image"))


def first_badge(card: dict) -> Html | None:
    """Where the first correct answer is: rank 1, in the shown results, further down or not listed."""
    if "first" not in card:
        return None
    if card["first"] is None:
        return el("span", {"class": "badge " + ("unknown" if card.get("unknown") else "miss")},
                  f"not in the top {card['listed']}")
    rank = card["first"]
    cls = "top1" if rank == 1 else "topk" if rank <= len(card["results"]) else "miss"
    return el("span", {"class": f"badge {cls}"}, f"first correct: rank {rank}")


def text_row(result: dict, later: bool) -> Html:
    """A caption result of an image query; the correct ones carry a check mark."""
    text = result["text"] if result.get("text") is not None else result["id"]
    return el("li", {"class": ("ok" if result.get("ok") else "") + (" later" if later else "")},
              el("span", {"class": "rank"}, result["rank"]), el("span", {}, text, div("rid", result["id"])),
              el("span", {"class": "score"}, fmt(result["score"]) + (" \u2713" if result.get("ok") else "")))


def thumb(result: dict) -> Html:
    """An image result: thumbnail, rank and score (check mark when correct), relevance, id, heatmap."""
    lines = [picture(result.get("image")),
             el("div", {}, f"#{result['rank']} ", el("span", {"class": "score"}, fmt(result["score"])
                                                     + (" \u2713" if result.get("ok") else "")))]
    if "relevance" in result:
        lines.append(div("score", f"relevance {fmt(result['relevance'])}"))
    lines.append(div("rid", result["id"]))
    if result.get("heatmap"):
        lines.append(el("details", {"class": "heatmap"}, el("summary", {}, "heatmap"), picture(result["heatmap"])))
    return div("thumb ok" if result.get("ok") else "thumb", *lines)


def describe(card: dict) -> Html:
    """A generated caption with its per-item metrics and references."""
    metrics = [el("span", {}, f"{key} {fmt(value)}") for key, value in card.get("metrics", {}).items()]
    return div("results", div("rid", "generated"),
              div("caption", card["caption"]),
              div("metrics", *metrics) if metrics else None,
              div("rid", "references") if card["refs"] else None,
              el("ol", {"class": "refs"}, *(el("li", {}, ref) for ref in card["refs"])))


def i2t_card(card: dict) -> list[Html]:
    """An image query: its thumbnail, first-correct badge and references; its caption results."""
    truth = card.get("truth") or []
    refs = el("details", {}, el("summary", {}, f"reference captions ({len(truth)})"),
              el("ol", {"class": "refs"}, *(el("li", {}, text) for text in truth))) if truth else None
    rows = [text_row(result, False) for result in card["results"]]
    if card.get("first_result"):
        rows.append(text_row(card["first_result"], True))
    return [div("query", picture(card["image"]), div("qid", card["query"]),
               first_badge(card), refs), div("results", el("ol", {"class": "texts"}, *rows))]


def t2i_card(card: dict) -> list[Html]:
    """A caption query with its ground-truth image; its image results."""
    truth = card.get("truth_image")
    shown = div("thumb truth", picture(truth["image"]),
               div("rid", f"ground truth {truth['id']}")) if truth else None
    return [div("query", div("text", card.get("text") or card["query"]),
               div("qid", card["query"]), first_badge(card), shown),
            div("results thumbs", *(thumb(result) for result in card["results"]))]


def i2i_card(card: dict) -> list[Html]:
    """An image query and its image results."""
    return [div("query", picture(card["image"]), div("qid", f"query {card['query']}")),
            div("results thumbs", *(thumb(result) for result in card["results"]))]


def captions_card(card: dict) -> list[Html]:
    """An image and its generated caption."""
    return [div("query captioned", picture(card["image"]), div("qid", card["id"])),
            describe(card)]


def pairs_card(card: dict) -> list[Html]:
    """A pair's two images and their generated description."""
    sides = [div("thumb", picture(ref), div("rid", f"{'B' if n else 'A'} {ref['id']}"))
             for n, ref in enumerate(card["images"])]
    return [div("pair", *sides), el("div", {}, div("qid", card["id"]), describe(card))]


CARDS: dict[str, Callable[[dict], list[Html]]] = {"i2t": i2t_card, "t2i": t2i_card, "i2i": i2i_card,
                                                  "captions": captions_card, "pairs": pairs_card}


def score_table(name: str, values: dict) -> Html:
    """One scores file: nested objects (e.g. i2t / t2i recalls) as one matrix, plain values as rows below it."""
    nested = {k: v for k, v in values.items() if isinstance(v, dict)}
    plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
    columns = list(dict.fromkeys(column for row in nested.values() for column in row))

    def cell(value: object) -> Html:
        text = "-" if value is None else ", ".join(map(fmt, value)) if isinstance(value, list) else fmt(value)
        return el("td", {"class": "num"}, text)

    tables = []
    if nested:
        tables.append(el("table", {}, el("tr", {}, el("th"), *(el("th", {}, c) for c in columns)),
                         *(el("tr", {}, el("th", {}, k), *(cell(row.get(c)) for c in columns))
                           for k, row in nested.items())))
    if plain:
        tables.append(el("table", {}, *(el("tr", {}, el("th", {}, k), cell(v)) for k, v in plain.items())))
    return el("div", {}, div("rid", name), *tables)


def inputs_table(inputs: list[dict]) -> Html:
    """Each input file: path, kind, count and how it was made."""
    rows = []
    for item in inputs:
        made_by = item.get("provenance") or item.get("attributes")
        made = "  \u00b7  ".join(str(made_by[k]) for k in ("command", "created", "vltools_version") if made_by.get(k)) \
            if made_by else f"modified {item.get('modified')} (no provenance recorded in this file)"
        rest = {k: v for k, v in item.items() if k not in ("path", "kind")}
        rows.append(el("tr", {}, el("td", {}, item["path"]), el("td", {}, item["kind"]),
                       el("td", {}, "" if item.get("count") is None else item["count"]),
                       el("td", {}, el("div", {}, made), el("details", {}, el("summary", {}, "all"),
                                                            el("pre", {}, json.dumps(rest, indent=1))))))
    return el("table", {}, el("tr", {}, *(el("th", {}, name) for name in ("input", "kind", "count", "provenance"))),
              *rows)


def header(summary: dict) -> Html:
    """The title and how the report was made."""
    made = summary.get("provenance") or {}
    return Html(el("h1", {}, summary["title"]) + el("p", {"class": "made"}, f"made by vltools "
                f"{made.get('vltools_version', '')} on {made.get('created', '')}: {made.get('command', '')}"))


def overview(summary: dict) -> Html:
    """Scores, figures and inputs, above the sections."""
    parts = []
    if summary["scores"]:
        parts += [el("h2", {}, "Scores"), div("scores",
                                             *(score_table(s["name"], s["values"]) for s in summary["scores"]))]
    if summary["figures"]:
        parts += [el("h2", {}, "Figures"), div("figures", *(
            el("figure", {}, el("a", {"href": f["src"]}, el("img", {"src": f["src"], "alt": f["title"]})),
               el("figcaption", {}, f["title"])) for f in summary["figures"]))]
    if summary["inputs"]:
        parts.append(el("details", {}, el("summary", {}, f"Inputs and their provenance ({len(summary['inputs'])} "
                                                         "files)"), inputs_table(summary["inputs"])))
    return Html("".join(parts))


def section_view(section: dict, cards: list[dict]) -> Html:
    """A section's head and its first cards, under the id its link names (`#s=ID`, report.js's address too)."""
    items = "items" if section["kind"] in ("captions", "pairs") else "queries"
    about = f"{section['count']} sampled of {section['total']}" if section["count"] < section["total"] \
        else str(section["count"])
    rest = el("p", {"class": "note"}, f"The first {len(cards)} of {section['count']} {items}; JavaScript shows the "
                                      "others, with pages and sorting.") if len(cards) < section["count"] else None
    return el("section", {"id": f"s={section['id']}"}, el("h2", {}, section["title"]),
              div("rid", f"{section['source']} \u00b7 {about} {items}"),
              el("p", {"class": "note"}, section["note"]) if section["note"] else None,
              div("cards", Html("\n".join(div(f"card {section['kind']}", *CARDS[section["kind"]](card))
                                          for card in cards))), rest)


def index_html(summary: dict, first_cards: dict[str, list[dict]]) -> str:
    """The page: the summary written into `assets/index.html`, each section with its cards in `first_cards` (by
    section id, their images resolved to the report's files)."""
    sections = summary["sections"]
    nav = [el("a", {"href": f"#s={s['id']}"}, f"{s['title']} ({s['count']})") for s in sections]
    view = [section_view(s, first_cards.get(s["id"], [])) for s in sections] or \
        [el("p", {"class": "note"}, "No rankings or captions were given to this report.")]
    template = (resources.files("vltools.reporting") / "assets" / "index.html").read_text(encoding="utf-8")
    return Template(template).substitute(title=escape(summary["title"]), header=header(summary),
                                         overview=overview(summary), nav="\n".join(nav), view="\n".join(view))
