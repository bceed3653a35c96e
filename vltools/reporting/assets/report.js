// vltools report: draws the summary and one page of cards at a time from data/*.js files (loaded with
// <script> tags, so the folder works from file:// as well as from any static host). The view is named in the
// address: #s=SECTION&p=PAGE&k=SORT_KEY&d=asc|desc. When a page's images have loaded, #vlr-status carries
// data-cards, data-images, data-loaded and data-broken (used by the browser test, and readable by people).
// index.html already holds the header and each section's first cards as plain HTML (vltools/reporting/page.py),
// for readers without JavaScript; this script replaces them with its own views.
"use strict";
(function () {
  const state = { summary: null, chunks: {}, pending: {}, render: 0 };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function fmt(value) {
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return String(value);
    return String(parseFloat(value.toPrecision(4)));
  }

  function hashParams() { return new URLSearchParams(location.hash.slice(1)); }

  function link(params) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) if (value !== "" && value !== null) query.set(key, value);
    return "#" + query.toString();
  }

  function picture(ref, cls) {
    if (ref && ref.src) {
      return el("img", { src: ref.src, alt: ref.id || "", title: ref.id || "", class: cls, width: ref.w, height: ref.h });
    }
    return el("div", { class: "missing", title: (ref && ref.missing) || "" },
      (ref && ref.id ? ref.id + ": " : "") + ((ref && ref.missing) || "no image"));
  }

  function firstBadge(card, listed) {
    if (card.first === undefined) return null;
    if (card.first === null) {
      return el("span", { class: "badge " + (card.unknown ? "unknown" : "miss"), text: "not in the top " + listed });
    }
    const shown = card.results.length;
    const cls = card.first === 1 ? "top1" : card.first <= shown ? "topk" : "miss";
    return el("span", { class: "badge " + cls, text: "first correct: rank " + card.first });
  }

  function textRow(result, extra) {
    return el("li", { class: (result.ok ? "ok" : "") + (extra ? " later" : "") },
      el("span", { class: "rank", text: result.rank }),
      el("span", {}, result.text !== null && result.text !== undefined ? result.text : result.id,
        el("div", { class: "rid", text: result.id })),
      el("span", { class: "score", text: fmt(result.score) + (result.ok ? " \u2713" : "") }));
  }

  function thumb(result, cls) {
    const lines = [picture(result.image), el("div", {}, "#" + result.rank + " ", el("span", { class: "score", text: fmt(result.score) + (result.ok ? " \u2713" : "") }))];
    if (result.relevance !== undefined) lines.push(el("div", { class: "score", text: "relevance " + fmt(result.relevance) }));
    lines.push(el("div", { class: "rid", text: result.id }));
    if (result.heatmap) {
      lines.push(el("details", { class: "heatmap" }, el("summary", { text: "heatmap" }), picture(result.heatmap)));
    }
    return el("div", { class: "thumb " + (cls || "") }, ...lines);
  }

  const CARDS = {
    i2t(card) {
      const truth = card.truth && card.truth.length
        ? el("details", {}, el("summary", { text: "reference captions (" + card.truth.length + ")" }),
          el("ol", { class: "refs" }, ...card.truth.map((t) => el("li", { text: t })))) : null;
      const rows = card.results.map((r) => textRow(r, false));
      if (card.first_result) rows.push(textRow(card.first_result, true));
      return [el("div", { class: "query" }, picture(card.image), el("div", { class: "qid", text: card.query }),
        firstBadge(card, card.listed), truth), el("div", { class: "results" }, el("ol", { class: "texts" }, ...rows))];
    },
    t2i(card) {
      const truth = card.truth_image ? el("div", { class: "thumb truth" }, picture(card.truth_image.image),
        el("div", { class: "rid", text: "ground truth " + card.truth_image.id })) : null;
      return [el("div", { class: "query" }, el("div", { class: "text", text: card.text || card.query }),
        el("div", { class: "qid", text: card.query }), firstBadge(card, card.listed), truth),
        el("div", { class: "results thumbs" }, ...card.results.map((r) => thumb(r, r.ok ? "ok" : "")))];
    },
    i2i(card) {
      return [el("div", { class: "query" }, picture(card.image), el("div", { class: "qid", text: "query " + card.query })),
        el("div", { class: "results thumbs" }, ...card.results.map((r) => thumb(r, "")))];
    },
    captions(card) {
      return [el("div", { class: "query captioned" }, picture(card.image), el("div", { class: "qid", text: card.id })),
        describe(card)];
    },
    pairs(card) {
      const sides = card.images.map((ref, n) => el("div", { class: "thumb" }, picture(ref),
        el("div", { class: "rid", text: (n ? "B " : "A ") + ref.id })));
      return [el("div", { class: "pair" }, ...sides), el("div", {}, el("div", { class: "qid", text: card.id }), describe(card))];
    },
  };

  function describe(card) {
    const metrics = Object.entries(card.metrics || {}).map(([k, v]) => el("span", { text: k + " " + fmt(v) }));
    return el("div", { class: "results" }, el("div", { class: "rid", text: "generated" }),
      el("div", { class: "caption", text: card.caption }),
      metrics.length ? el("div", { class: "metrics" }, ...metrics) : null,
      card.refs.length ? el("div", { class: "rid", text: "references" }) : null,
      el("ol", { class: "refs" }, ...card.refs.map((t) => el("li", { text: t }))));
  }

  function loadChunk(section, number) {
    const key = section + "/" + number;
    if (state.chunks[key]) return Promise.resolve(state.chunks[key]);
    if (!state.pending[key]) {
      let resolve, reject;
      const promise = new Promise((yes, no) => { resolve = yes; reject = no; });
      state.pending[key] = { promise, resolve };
      const script = el("script", { src: "data/" + encodeURIComponent(section) + "/" + number + ".js" });
      script.onerror = () => reject(new Error("cannot load " + script.src));
      document.head.append(script);
    }
    return state.pending[key].promise;
  }

  function scoreTable(entry) {
    // nested objects (e.g. i2t / t2i recalls) as one matrix, plain values as rows below it
    const nested = Object.entries(entry.values).filter(([, v]) => v !== null && typeof v === "object" && !Array.isArray(v));
    const plain = Object.entries(entry.values).filter(([, v]) => v === null || typeof v !== "object" || Array.isArray(v));
    const columns = [...new Set(nested.flatMap(([, v]) => Object.keys(v)))];
    const cell = (v) => el("td", { class: "num", text: v === null || v === undefined ? "-" : Array.isArray(v) ? v.map(fmt).join(", ") : fmt(v) });
    const tables = [];
    if (nested.length) {
      tables.push(el("table", {}, el("tr", {}, el("th", {}), ...columns.map((c) => el("th", { text: c }))),
        ...nested.map(([k, v]) => el("tr", {}, el("th", { text: k }), ...columns.map((c) => cell(v[c]))))));
    }
    if (plain.length) tables.push(el("table", {}, ...plain.map(([k, v]) => el("tr", {}, el("th", { text: k }), cell(v)))));
    return el("div", {}, el("div", { class: "rid", text: entry.name }), ...tables);
  }

  function inputsTable(inputs) {
    const rows = inputs.map((input) => {
      const prov = input.provenance || input.attributes || null;
      const made = prov ? [prov.command, prov.created, prov.vltools_version].filter(Boolean).join("  \u00b7  ")
        : "modified " + input.modified + " (no provenance recorded in this file)";
      const rest = Object.fromEntries(Object.entries(input).filter(([k]) => !["path", "kind"].includes(k)));
      return el("tr", {}, el("td", { text: input.path }), el("td", { text: input.kind }),
        el("td", { text: input.count === undefined || input.count === null ? "" : input.count }),
        el("td", {}, el("div", { text: made }), el("details", {}, el("summary", { text: "all" }),
          el("pre", { text: JSON.stringify(rest, null, 1) }))));
    });
    return el("table", {}, el("tr", {}, el("th", { text: "input" }), el("th", { text: "kind" }), el("th", { text: "count" }),
      el("th", { text: "provenance" })), ...rows);
  }

  function renderHeader() {
    const data = state.summary;
    document.title = data.title;
    const prov = data.provenance || {};
    document.getElementById("header").replaceChildren(el("h1", { text: data.title }),
      el("p", { class: "made", text: "made by vltools " + (prov.vltools_version || "") + " on " + (prov.created || "")
        + ": " + (prov.command || "") }));
    const parts = [];
    if (data.scores.length) parts.push(el("h2", { text: "Scores" }), el("div", { class: "scores" }, ...data.scores.map(scoreTable)));
    if (data.figures.length) {
      parts.push(el("h2", { text: "Figures" }), el("div", { class: "figures" }, ...data.figures.map((f) =>
        el("figure", {}, el("a", { href: f.src }, el("img", { src: f.src, alt: f.title })), el("figcaption", { text: f.title })))));
    }
    if (data.inputs.length) {
      parts.push(el("details", {}, el("summary", { text: "Inputs and their provenance (" + data.inputs.length + " files)" }),
        inputsTable(data.inputs)));
    }
    document.getElementById("summary").replaceChildren(...parts);
  }

  function pager(section, page, pages, key, order) {
    const to = (p) => link({ s: section.id, p: p, k: key, d: order });
    const prev = page > 1 ? el("a", { href: to(page - 1), text: "\u2190 previous" }) : el("span", { class: "off", text: "\u2190 previous" });
    const next = page < pages ? el("a", { href: to(page + 1), text: "next \u2192" }) : el("span", { class: "off", text: "next \u2192" });
    return [prev, el("span", { text: "page " + page + " of " + pages }), next];
  }

  function sorter(section, key, order) {
    const select = el("select", { "aria-label": "sort" }, el("option", { value: "", text: "input order" }),
      ...Object.keys(section.keys).map((k) => el("option", { value: k, text: k })));
    select.value = key;
    const direction = el("select", { "aria-label": "order" }, el("option", { value: "asc", text: "ascending" }),
      el("option", { value: "desc", text: "descending" }));
    direction.value = order;
    const go = () => { location.hash = link({ s: section.id, p: 1, k: select.value, d: direction.value }); };
    select.onchange = go;
    direction.onchange = go;
    return Object.keys(section.keys).length ? [el("label", {}, "sort by ", select), direction] : [];
  }

  function sortedOrder(section, key, order) {
    const positions = Array.from({ length: section.count }, (_, i) => i);
    if (!key) return positions;
    const values = section.keys[key];
    const sign = order === "desc" ? -1 : 1;
    return positions.sort((a, b) => {
      const x = values[a], y = values[b];
      if (x === null && y === null) return a - b;
      if (x === null) return 1;
      if (y === null) return -1;
      return sign * (x - y) || a - b;
    });
  }

  async function renderView() {
    const token = ++state.render;
    const status = document.getElementById("vlr-status");
    status.dataset.state = "loading";
    const params = hashParams();
    const sections = state.summary.sections;
    const view = document.getElementById("view");
    const nav = document.getElementById("sections");
    if (!sections.length) {
      view.replaceChildren(el("p", { class: "note", text: "No rankings or captions were given to this report." }));
      watchImages(0);
      return;
    }
    const section = sections.find((s) => s.id === params.get("s")) || sections[0];
    nav.replaceChildren(...sections.map((s) => el("a", { href: link({ s: s.id }), class: s === section ? "active" : "",
      text: s.title + " (" + s.count + ")" })));
    const key = Object.prototype.hasOwnProperty.call(section.keys, params.get("k")) ? params.get("k") : "";
    const order = params.get("d") === "desc" ? "desc" : "asc";
    const size = section.page_size;
    const pages = Math.max(1, section.pages);
    const page = Math.min(Math.max(parseInt(params.get("p"), 10) || 1, 1), pages);
    const shown = sortedOrder(section, key, order).slice((page - 1) * size, page * size);
    const wanted = [...new Set(shown.map((i) => Math.floor(i / size)))];
    try {
      await Promise.all(wanted.map((n) => loadChunk(section.id, n)));
    } catch (error) {
      view.replaceChildren(el("p", { class: "note", text: String(error) }));
      return;
    }
    if (token !== state.render) return;
    const cards = shown.map((i) => state.chunks[section.id + "/" + Math.floor(i / size)][i % size]);
    const about = section.count < section.total
      ? section.count + " sampled of " + section.total : String(section.count);
    const head = [el("h2", { text: section.title }),
      el("div", { class: "rid", text: section.source + " \u00b7 " + about + " " + (section.kind === "captions" || section.kind === "pairs" ? "items" : "queries") }),
      section.note ? el("p", { class: "note", text: section.note }) : null,
      el("div", { class: "controls" }, ...pager(section, page, pages, key, order), ...sorter(section, key, order))];
    const grid = el("div", { class: "cards" }, ...cards.map((card) => el("div", { class: "card " + section.kind },
      ...CARDS[section.kind](card))));
    view.replaceChildren(...head.filter((node) => node !== null), grid, el("div", { class: "controls" }, ...pager(section, page, pages, key, order)));
    watchImages(cards.length);
  }

  function watchImages(cards) {
    const status = document.getElementById("vlr-status");
    const images = [...document.querySelectorAll("img")];
    let loaded = 0, broken = 0, left = images.length;
    const token = state.render;
    const done = () => {
      if (token !== state.render) return;
      Object.assign(status.dataset, { state: "done", cards: cards, images: images.length, loaded: loaded, broken: broken });
      status.textContent = cards + " cards on this page; " + loaded + " of " + images.length + " images loaded"
        + (broken ? ", " + broken + " broken" : "");
    };
    if (!left) { done(); return; }
    for (const image of images) {
      const settle = () => { if (image.naturalWidth > 0) loaded++; else broken++; if (--left === 0) done(); };
      if (image.complete) settle();
      else {
        image.addEventListener("load", settle, { once: true });
        image.addEventListener("error", settle, { once: true });
      }
    }
  }

  window.VLR = {
    summary(data) {
      state.summary = data;
      renderHeader();
      window.addEventListener("hashchange", renderView);
      renderView();
    },
    chunk(section, number, cards) {
      const key = section + "/" + number;
      state.chunks[key] = cards;
      if (state.pending[key]) state.pending[key].resolve(cards);
    },
  };
})();
