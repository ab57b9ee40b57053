/* smrweb page behaviour: plotly charts fed by server-rendered JSON, copy buttons, confirmations,
   the compare selection, and polling that catches up when a hidden tab becomes visible again.
   No inline scripts anywhere: templates declare behaviour with data- attributes and this file acts. */
(function () {
  "use strict";

  // No plotly logo, no "share to Plotly Cloud" / Chart Studio / edit links: nothing in the toolbar
  // leaves this server (a private dashboard's data must not be one click from an upload).
  var PLOT_CONFIG = { displaylogo: false, responsive: true, showLink: false, showSendToCloud: false,
                      showEditInChartStudio: false, showTips: false, displayNotifier: false,
                      modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines",
                                               "sendChartToCloud", "sendDataToCloud", "editInChartStudio"] };

  // --- dark mode for charts -------------------------------------------------------------------------
  // The figures are built light (server side); under prefers-color-scheme: dark their ink, grid and
  // backgrounds are swapped here for the page's dark palette before plotly draws them.
  var DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  var DARK_INK = "#d6dde6", DARK_GRID = "#2b3440", DARK_PANEL = "#161b22";
  var DARK_LINES = { "#3b4656": "#d6dde6", "#15803d": "#4ade80", "#b91c1c": "#f87171", "#c2410c": "#fb923c" };

  function isDark() { return !!(DARK && DARK.matches); }

  function themed(figure) {
    if (!isDark()) return figure;
    var layout = Object.assign({}, figure.layout);
    layout.font = Object.assign({}, layout.font, { color: DARK_INK });
    layout.plot_bgcolor = DARK_PANEL;
    layout.paper_bgcolor = "rgba(0,0,0,0)";
    layout.hoverlabel = Object.assign({}, layout.hoverlabel, { bgcolor: "#0d1117", font: { color: DARK_INK, size: 11 } });
    Object.keys(layout).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        layout[key] = Object.assign({}, layout[key], { gridcolor: DARK_GRID, linecolor: DARK_GRID, zerolinecolor: DARK_GRID,
                                                       tickcolor: DARK_GRID, color: DARK_INK });
      }
    });
    var data = (figure.data || []).map(function (trace) {
      var line = trace.line && DARK_LINES[trace.line.color];
      if (line) trace = Object.assign({}, trace, { line: Object.assign({}, trace.line, { color: line }) });
      // Hollow "not counted" points: their marker and its outline in the dark palette too.
      var marker = trace.marker && typeof trace.marker.color === "string" && DARK_LINES[trace.marker.color];
      if (marker) {
        var outline = trace.marker.line ? Object.assign({}, trace.marker.line, { color: marker }) : undefined;
        trace = Object.assign({}, trace, { marker: Object.assign({}, trace.marker, { color: marker, line: outline }) });
      }
      return trace;
    });
    return { data: data, layout: layout, config: figure.config };
  }

  // On a phone a legend at the top takes rows off the plot, and the toolbar sits on both: the legend goes
  // below the plot, in rows (the figure grows by their height, so the plot keeps its own), and the toolbar
  // to the right edge, vertical, in a margin of its own.
  function legendEntries(figure) {
    var layout = figure.layout || {};
    if (layout.showlegend === false) return 0;
    var template = ((layout.template || {}).data || {}).scatter || [];  // cycled over the traces, as plotly does
    var groups = {};
    (figure.data || []).forEach(function (trace, i) {
      var styled = template.length ? template[i % template.length] : {};
      var shown = trace.showlegend !== undefined ? trace.showlegend : styled.showlegend !== false;
      if (shown) groups[trace.legendgroup || "#" + i] = true;
    });
    return Object.keys(groups).length;
  }
  function narrowed(el, figure) {
    if (el.clientWidth >= 640) return figure;
    var layout = Object.assign({}, figure.layout, { modebar: { orientation: "v" } });
    layout.margin = Object.assign({}, layout.margin, { r: 36 });
    var entries = legendEntries(figure);
    if (entries) {
      var height = entries * 28 + 8;  // plotly puts one entry a row at phone widths
      var plotHeight = (layout.height || 320) - (layout.margin.t || 0) - (layout.margin.b || 0);
      layout.legend = Object.assign({}, layout.legend, {
        orientation: "h", x: 0, xanchor: "left", yanchor: "top",
        y: -Math.min(0.9, 70 / Math.max(plotHeight, 100)),  // under the x axis' labels and title
      });
      layout.height = (layout.height || 320) + height;
      layout.margin.t = Math.min(layout.margin.t || 0, 28);  // the room the legend had at the top
    }
    return { data: figure.data, layout: layout, config: figure.config };
  }

  // --- charts -------------------------------------------------------------------------------------
  // <div data-plot="ID" data-click-target="#panel"></div> + {{ figure|json_script:"ID" }}.
  // The figure is {data, layout}; re-rendered with Plotly.react only when its JSON text changed, so
  // a polled partial that brings the same data costs nothing and a changed one updates in place
  // (zoom kept via layout.uirevision). A live card may bring a patch instead of the figure (the script
  // has data-figure-patch, dashboard/live.py): applied to the figure the chart shows, then the script
  // holds the whole figure again. A patch that does not fit the figure here (it was made for another one)
  // blanks the card's version, so the next poll brings the card whole.
  // data-plot-draws / data-plot-patches count whole figures and patches drawn (the browser tests read them).
  function draw(el, base) {
    var figure = narrowed(el, themed(base));
    el.classList.toggle("plot-empty", !figure.data || figure.data.length === 0);
    window.Plotly.react(el, figure.data, figure.layout, Object.assign({}, PLOT_CONFIG, figure.config || {}));
    if (!el._smrwebClickBound && (el.dataset.clickTarget || el.hasAttribute("data-click-navigate"))) {
      el._smrwebClickBound = true;
      el.on("plotly_click", function (event) { onPlotClick(el, event); });
    }
  }

  function count(el, name) {
    el.setAttribute(name, String((parseInt(el.getAttribute(name), 10) || 0) + 1));
  }

  function points(trace) {
    return (Array.isArray(trace.x) ? trace.x : trace.y || []).length;
  }

  // patch: {base: [points per trace], traces: [[trace, key, keep, values], ...], layout: {key: value|null}}
  function applyPatch(base, patch) {
    if (!base || !patch || !Array.isArray(patch.base) || !Array.isArray(patch.traces)) return false;
    var data = base.data || [];
    if (patch.base.length !== data.length) return false;
    for (var i = 0; i < data.length; i++) if (points(data[i]) !== patch.base[i]) return false;
    var fits = patch.traces.every(function (p) {
      var trace = data[p[0]];
      return trace && Array.isArray(p[3]) && p[2] <= (Array.isArray(trace[p[1]]) ? trace[p[1]].length : 0);
    });
    if (!fits) return false;
    patch.traces.forEach(function (p) { data[p[0]][p[1]] = data[p[0]][p[1]].slice(0, p[2]).concat(p[3]); });
    var layout = patch.layout || {};
    base.layout = base.layout || {};
    Object.keys(layout).forEach(function (key) {
      if (layout[key] === null) delete base.layout[key]; else base.layout[key] = layout[key];
    });
    return true;
  }

  function staleCard(node) {
    for (var el = node.parentElement; el; el = el.parentElement) {
      var marker = el.querySelector(":scope > [data-card][data-version]");
      if (marker) { marker.setAttribute("data-version", ""); return; }
    }
  }

  function renderPlots(root) {
    if (typeof window.Plotly === "undefined") return;
    (root || document).querySelectorAll("[data-plot]").forEach(function (el) {
      if (window.smrwebDefer && window.smrwebDefer(el)) return;  // below the fold: static/js/lazy-plots.js
      var source = document.getElementById(el.dataset.plot);
      if (!source) return;
      if (source.hasAttribute("data-figure-patch")) {
        var patch = null;
        try { patch = JSON.parse(source.textContent); } catch (e) { patch = null; }
        source.removeAttribute("data-figure-patch");
        if (el._smrwebFigure && applyPatch(el._smrwebBase, patch)) {
          source.textContent = JSON.stringify(el._smrwebBase);
          el._smrwebFigure = source.textContent;
          count(el, "data-plot-patches");
          draw(el, el._smrwebBase);
        } else {
          source.textContent = "";
          staleCard(source);
        }
        return;
      }
      var text = source.textContent;
      if (!text || el._smrwebFigure === text) return;
      el._smrwebFigure = text;
      el._smrwebBase = JSON.parse(text);
      count(el, "data-plot-draws");
      draw(el, JSON.parse(text));
    });
  }

  // A bar carries [bin, kind, ...] as customdata and the element a data-click-url to ask for that
  // bin's turns; a run's trace carries meta.url and data-click-navigate opens it.
  function onPlotClick(el, event) {
    var point = event.points && event.points[0];
    if (!point) return;
    if (el.hasAttribute("data-click-navigate")) {
      var meta = point.data && point.data.meta;
      if (meta && typeof meta.url === "string" && meta.url.charAt(0) === "/") window.location.assign(meta.url);
      return;
    }
    var cd = point.customdata;
    // A live chart keeps its element across polls; the bars' current origin and width are on another one.
    var from = el.dataset.clickFrom && document.getElementById(el.dataset.clickFrom);
    var clickUrl = (from && from.dataset.clickUrl) || el.dataset.clickUrl;
    if (!clickUrl || !Array.isArray(cd)) return;
    var url = clickUrl + "&bin=" + encodeURIComponent(cd[0]) + "&kind=" + encodeURIComponent(cd[1] || "");
    window.htmx.ajax("GET", url, { target: el.dataset.clickTarget, swap: "innerHTML" });
    var target = document.querySelector(el.dataset.clickTarget);
    if (target && target.scrollIntoView) target.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  // --- copy to clipboard ------------------------------------------------------------------------------
  // <button data-copy="text" data-copy-label="link">: copies, then says so for two seconds.
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text; area.setAttribute("readonly", ""); area.style.position = "fixed"; area.style.opacity = "0";
      document.body.appendChild(area); area.select();
      var ok = document.execCommand("copy");
      document.body.removeChild(area);
      ok ? resolve() : reject(new Error("copy refused"));
    });
  }

  function onCopy(button) {
    var text = button.dataset.copy;
    if (text.charAt(0) === "/") text = window.location.origin + text;  // links are copied absolute
    var label = button.dataset.copyLabel || "text";
    var original = button.dataset.copyOriginal || button.textContent;
    button.dataset.copyOriginal = original;
    copyText(text).then(function () {
      button.textContent = "Copied";
      button.classList.add("copied");
      announce("Copied the " + label + " to the clipboard.");
    }, function () {
      button.textContent = "Copy failed";
      announce("Could not copy the " + label + "; select it by hand: " + text);
    }).then(function () {
      setTimeout(function () { button.textContent = original; button.classList.remove("copied"); }, 2000);
    });
  }

  function announce(message) {
    var live = document.getElementById("announcer");
    if (live) { live.textContent = ""; setTimeout(function () { live.textContent = message; }, 30); }
  }

  // --- compare selection --------------------------------------------------------------------------------
  // Checkboxes <input data-pick="RUN_ID"> inside [data-pick-scope="PROJECT"]; the choice survives
  // polling swaps and paging (sessionStorage) and feeds the [data-compare-link] button.
  var PICK_LIMIT = 200;  // tracking.queries.compare.MAX_RUNS

  function pickKey(scope) { return "smrweb.pick." + scope; }

  function loadPicks(scope) {
    try { return JSON.parse(sessionStorage.getItem(pickKey(scope)) || "[]"); } catch (e) { return []; }
  }

  function savePicks(scope, picks) { sessionStorage.setItem(pickKey(scope), JSON.stringify(picks)); }

  function syncPicks(root) {
    (root || document).querySelectorAll("[data-pick-scope]").forEach(function (scopeEl) {
      var scope = scopeEl.dataset.pickScope;
      var picks = loadPicks(scope);
      var full = picks.length >= PICK_LIMIT;
      document.querySelectorAll('[data-pick-scope="' + scope + '"] input[data-pick]').forEach(function (box) {
        box.checked = picks.indexOf(box.dataset.pick) !== -1;
        box.disabled = full && !box.checked;
      });
      document.querySelectorAll('[data-compare-link="' + scope + '"]').forEach(function (link) {
        var base = link.dataset.href;
        var query = picks.map(function (id) { return "runs=" + encodeURIComponent(id); }).join("&");
        link.setAttribute("href", base + (query ? "?" + query : ""));
        link.classList.toggle("disabled", picks.length < 2);
        link.setAttribute("aria-disabled", picks.length < 2 ? "true" : "false");
        var count = link.querySelector("[data-pick-count]");
        if (count) count.textContent = picks.length;
      });
      document.querySelectorAll('[data-pick-clear="' + scope + '"]').forEach(function (btn) {
        btn.hidden = picks.length === 0;
      });
    });
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches("input[data-pick]")) return;
    var scope = box.closest("[data-pick-scope]").dataset.pickScope;
    var picks = loadPicks(scope).filter(function (id) { return id !== box.dataset.pick; });
    if (box.checked) picks.push(box.dataset.pick);
    savePicks(scope, picks.slice(0, PICK_LIMIT));
    syncPicks();
  });

  document.addEventListener("click", function (event) {
    var copy = event.target.closest && event.target.closest("[data-copy]");
    if (copy) { event.preventDefault(); onCopy(copy); return; }
    var clear = event.target.closest && event.target.closest("[data-pick-clear]");
    if (clear) { savePicks(clear.dataset.pickClear, []); syncPicks(); return; }
    var link = event.target.closest && event.target.closest("[data-compare-link]");
    if (link && link.getAttribute("aria-disabled") === "true") {
      event.preventDefault();
      announce("Pick at least two runs to compare.");
    }
    // The runs table ⇄ the tree of attempts: the filters chosen since the page loaded (htmx pushed them
    // to the address bar) go along.
    var follow = event.target.closest && event.target.closest("a[data-follow-query]");
    if (follow && window.location.search) follow.href = follow.href.split("?")[0] + window.location.search;
    // The tree of attempts: open or close every subtree.
    var toggle = event.target.closest && event.target.closest("[data-tree-toggle]");
    if (toggle) {
      var open = toggle.dataset.treeToggle === "open";
      var scope = toggle.closest("[data-tree]") || document;
      scope.querySelectorAll("details").forEach(function (d) { d.open = open; });
    }
  });

  // --- confirmations ----------------------------------------------------------------------------------
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  }, true);

  // A saved view keeps the table as it is now: filters, sorting and columns change the URL in place (htmx
  // pushes it), so the form reads the address bar when it is sent, not the query it was rendered with. A
  // share link ([data-share-form]) captures the page as it is now the same way.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.hasAttribute || !(form.hasAttribute("data-save-view") || form.hasAttribute("data-share-form"))) return;
    var query = form.querySelector("[data-view-query]");
    if (query) query.value = window.location.search.replace(/^\?/, "");
  }, true);

  // --- live polling -----------------------------------------------------------------------------------
  // Polled elements ([data-live]) skip their interval while the tab is hidden: the request is cancelled
  // here rather than by an hx-trigger filter, which htmx would have to eval (the CSP forbids it). When
  // the tab becomes visible again they refresh at once rather than up to one period later.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (document.visibilityState !== "visible" && elt && elt.hasAttribute && elt.hasAttribute("data-live")) {
      event.preventDefault();
    }
  });
  // A page of live cards ([data-card] markers, dashboard/live.py) polls once for all of them: the poll
  // ([data-cards-poll]) sends the version of every card the page shows, read from the page when it is sent,
  // so a card swapped in by any answer (a poll's, a pager's, the key picker's) is known by its new version.
  function cardVersions() {
    var pairs = [];
    document.querySelectorAll("[data-card][data-version]").forEach(function (marker) {
      pairs.push(encodeURIComponent(marker.dataset.card) + "=" + encodeURIComponent(marker.dataset.version));
    });
    return pairs.join("&");
  }
  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-cards-poll")) event.detail.headers["X-Smrweb-Cards"] = cardVersions();
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    document.querySelectorAll("[data-live]").forEach(function (el) { window.htmx.trigger(el, "smrweb:visible"); });
  });

  // --- errors and lost connections ---------------------------------------------------------------------
  // htmx does not swap 4xx/5xx answers. A poll that fails marks the page's "live" badge as
  // reconnecting (and keeps polling); a click that fails shows the server's fragment when it sent
  // one (e.g. "no such metric"), else a short message, in the place the answer was meant for.
  function liveBadge(state, title) {
    document.querySelectorAll(".live").forEach(function (badge) {
      badge.classList.toggle("stale", state === "stale");
      if (!badge.dataset.title) badge.dataset.title = badge.getAttribute("title") || "";
      badge.setAttribute("title", state === "stale" ? title : badge.dataset.title);
      badge.textContent = state === "stale" ? "reconnecting" : "live";
    });
  }

  function onFailure(event, message) {
    var elt = event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live")) {
      liveBadge("stale", message + " — retrying with the next poll");
      return;
    }
    var target = event.detail.target;
    if (!target) return;
    var xhr = event.detail.xhr;
    var body = xhr && xhr.responseText;
    var fragment = body && body.indexOf("<html") === -1 && /text\/html/.test(xhr.getResponseHeader("Content-Type") || "");
    if (fragment) {
      target.innerHTML = body;
      window.htmx.process(target);
    } else {
      var note = document.createElement("p");
      note.className = "form-error";
      note.setAttribute("role", "alert");
      note.textContent = message;
      target.replaceChildren(note);
    }
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    onFailure(event, "Could not load this (" + xhr.status + " " + (xhr.statusText || "error") + ").");
  });
  document.addEventListener("htmx:sendError", function (event) {
    onFailure(event, "The server did not answer; check the connection.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful && event.detail.elt.hasAttribute && event.detail.elt.hasAttribute("data-live")) liveBadge("ok");
  });

  // A flash about something in progress ("Verification started…") goes once the live part it is about
  // has changed (a poll answered 200 with new content, not 204), so it never sits beside the result.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;  // still in the page here (an outerHTML swap removes it later)
    if (!target || !target.hasAttribute || !target.hasAttribute("data-live") || event.detail.xhr.status !== 200) return;
    document.querySelectorAll("[data-flash-until-change]").forEach(function (flash) { flash.remove(); });
  });

  // The project chart follows the runs table's filters: when the filter form brings a new table, the
  // chart is fetched again for the same query (its section comes back polling that query).
  document.addEventListener("htmx:afterSwap", function (event) {
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;
    var chart = document.getElementById("project-chart");
    if (!chart || !form || !form.matches || !form.matches("form.filters")) return;
    var query = new URLSearchParams(new FormData(form)).toString();
    window.htmx.ajax("GET", chart.getAttribute("data-chart-base") + (query ? "?" + query : ""),
                     {target: "#project-chart", swap: "outerHTML"});
  });

  function refresh(root) { renderPlots(root); syncPicks(); }
  // --- clock texts that keep ticking ------------------------------------------------------------------
  // Every clock text a page shows is written here, not by the server: versions hold no clock, so a quiet
  // page's polls stay 204 and a render kept in the cache says what it said when it was made. Rewritten on
  // every swap and every few seconds:
  //   <time datetime="ISO" data-ago="long|short">3s ago</time>      (the `ago` filters)
  //   <time datetime="ISO" data-since="long">3h 5m</time>           (`since`: stalled for …)
  //   <time datetime="ISO" data-until="long">in 2h</time>           (`until`: a forecast, a next attempt)
  //   <span data-since-at="ISO" data-since-title="No progress for {} …">  (a hover text's duration)
  function duration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    var big, small, units;
    if (seconds < 3600) { big = Math.floor(seconds / 60); small = seconds % 60; units = ["m", "s"]; }
    else if (seconds < 86400) { big = Math.floor(seconds / 3600); small = Math.floor(seconds % 3600 / 60); units = ["h", "m"]; }
    else { big = Math.floor(seconds / 86400); small = Math.floor(seconds % 86400 / 3600); units = ["d", "h"]; }
    return small ? big + units[0] + " " + small + units[1] : big + units[0];
  }

  function tickTimes(root) {
    var now = Date.now();
    (root || document).querySelectorAll("time[data-ago], time[data-since], time[data-until]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      var text;
      if (el.hasAttribute("data-until")) text = at <= now ? "now" : "in " + duration((at - now) / 1000);
      else if (el.hasAttribute("data-since")) text = duration((now - at) / 1000);
      else {
        text = duration((now - at) / 1000);
        if (el.dataset.ago === "short") text = text.split(" ")[0];
        text += " ago";
      }
      if (el.textContent !== text) el.textContent = text;
    });
    (root || document).querySelectorAll("[data-since-at][data-since-title]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("data-since-at"));
      if (isNaN(at)) return;
      var title = el.getAttribute("data-since-title").replace("{}", duration((now - at) / 1000));
      if (el.title !== title) el.title = title;
    });
  }
  setInterval(function () { if (document.visibilityState === "visible") tickTimes(document); }, 5000);

  // --- the browser's time zone ---------------------------------------------------------------------------
  // Sent as a cookie so that a user who chose "my browser's zone" sees pages and charts rendered in the
  // zone this browser is in now; when it differs from the one the page was rendered in, reload once.
  function browserZone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
  }

  function syncZone() {
    var zone = browserZone();
    if (!zone) return;
    var current = (document.cookie.match(/(?:^|; )smrweb_tz=([^;]*)/) || [])[1];
    if (current !== encodeURIComponent(zone)) {
      document.cookie = "smrweb_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; SameSite=Lax" +
                        (location.protocol === "https:" ? "; Secure" : "");
    }
    var root = document.documentElement;
    if (root.dataset.clock === "local" && root.dataset.clockZone !== zone) {
      var key = "smrweb.tzReload." + zone;
      if (!sessionStorage.getItem(key)) { sessionStorage.setItem(key, "1"); window.location.reload(); }
    }
    document.querySelectorAll("[data-browser-zone-form] input[name=local_zone]").forEach(function (input) { input.value = zone; });
    document.querySelectorAll("[data-browser-zone-label]").forEach(function (label) { label.textContent = "(" + zone + ")"; });
  }

  // --- the menu button (narrow screens) ----------------------------------------------------------------
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest("[data-nav-toggle]");
    if (!toggle) return;
    var nav = document.getElementById(toggle.getAttribute("aria-controls"));
    var open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (nav) nav.classList.toggle("open", open);
  });

  // --- forms answered by htmx with their errors ------------------------------------------------------
  // htmx does not swap a 400 by default; a fragment that re-renders itself with field errors (the review
  // panel) says so with data-form-errors, and its 400 is swapped in like a 200.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (event.detail.xhr.status !== 400 || !target || !target.closest || !target.closest("[data-form-errors]")) return;
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  });

  // --- the review queue as a workbench -----------------------------------------------------------------
  // j/k select the next/previous row and open its panel (preview, diff, validator output, review form);
  // o opens or closes it; c goes to the comment; a/r press the open panel's Approve/Reject. A reject
  // needs a reason: with an empty comment, r goes to the comment box and Ctrl+Enter then rejects.
  // Keys typed in a field are the field's own (Esc leaves it).
  function queueRows() { return Array.prototype.slice.call(document.querySelectorAll("tr[data-queue-row]")); }
  function selectedRow() { return document.querySelector("tr[data-queue-row].selected"); }
  function panelOf(row) { return document.getElementById("panel-row-" + row.getAttribute("data-submission")); }
  function setPanel(row, open) {
    var panel = panelOf(row);
    if (!panel) return;
    panel.hidden = !open;
    row.setAttribute("aria-expanded", open ? "true" : "false");
    var toggle = row.querySelector("[data-toggle-panel]");
    if (toggle) toggle.textContent = open ? "\u25BE" : "\u25B8";
    var loader = panel.querySelector("[hx-trigger*='smrweb:open']");
    if (open && loader) window.htmx.trigger(loader, "smrweb:open");
  }
  function selectRow(row) {
    var previous = selectedRow();
    if (previous && previous !== row) { previous.classList.remove("selected"); setPanel(previous, false); }
    row.classList.add("selected");
    setPanel(row, true);
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest("[data-toggle-panel]");
    if (!toggle) return;
    var row = toggle.closest("tr[data-queue-row]");
    if (row.classList.contains("selected") && row.getAttribute("aria-expanded") === "true") setPanel(row, false);
    else selectRow(row);
  });
  function pressAct(panel, act) {
    var button = panel.querySelector("[data-act=" + act + "]");
    if (!button) {
      var note = panel.querySelector("[data-no-review]");
      if (note) note.classList.add("flash-note");
      return;
    }
    var box = panel.querySelector("textarea[name=comment]");
    if (act === "reject" && box && !box.value.trim()) {
      box.closest("form").setAttribute("data-pending", "reject");
      box.placeholder = "Say why it is rejected, then Ctrl+Enter";
      box.focus();
      return;
    }
    button.click();
  }
  document.addEventListener("keydown", function (event) {
    if (!document.querySelector("table[data-workbench]")) return;
    var target = event.target;
    var typing = target && (target.tagName === "TEXTAREA" || target.tagName === "INPUT" || target.tagName === "SELECT" ||
                            target.isContentEditable);
    if (typing) {
      var form = target.closest && target.closest("form[data-review-form]");
      if (event.key === "Escape") { target.blur(); var here = selectedRow(); if (here) here.focus(); }
      else if (form && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        var act = form.getAttribute("data-pending") || "approve";
        var button = form.querySelector("[data-act=" + act + "]");
        if (button) { event.preventDefault(); button.click(); }
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var rows = queueRows();
    if (!rows.length) return;
    var row = selectedRow();
    var index = row ? rows.indexOf(row) : -1;
    if (event.key === "j") selectRow(rows[Math.min(index + 1, rows.length - 1)]);
    else if (event.key === "k") selectRow(rows[Math.max(index - 1, 0)]);
    else if (event.key === "o" || (event.key === "Enter" && target === row)) {
      if (!row) selectRow(rows[0]);
      else setPanel(row, row.getAttribute("aria-expanded") !== "true");
    } else if ((event.key === "a" || event.key === "r" || event.key === "c") && row) {
      var panel = panelOf(row);
      if (panel.hidden) setPanel(row, true);  // show what is being judged before judging it
      else if (event.key === "c") { var box = panel.querySelector("textarea[name=comment]"); if (box) box.focus(); }
      else pressAct(panel, event.key === "a" ? "approve" : "reject");
    } else return;
    event.preventDefault();
  });

  // --- the review queue's selection: bulk verify / approve ------------------------------------------
  // The row checkboxes belong to the bulk form (form="bulk-form"); "select all" ticks this page's rows.
  // The buttons are enabled once something is selected, and a confirmation names how many.
  function bulkPicks() { return Array.prototype.slice.call(document.querySelectorAll("input[data-bulk-pick]")); }
  function syncBulk() {
    var form = document.querySelector("form[data-bulk-form]");
    if (!form) return;
    var picks = bulkPicks();
    var n = picks.filter(function (box) { return box.checked; }).length;
    form.querySelectorAll("[data-bulk-action]").forEach(function (button) { button.disabled = n === 0; });
    var all = document.querySelector("input[data-bulk-all]");
    if (all) { all.checked = n > 0 && n === picks.length; all.indeterminate = n > 0 && n < picks.length; }
    var label = form.querySelector("[data-bulk-count]");
    if (label && !label.dataset.hint) label.dataset.hint = label.textContent;
    if (label) label.textContent = n ? n + " selected" : label.dataset.hint;
  }
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches) return;
    if (box.matches("input[data-bulk-all]")) bulkPicks().forEach(function (pick) { pick.checked = box.checked; });
    if (box.matches("input[data-bulk-all], input[data-bulk-pick]")) syncBulk();
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-bulk-form]")) return;
    var n = bulkPicks().filter(function (box) { return box.checked; }).length;
    var button = event.submitter;
    var question = (button && button.dataset.verb || "Act on") + " " + n + " submission" + (n === 1 ? "" : "s") + "?";
    if (button && button.dataset.rule) question += "\n\n" + button.dataset.rule;
    if (!n || !window.confirm(question)) event.preventDefault();
  }, true);


  // "/" focuses the page's search box (GitHub's and Gmail's key), unless one is typing somewhere already.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    var target = event.target;
    if (target && (target.tagName === "TEXTAREA" || target.tagName === "INPUT" || target.tagName === "SELECT" ||
                   target.isContentEditable)) return;
    var boxes = document.querySelectorAll("input[type=search], [data-search-box]");
    for (var i = 0; i < boxes.length; i++) {
      if (boxes[i].disabled || !boxes[i].getClientRects().length) continue;  // hidden (a closed menu, another tab)
      event.preventDefault();
      boxes[i].focus();
      if (boxes[i].select) boxes[i].select();
      return;
    }
  });

  // --- the Logs card (run page): a terminal, newest line at the bottom ----------------------------------
  // A box opens at its bottom (the tail, an older page) or its top (a newer page). At the tail it stays at
  // the bottom as the poll adds lines, unless the reader scrolled up to read; asking the card for another
  // page or filter (a request from inside it) starts afresh. Whether a box is at its bottom is read before
  // a swap changes it: the scroll events a swap causes (rows leaving the top) say nothing of the reader.
  var logPinned = {}, logFresh = false, logSwapping = false;
  function logAtBottom(box) { return box.scrollHeight - box.scrollTop - box.clientHeight < 24; }
  document.addEventListener("scroll", function (event) {
    var box = event.target;
    if (logSwapping || !box.classList || !box.classList.contains("log-box")) return;
    logPinned[box.id] = logAtBottom(box);
  }, true);
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.closest && elt.closest("#run-logs")) logFresh = true;
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!event.detail.shouldSwap) return;
    document.querySelectorAll(".log-box").forEach(function (box) {
      if (box._smrwebLog && !logFresh) logPinned[box.id] = logAtBottom(box);
    });
    logSwapping = true;
    window.setTimeout(function () { logSwapping = false; }, 1000);  // should the swap never settle
  });
  function syncLogs() {
    document.querySelectorAll(".log-box").forEach(function (box) {
      var top = box.dataset.logStart === "top";
      if (!box._smrwebLog) {
        box._smrwebLog = true;
        if (logFresh || logPinned[box.id] === undefined) logPinned[box.id] = !top;
        if (top) box.scrollTop = 0;
      }
      if (logPinned[box.id] && !top) box.scrollTop = box.scrollHeight;
    });
    logFresh = false;
    logSwapping = false;
  }

  function refresh(root) { renderPlots(root); syncPicks(); tickTimes(root); syncBulk(); syncLogs(); }
  if (DARK && DARK.addEventListener) {
    DARK.addEventListener("change", function () {
      document.querySelectorAll("[data-plot]").forEach(function (el) { el._smrwebFigure = null; });
      renderPlots(document);
    });
  }
  syncZone();

  // --- a link to a comment (#comment-12) in a thread that loads after the page (the submission page's) ------
  var commentTarget = /^#comment-\d+$/.test(window.location.hash) ? window.location.hash.slice(1) : null;
  document.addEventListener("htmx:afterSettle", function () {
    var target = commentTarget && document.getElementById(commentTarget);
    if (!target) return;
    commentTarget = null;
    target.scrollIntoView();
  });

  document.addEventListener("htmx:afterSettle", function () { refresh(document); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", function () { refresh(document); });
  else refresh(document);
  window.smrweb = { renderPlots: renderPlots, syncPicks: syncPicks, cardVersions: cardVersions };
})();
