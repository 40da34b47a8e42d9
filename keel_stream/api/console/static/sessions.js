"use strict";
(() => {
  const button = document.getElementById("new-session");
  const error = document.getElementById("sessions-error");
  button.addEventListener("click", async () => {
    button.disabled = true;
    const result = await keel.api("POST", "/v1/sessions", {});
    button.disabled = false;
    if (!result.ok) { keel.show(error, "Could not create a session: " + keel.problem(result)); return; }
    window.location.assign("/console/sessions/" + encodeURIComponent(result.data.id));
  });
})();
