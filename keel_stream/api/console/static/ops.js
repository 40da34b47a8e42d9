"use strict";
(() => {
  const panel = document.getElementById("ops-panel");
  const pause = document.getElementById("ops-pause");
  const updated = document.getElementById("ops-updated");
  let paused = false;

  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume updates" : "Pause updates";
  });

  async function refresh() {
    if (paused || document.hidden) return;
    try {
      const response = await fetch("/console/ops/panel", { credentials: "same-origin" });
      if (response.status === 401) { window.location.assign("/console/login"); return; }
      if (!response.ok) { updated.textContent = `Update failed: HTTP ${response.status}`; return; }
      panel.innerHTML = await response.text();
      updated.textContent = "Updated at " + new Date().toLocaleTimeString();
    } catch (err) {
      updated.textContent = "Update failed: " + err;
    }
  }
  setInterval(refresh, 2000);
})();
