// Live updates without a full reload: every few seconds, each element with data-live
// is refreshed from the fragment its address serves, unless the operator is typing in it.
"use strict";
(function () {
  const EVERY_MS = 2000;
  function busy(region) {
    const active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    return Array.from(region.querySelectorAll("input[type=text], input:not([type]), textarea"))
      .some((field) => field.value !== "");
  }
  async function refresh(region) {
    if (busy(region)) return;
    try {
      const response = await fetch(region.dataset.live, { credentials: "same-origin" });
      if (response.status === 401) { window.location.assign("/login"); return; }
      if (!response.ok) return;
      const html = await response.text();
      if (html !== region.dataset.shown && !busy(region)) {
        region.innerHTML = html;
        region.dataset.shown = html;
        region.dataset.refreshed = String(Date.now());
      }
    } catch (error) { /* the server is away: try again later */ }
  }
  document.addEventListener("DOMContentLoaded", () => {
    for (const region of document.querySelectorAll("[data-live]")) {
      window.setInterval(() => refresh(region), EVERY_MS);
    }
  });
})();
