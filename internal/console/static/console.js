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
  var pending = false, again = false, ended = false, es = null;

  // The session is over (signed out, idled out, its account disabled):
  // the server answers this script's requests 401, never a sign-in page.
  // Say so on the page and stop following. These requests do not keep the
  // session alive; only what the person does (pages, forms) does.
  function signedOut() {
    if (ended) { return; }
    ended = true;
    if (es) { es.close(); }
    live.setAttribute("data-stream", "signed-out");
    var p = document.createElement("p");
    p.className = "flash";
    p.id = "signed-out";
    p.setAttribute("role", "alert");
    p.appendChild(document.createTextNode("Your session has ended: this page no longer updates. "));
    var a = document.createElement("a");
    a.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
    a.textContent = "Sign in again";
    p.appendChild(a);
    live.parentNode.insertBefore(p, live);
  }

  function refresh() {
    if (ended) { return; }
    if (pending) { again = true; return; }
    pending = true;
    fetch(live.getAttribute("data-refresh"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) { signedOut(); return null; }
        return r.ok ? r.text() : null;
      })
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
    if (ended) { return; }
    var s = new EventSource("/events/stream?project=" + encodeURIComponent(project) +
      (after ? "&after=" + encodeURIComponent(after) : ""));
    es = s;
    types.forEach(function (t) { if (t) { s.addEventListener(t, onEvent); } });
    s.addEventListener("open", function () { live.setAttribute("data-stream", "open"); });
    s.addEventListener("error", function () {
      if (s.readyState !== EventSource.CLOSED || ended) { return; }
      // Refused outright. The session over (a 401, which EventSource does
      // not show): the re-render finds that out and says so. The position
      // past retention, say: listen from now on, and re-render once for
      // whatever came in between.
      refresh();
      if (after) {
        after = "";
        listen();
      }
    });
  }
  listen();
})();
