// The console's own script: no build step, no inline script anywhere (the pages' CSP forbids it).
// 1. HTMX requests carry the session's CSRF token (the <body data-csrf> of a signed-in page).
// 2. A <div class="chart" data-spec-id="..."> is drawn with Vega-Lite from the JSON spec in the
//    <script type="application/json" id="..."> it names, with Vega's expression interpreter
//    (no eval) and the SVG renderer; the spec's data URL is an API route read with the session cookie.
(function () {
  "use strict";
  // 0. Script runs: the controls that need it (HTMX's "Add a decision") are shown (.js-only).
  document.documentElement.classList.add("js");
  document.addEventListener("htmx:configRequest", function (event) {
    var token = document.body.dataset.csrf;
    if (token) { event.detail.headers["X-CSRF-Token"] = token; }
  });

  function drawCharts(root) {
    if (typeof window.vegaEmbed !== "function") { return; }
    root.querySelectorAll(".chart[data-spec-id]").forEach(function (el) {
      if (el.dataset.drawn) { return; }
      var source = document.getElementById(el.dataset.specId);
      if (!source) { return; }
      el.dataset.drawn = "1";
      var spec = JSON.parse(source.textContent);
      window.vegaEmbed(el, spec, {
        ast: true, expr: window.vega.expressionInterpreter, renderer: "svg", actions: false,
        defaultStyle: false, tooltip: { disableDefaultStyle: true, theme: "custom" }
      }).then(function () {
        el.setAttribute("data-state", "drawn");
      }).catch(function (error) {
        el.setAttribute("data-state", "failed");
        el.textContent = "The chart could not be drawn: " + error.message + ". The table below has every number.";
      });
    });
  }

  // 3. An HTMX request the server refuses (4xx/5xx: a page opened before the session changed, so
  //    its CSRF token is another session's; an object gone since) is swapped nowhere by HTMX: the
  //    button did nothing. Its refusal (the console page's #error) is said at the top of the page,
  //    focused, as a form's refusal is.
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var page = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
    var said = page.getElementById("error");
    var text = said ? said.textContent.trim()
      : "expected an answer from the server, got status " + xhr.status + ". Reload the page and try again";
    var box = document.getElementById("htmx-error");
    if (!box) {
      box = document.createElement("p");
      box.id = "htmx-error";
      box.className = "error";
      box.setAttribute("role", "alert");
      box.tabIndex = -1;
      var main = document.getElementById("main");
      main.insertBefore(box, main.firstChild);
    }
    box.textContent = text;
    box.focus();
  });

  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); });
  document.addEventListener("htmx:afterSettle", function (event) { drawCharts(event.target); });
})();
