// pgflow dashboard: a running run's page follows the run's events (server-sent, from pgflow's
// run events) and swaps in the freshly rendered body after each, without reloading the page;
// the overview refreshes its figures every few seconds the same way.
(function () {
  "use strict";

  function follow(body) {
    var runId = body.getAttribute("data-run");
    var busy = false;
    var again = false;

    function redraw() {
      if (busy) { again = true; return; }
      busy = true;
      fetch("/runs/" + runId + "/body", { headers: { accept: "text/html" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          var current = document.getElementById("run-body");
          if (html && current) { current.outerHTML = html; }
        })
        .catch(function () { /* the next event redraws */ })
        .then(function () {
          busy = false;
          if (again) { again = false; redraw(); }
        });
    }

    var events = new EventSource("/runs/" + runId + "/events");
    events.addEventListener("change", redraw);
    events.addEventListener("end", function () {
      events.close();
      redraw();
    });
  }

  // The overview reads itself again every few seconds and swaps in the new figures.
  function refresh(section) {
    var every = parseInt(section.getAttribute("data-refresh-ms"), 10) || 5000;
    setInterval(function () {
      if (document.hidden) { return; }
      fetch(window.location.href, { headers: { accept: "text/html" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (!html) { return; }
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(section.id);
          var current = document.getElementById(section.id);
          if (fresh && current) { current.innerHTML = fresh.innerHTML; }
        })
        .catch(function () { /* the next tick tries again */ });
    }, every);
  }

  function start() {
    var body = document.getElementById("run-body");
    if (body && body.getAttribute("data-live") === "true") { follow(body); }
    var overview = document.getElementById("overview");
    if (overview) { refresh(overview); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
