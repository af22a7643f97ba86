// gpuaas console: the little JS the pages use. Everything works without it
// except live updates.
(function () {
  "use strict";

  // A select that switches something submits its form on change.
  document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
    s.addEventListener("change", function () { s.form.submit(); });
  });

  // Live regions: re-render from the server when an event about them
  // arrives on the project's stream. EventSource resumes by itself from
  // the last event id after a drop, so nothing is missed.
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var project = live.getAttribute("data-live");
  var instance = live.getAttribute("data-instance");
  var types = (document.body.getAttribute("data-event-types") || "").split(",");
  var pending = false, again = false;

  function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    fetch(live.getAttribute("data-refresh"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("live");
        if (next) { live.innerHTML = next.innerHTML; live.setAttribute("data-updated", String(Date.now())); }
      })
      .finally(function () {
        pending = false;
        if (again) { again = false; refresh(); }
      });
  }

  // The stream starts after the event the page's state is as of, so a
  // change between the render and the opening is not missed.
  var after = live.getAttribute("data-after");
  function onEvent(e) {
    if (instance && e.data.indexOf(instance) < 0) { return; }
    refresh();
  }
  function listen() {
    var es = new EventSource("/events/stream?project=" + encodeURIComponent(project) +
      (after ? "&after=" + encodeURIComponent(after) : ""));
    types.forEach(function (t) { if (t) { es.addEventListener(t, onEvent); } });
    es.addEventListener("open", function () { live.setAttribute("data-stream", "open"); });
    es.addEventListener("error", function () {
      // Refused outright (the position past retention, say): listen from
      // now on, and re-render once for whatever came in between.
      if (es.readyState === EventSource.CLOSED && after) {
        after = "";
        refresh();
        listen();
      }
    });
  }
  listen();
})();
