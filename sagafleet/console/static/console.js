// The console's only script (the Content-Security-Policy forbids inline ones).
//
// Live updates: every element with a data-live="URL" attribute is refreshed when the server's
// event stream (/live) says the read models moved: the script fetches URL (a server-rendered,
// already escaped fragment of the same page) and replaces the element's content with it. An
// element being edited (focus inside it, e.g. a reason typed into a form) is refreshed once
// the focus leaves it, so a refresh never throws away what a person is typing.
//
// The event stream reconnects by itself after any failure: a refusal (429 when this session,
// principal or tenant holds as many live pages as it may, 503 when the console does; the
// browser gives up on an EventSource answered so) or a drop (the console restarted, a proxy
// closed the connection). The script closes the failed stream and opens a new one after an
// exponential backoff with full jitter (a random wait below 1 s, 2 s, 4 s, ... up to 60 s),
// so pages refused together do not come back together; each attempt first refreshes the
// fragments, so a page whose stream stays refused still moves, only more slowly.
//
// Forms with data-once: the submit button is disabled after the first click (the server
// makes a second click a no-op anyway; this only spares the request).
(function () {
  "use strict";

  function liveElements() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-live]"));
  }

  function setStatus(state, text) {
    var marks = document.querySelectorAll(".live-status");
    for (var i = 0; i < marks.length; i++) {
      marks[i].className = "live-status " + state;
      marks[i].textContent = text;
    }
  }

  var pending = new Set();

  function refresh(element) {
    if (element.contains(document.activeElement) && document.activeElement !== document.body) {
      pending.add(element);
      return;
    }
    var url = element.getAttribute("data-live");
    fetch(url, {
      credentials: "same-origin",
      headers: { "X-Sagafleet-Fragment": "1", "Accept": "text/html" },
      cache: "no-store"
    }).then(function (response) {
      if (response.status === 401) { window.location.assign("/sign-in"); return null; }
      return response.text().then(function (text) {
        return { ok: response.ok, text: text };
      });
    }).then(function (result) {
      if (result === null) { return; }
      var template = document.createElement("template");
      template.innerHTML = result.text; // the server escaped every value; CSP stops scripts
      element.replaceChildren(template.content);
      element.setAttribute("data-refreshed", String(Date.now()));
      document.dispatchEvent(new CustomEvent("sagafleet:refreshed", { detail: element }));
    }).catch(function () { /* the next event or reload tries again */ });
  }

  document.addEventListener("focusout", function () {
    window.setTimeout(function () {
      pending.forEach(function (element) {
        if (!element.contains(document.activeElement)) {
          pending.delete(element);
          refresh(element);
        }
      });
    }, 0);
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form && form.hasAttribute && form.hasAttribute("data-once")) {
      if (form.getAttribute("data-sent") === "1") { event.preventDefault(); return; }
      form.setAttribute("data-sent", "1");
      var buttons = form.querySelectorAll("button");
      window.setTimeout(function () {
        for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = true; }
      }, 0);
    }
  });

  var BACKOFF_BASE_MS = 1000;
  var BACKOFF_CAP_MS = 60000;
  var failures = 0;
  var retryTimer = null;

  function backoffMs(failed) {
    // Full jitter: anywhere below the exponential ceiling.
    var ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * Math.pow(2, failed - 1));
    return Math.floor(Math.random() * ceiling);
  }

  function connect() {
    retryTimer = null;
    if (liveElements().length === 0 || !window.EventSource) { return; }
    var source = new EventSource("/live");
    source.addEventListener("open", function () {
      if (failures > 0) { liveElements().forEach(refresh); } // moves missed meanwhile
      failures = 0;
      setStatus("on", "live");
    });
    source.addEventListener("moved", function () { liveElements().forEach(refresh); });
    source.addEventListener("signed-out", function () {
      source.close();
      window.location.assign("/sign-in");
    });
    source.addEventListener("error", function () {
      // Whether refused or dropped, this script decides when to try again (the browser
      // would give up on a refusal, and retry a drop at once, all pages together).
      source.close();
      if (retryTimer !== null) { return; }
      failures += 1;
      var wait = backoffMs(failures);
      setStatus("off", "reconnecting…");
      retryTimer = window.setTimeout(function () {
        liveElements().forEach(refresh); // a refused page still moves; a 401 signs in again
        connect();
      }, wait);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", connect);
  } else {
    connect();
  }
})();
