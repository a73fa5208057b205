// TunePlane console: progressive enhancement only. Every page works without this file; with it,
// times show in the reader's time zone with relative ages, clocks tick, lists refresh themselves,
// destructive forms ask for confirmation and the spec editor validates as you type.
"use strict";
(function () {
  function dur(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    function p(n) { return (n < 10 ? "0" : "") + n; }
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + p(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + p(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d " + p(Math.floor((s % 86400) / 3600)) + "h";
  }
  function ago(ms) {
    var d = Date.now() - ms, a = Math.abs(d), s = Math.round(a / 1000), t;
    if (s < 10) return "just now";
    if (s < 60) t = s + " s";
    else if (s < 3600) t = Math.round(s / 60) + " min";
    else if (s < 86400) t = Math.round(s / 3600) + " h";
    else t = Math.round(s / 86400) + " d";
    return d >= 0 ? t + " ago" : "in " + t;
  }
  function times(root) {
    root.querySelectorAll("time[data-ms]").forEach(function (el) {
      var ms = Number(el.getAttribute("data-ms"));
      if (!isFinite(ms)) return;
      var local = new Date(ms).toLocaleString(undefined, {
        year: "numeric", month: "short", day: "numeric",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
      });
      el.title = el.getAttribute("datetime") || "";
      el.textContent = el.hasAttribute("data-relative") ? local + " (" + ago(ms) + ")" : local;
    });
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-clock-start]").forEach(function (el) {
      el.textContent = dur(now - Number(el.getAttribute("data-clock-start")));
    });
    document.querySelectorAll("[data-countdown-to]").forEach(function (el) {
      var left = Number(el.getAttribute("data-countdown-to")) - now;
      el.textContent = left > 0 ? dur(left) : "expired";
    });
  }
  function refresh(region) {
    var every = Number(region.getAttribute("data-refresh")) * 1000;
    if (!(every > 0) || !region.id) return;
    var failures = 0;
    var timer = setInterval(function () {
      if (document.hidden || region.contains(document.activeElement) && document.activeElement.tagName !== "BODY") return;
      var status = region.getAttribute("data-status");
      if (status === "SUCCEEDED" || status === "FAILED" || status === "STOPPED") { clearInterval(timer); return; }
      fetch(location.href, { credentials: "same-origin", redirect: "error", headers: { "X-Console-Refresh": "1" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(region.id);
          if (!fresh) return;
          var open = {};
          region.querySelectorAll("details").forEach(function (d, i) { open[i] = d.open; });
          region.innerHTML = fresh.innerHTML;
          region.querySelectorAll("details").forEach(function (d, i) { if (i in open) d.open = open[i]; });
          Array.prototype.forEach.call(fresh.attributes, function (a) { region.setAttribute(a.name, a.value); });
          times(region); tick(); failures = 0;
        })
        .catch(function () { if (++failures >= 5) clearInterval(timer); });
    }, every);
  }
  function validator(area) {
    var url = area.getAttribute("data-validate"), form = area.form, pending = null;
    if (!url || !form) return;
    area.addEventListener("input", function () {
      clearTimeout(pending);
      pending = setTimeout(function () {
        var body = new URLSearchParams();
        body.set("csrf", form.elements.csrf.value);
        body.set("spec", area.value);
        fetch(url, { method: "POST", credentials: "same-origin", body: body })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) {
            var box = document.getElementById("spec-feedback");
            if (!html || !box) return;
            var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("spec-feedback");
            if (fresh) {
              box.innerHTML = fresh.innerHTML;
              area.setAttribute("aria-invalid", fresh.querySelector(".field-errors") ? "true" : "false");
            }
          })
          .catch(function () {});
      }, 400);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    times(document);
    tick();
    setInterval(tick, 1000);
    setInterval(function () { times(document); }, 30000);
    document.querySelectorAll("[data-refresh]").forEach(refresh);
    document.querySelectorAll("textarea[data-validate]").forEach(validator);
    document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.submit(); });
    });
    document.addEventListener("submit", function (e) {
      var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
      if (msg && !window.confirm(msg)) e.preventDefault();
    });
  });
})();
