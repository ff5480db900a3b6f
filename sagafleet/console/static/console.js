// The console's only script (the Content-Security-Policy forbids inline ones).
//
// Live updates: every element with a data-live="URL" attribute is refreshed when the server's
// event stream (/live) says the read models moved: the script fetches URL (a server-rendered,
// already escaped fragment of the same page) and replaces the element's content with it. An
// element being edited (focus inside it, e.g. a reason typed into a form) is refreshed once
// the focus leaves it, so a refresh never throws away what a person is typing.
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

  function connect() {
    if (liveElements().length === 0 || !window.EventSource) { return; }
    var source = new EventSource("/live");
    source.addEventListener("open", function () { setStatus("on", "live"); });
    source.addEventListener("moved", function () { liveElements().forEach(refresh); });
    source.addEventListener("signed-out", function () {
      source.close();
      window.location.assign("/sign-in");
    });
    source.addEventListener("error", function () { setStatus("off", "reconnecting…"); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", connect);
  } else {
    connect();
  }
})();
