"use strict";
// The session page: the live transcript over SSE (partials while an answer streams, replaced
// by the committed message), the run's status, the composer, cancel and fork-at-this-event.
(() => {
  const root = document.getElementById("session");
  const sid = root.dataset.session;
  const base = "/v1/sessions/" + encodeURIComponent(sid);
  const KINDS = ["user.message", "assistant.message", "tool.result", "compaction",
    "run.finished", "run.started", "run.failed", "external.event"];
  const $ = (id) => document.getElementById(id);
  const log = $("transcript");
  const seen = new Set();
  const committedGenerations = new Set();
  const calls = new Map();
  let lastSeq = 0;
  let streamingGeneration = null;
  let source = null;
  let statusTimer = null;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function textOf(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.filter((b) => b && b.type === "text").map((b) => b.text).join("");
  }

  function clock(iso) {
    const when = new Date(iso);
    return isNaN(when) ? "" : when.toLocaleTimeString();
  }

  function head(ev, label) {
    const line = el("p", "entry-head");
    line.append(el("span", "seq", "#" + ev.seq), " ", el("strong", "", label), " ");
    const time = el("time", "", clock(ev.committedAt));
    time.dateTime = ev.committedAt;
    line.append(time);
    const fork = el("button", "fork", "Fork here");
    fork.type = "button";
    fork.setAttribute("aria-label", `Fork a new session at event ${ev.seq}`);
    fork.addEventListener("click", () => forkAt(ev.seq));
    line.append(" ", fork);
    return line;
  }

  function toolCall(block, ev) {
    const box = el("div", "tool");
    box.append(el("p", "tool-name", "Tool call: " + block.name));
    box.append(el("pre", "args", JSON.stringify(block.arguments ?? {}, null, 2)));
    const result = el("p", "tool-result pending", "waiting for its result…");
    box.append(result);
    const gate = block.approval ? decisionButtons(block) : null;
    if (gate) box.append(gate);
    calls.set(block.id, { result, gate, at: Date.parse(ev.committedAt) });
    return box;
  }

  function decisionButtons(block) {
    const approval = block.approval;
    const gate = el("div", "decision");
    gate.append(el("p", "help", `Needs a decision (expires ${approval.expiresAt}).`));
    for (const outcome of ["approve", "reject"]) {
      if (!approval.outcomes.includes(outcome)) continue;
      const button = el("button", "decide", outcome === "approve" ? "Approve" : "Reject");
      button.type = "button";
      button.setAttribute("aria-label", `${button.textContent} the call to ${block.name}`);
      button.addEventListener("click", () => decide(block, outcome, gate));
      gate.append(button, " ");
    }
    return gate;
  }

  async function decide(block, outcome, gate) {
    const body = { outcome, argsDigest: block.approval.argsDigest };
    const result = await keel.api("POST", `${base}/decisions/${encodeURIComponent(block.id)}`, body);
    if (!result.ok) { keel.show($("composer-error"), "Not answered: " + keel.problem(result)); return; }
    gate.replaceChildren(el("p", "help", `Answered: ${outcome}.`));
  }

  function userMessage(li, ev, p) {
    if (p.decision) {
      const d = p.decision;
      li.append(head(ev, `Decision: ${d.outcome}`),
        el("p", "text", `${d.id} answered by ${d.answeredBy}${d.reason ? ": " + d.reason : ""}`));
      return;
    }
    if (p.subagentResult) {
      const r = p.subagentResult;
      li.append(head(ev, `Subagent ${r.status}`), el("p", "text", `${r.child}: ${r.text || ""}`));
      return;
    }
    const delivery = p.delivery ? ` (${p.delivery})` : "";
    li.append(head(ev, "You" + delivery), el("p", "text", p.text ?? textOf(p.content)));
  }

  function assistantMessage(li, ev, p) {
    if (p.generationId) committedGenerations.add(p.generationId);
    if (p.generationId && p.generationId === streamingGeneration) endStreaming();
    const stop = p.stopReason && p.stopReason !== "end_turn" ? ` (${p.stopReason})` : "";
    li.append(head(ev, "Answer" + stop), el("p", "text", textOf(p.content)));
    for (const block of Array.isArray(p.content) ? p.content : []) {
      if (block && block.type === "toolCall") li.append(toolCall(block, ev));
    }
  }

  function toolResult(li, ev, p) {
    const text = textOf(p.content);
    li.append(head(ev, p.isError ? "Tool error" : "Tool result"), el("p", "text", text));
    const call = calls.get(p.toolCallId);
    if (!call) return;
    if (call.gate) call.gate.remove();
    const took = Date.parse(ev.committedAt) - call.at;
    call.result.className = "tool-result" + (p.isError ? " failed" : "");
    call.result.textContent = `${p.isError ? "failed" : "result"} after ${took} ms (#${ev.seq}): ${text}`;
  }

  function summary(ev, p) {
    const parts = [p.status];
    if (p.turns !== undefined) parts.push(`${p.turns} turns`);
    if (p.durationMs !== undefined) parts.push(`${p.durationMs} ms`);
    if (p.tokens !== undefined) parts.push(`tokens ${JSON.stringify(p.tokens)}`);
    if (p.error) parts.push(`error ${JSON.stringify(p.error)}`);
    return parts.join(" · ");
  }

  function runFinished(li, ev, p) {
    endStreaming();
    const text = summary(ev, p);
    li.append(head(ev, "Run " + p.status), el("p", "text", text));
    const item = el("li", "", `#${ev.seq}: ${text}`);
    $("summaries").append(item);
  }

  function other(li, ev, p) {
    const label = ev.kind === "external.event" ? `External event ${p.type ?? ""}` : ev.kind;
    li.append(head(ev, label), el("pre", "args", JSON.stringify(p, null, 2)));
  }

  function render(ev) {
    if (seen.has(ev.seq)) return;
    seen.add(ev.seq);
    lastSeq = Math.max(lastSeq, ev.seq);
    const li = el("li", "entry kind-" + ev.kind.replace(".", "-"));
    li.id = "event-" + ev.seq;
    li.dataset.seq = ev.seq;
    li.dataset.kind = ev.kind;
    const p = ev.payload || {};
    const draw = { "user.message": userMessage, "assistant.message": assistantMessage,
      "tool.result": toolResult, "run.finished": runFinished }[ev.kind] || other;
    draw(li, ev, p);
    const copied = ev.metadata && ev.metadata.forkedFrom;
    if (copied) li.append(el("p", "help", `copied from ${copied.session} #${copied.seq}`));
    log.append(li);
    scheduleStatus();
  }

  function endStreaming() {
    streamingGeneration = null;
    $("streaming").hidden = true;
    $("streaming-text").textContent = "";
  }

  function partial(data) {
    if (data.type && data.type !== "text") return;
    if (committedGenerations.has(data.generationId)) return;
    if (data.generationId !== streamingGeneration) {
      streamingGeneration = data.generationId;
      $("streaming-text").textContent = "";
    }
    $("streaming-text").textContent += data.delta;
    $("streaming").hidden = false;
  }

  function connect(after) {
    const query = after > 0 ? `?partials=1&after=${after}` : "?partials=1";
    source = new EventSource(base + "/events/stream" + query);
    source.onopen = () => { $("connection").textContent = "live"; };
    source.onerror = () => {
      $("connection").textContent = "reconnecting…";
      if (source.readyState === EventSource.CLOSED) setTimeout(() => connect(lastSeq), 2000);
    };
    for (const kind of KINDS) {
      source.addEventListener(kind, (e) => render(JSON.parse(e.data)));
    }
    source.addEventListener("partial", (e) => partial(JSON.parse(e.data)));
    source.addEventListener("drain", (e) => {
      source.close();
      endStreaming();
      $("connection").textContent = "reconnecting…";
      const hint = JSON.parse(e.data || "{}").retry_after_ms ?? 3000;
      setTimeout(() => connect(lastSeq), hint);
    });
  }

  function scheduleStatus() {
    clearTimeout(statusTimer);
    statusTimer = setTimeout(refreshStatus, 300);
  }

  async function readModel() {
    const live = await keel.api("GET", `${base}/status?min_seq=${lastSeq}&wait_s=1`);
    if (live.ok) return live.data.state;
    const folded = await keel.api("GET", `${base}/status?atSeq=${lastSeq}`);
    return folded.ok ? folded.data.state : null;
  }

  async function refreshSubagents() {
    const page = await keel.api("GET", base + "/subagents?limit=200");
    if (!page.ok) return;
    const list = $("subagents");
    const items = page.data.subagents.map((child) => {
      const item = el("li");
      const link = el("a", "mono", child.id);
      link.href = "/console/sessions/" + encodeURIComponent(child.id);
      item.append(link, ` ${child.runStatus || "never run"}`);
      return item;
    });
    list.replaceChildren(...(items.length ? items : [el("li", "", "none")]));
  }

  async function refreshStatus() {
    refreshSubagents();
    const session = await keel.api("GET", base);
    if (session.ok) {
      $("run-status").textContent = session.data.run.status || "never run";
    }
    const state = await readModel();
    if (!state) return;
    $("run-attempts").textContent = String(state.attempts ?? 0);
    const outcome = state.status ? [state.status, state.stopReason].filter(Boolean).join(", ") : "—";
    $("run-outcome").textContent = outcome + (state.error ? ` (${JSON.stringify(state.error)})` : "");
    const unanswered = state.unansweredInputs || [];
    $("run-unanswered").textContent = unanswered.length
      ? unanswered.map((s) => "#" + s).join(", ") : "none";
  }

  async function send(event) {
    event.preventDefault();
    const form = $("composer");
    const text = $("message").value;
    if (!text.trim()) return;
    const delivery = form.querySelector("input[name=delivery]:checked").value;
    keel.show($("composer-error"), "");
    const result = await keel.api("POST", base + "/input",
      { text, delivery, requestId: keel.requestId() });
    if (!result.ok) { keel.show($("composer-error"), "Not sent: " + keel.problem(result)); return; }
    $("message").value = "";
    $("composer-status").textContent = `Sent as event #${result.data.seq} (${result.data.delivery ?? delivery}).`;
  }

  async function cancel() {
    keel.show($("composer-error"), "");
    const result = await keel.api("POST", base + "/cancel");
    if (!result.ok) { keel.show($("composer-error"), "Not cancelled: " + keel.problem(result)); return; }
    $("composer-status").textContent = "Cancel requested.";
    scheduleStatus();
  }

  async function forkAt(seq) {
    const result = await keel.api("POST", "/v1/sessions", { forkOf: sid, atSeq: seq });
    if (!result.ok) { keel.show($("composer-error"), "Not forked: " + keel.problem(result)); return; }
    window.location.assign("/console/sessions/" + encodeURIComponent(result.data.id));
  }

  $("composer").addEventListener("submit", send);
  $("cancel").addEventListener("click", cancel);
  if (root.dataset.external === "true") $("cancel").textContent = "Cancel the turn";
  connect(0);
  setInterval(() => { if (!document.hidden) refreshStatus(); }, 5000);
  refreshStatus();
})();
