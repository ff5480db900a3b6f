// The console's only script (the Content-Security-Policy forbids inline ones).
//
// Live updates: every element with a data-live="URL" attribute is refreshed when the server's
// event stream (/live) says the read models moved: the script fetches URL (a server-rendered,
// already escaped fragment of the same page) and merges it in. A child of the element that a
// person is working on (focus inside it, a reason typed, a box ticked, evidence opened: "in
// hand") is kept
// exactly as it is, in place, while every other child is replaced by the fresh one; a kept
// child whose entry has left the fragment is marked "gone" (answered elsewhere) rather than
// removed. So a refresh never throws away what a person typed, and never freezes the list.
//
// Countdowns: every <time class="countdown" datetime="ISO"> is rewritten each second with the
// time left ("12 min left"); without this script it keeps the text the server drew.
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

  function inHand(child) {
    if (child.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    if (child.matches("details[open]") || child.querySelector("details[open]")) {
      return true; // evidence a person opened to read
    }
    var fields = child.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      if (field.type === "hidden") { continue; }
      if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) { return true; }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function keyOf(child) {
    // A line is known by its id; a child without one by its tag and classes.
    return child.id ? "#" + child.id : child.tagName + "." + child.className;
  }

  function merge(element, fresh) {
    // Keep the children in hand where they are; replace every other child.
    var kept = {};
    Array.prototype.slice.call(element.children).forEach(function (child) {
      if (inHand(child) && !kept[keyOf(child)]) { kept[keyOf(child)] = child; } else {
        child.remove();
      }
    });
    var cursor = element.firstChild;
    Array.prototype.slice.call(fresh.children).forEach(function (child) {
      var old = kept[keyOf(child)];
      if (old) {
        old.classList.remove("gone");
        delete kept[keyOf(child)];
        cursor = old.nextSibling;
      } else {
        element.insertBefore(child, cursor);
      }
    });
    Object.keys(kept).forEach(function (key) { kept[key].classList.add("gone"); });
  }

  function refresh(element) {
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
      merge(element, template.content);
      tickCountdowns();
      element.setAttribute("data-refreshed", String(Date.now()));
      document.dispatchEvent(new CustomEvent("sagafleet:refreshed", { detail: element }));
    }).catch(function () { /* the next event or reload tries again */ });
  }

  function span(seconds) {
    if (seconds < 60) { return seconds + " s"; }
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) { return minutes + " min"; }
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) { return minutes ? hours + " h " + minutes + " min" : hours + " h"; }
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h" : days + " d";
  }

  function tickCountdowns() {
    // The same words as the server's time_left_text (sagafleet.console.pages.queue_line).
    var marks = document.querySelectorAll("time.countdown[datetime]");
    var now = Date.now();
    for (var i = 0; i < marks.length; i++) {
      var at = Date.parse(marks[i].getAttribute("datetime"));
      if (isNaN(at)) { continue; }
      var seconds = Math.trunc((at - now) / 1000);
      marks[i].textContent = seconds < 0 ? "expired " + span(-seconds) + " ago"
        : span(seconds) + " left";
      marks[i].classList.toggle("expired", seconds < 0);
    }
  }
  window.setInterval(tickCountdowns, 1000);

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

  function reachableScrollers() {
    // A table or a block of JSON wider (or taller) than its box scrolls inside itself; a
    // keyboard user reaches it with Tab to scroll it (WCAG 2.1.1).
    var boxes = document.querySelectorAll("main table, main pre");
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      var scrolls = box.scrollWidth > box.clientWidth || box.scrollHeight > box.clientHeight;
      if (scrolls && !box.hasAttribute("tabindex")) { box.setAttribute("tabindex", "0"); }
    }
  }

  function start() {
    tickCountdowns();
    reachableScrollers();
    window.addEventListener("resize", reachableScrollers);
    document.addEventListener("sagafleet:refreshed", reachableScrollers);
    connect();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
