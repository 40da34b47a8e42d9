"use strict";
// What the console's pages share: calls to /v1 with the sign-in cookie and the console header.
window.keel = (() => {
  const header = document.querySelector("[data-header]")?.dataset.header || "X-Keel-Console";

  async function api(method, path, body) {
    const headers = { [header]: "1" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) window.location.assign("/console/login");
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    return { ok: response.ok, status: response.status, data };
  }

  function problem(result) {
    const error = result.data && result.data.error;
    return error ? `${error.message} (${error.code})` : `HTTP ${result.status}`;
  }

  function requestId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function show(element, text) {
    element.textContent = text;
    element.hidden = !text;
  }

  return { api, problem, requestId, show };
})();
