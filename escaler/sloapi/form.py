"""The SLO API's small HTML form at ``/``: list routes, view one, edit a bound.

One self-contained page (inline CSS and script, no external asset), served with a strict
Content-Security-Policy (``FORM_CSP``): it may only talk to its own origin. It calls the JSON API
itself (``GET /config``, ``GET``/``PUT /config/namespaces/{namespace}/{route}``), sending the
bearer token typed in the
token field when there is one; every value is inserted with ``textContent`` (never as HTML). A
refused edit shows the API's error message (``#message``, class ``error``).

Element ids (stable; the headless-browser test uses them): ``token``, ``refresh``, ``routes``
(a table; each row ``data-namespace`` and ``data-route``, a cell per column with its class —
``objective``, ``measured``, ``decision`` among them —, a ``button.view`` per row), ``detail``
(the route's JSON), ``bound-end`` (min | max), ``bound-type``, ``bound-value``, ``save-bound``,
``message``; beside the bound editor the read-only ``observed`` table: ``observed-objective``,
``observed-measured``, ``observed-decision``, ``observed-reason``, ``observed-ready``,
``observed-time``.

**What the engine observed** (issue 29): each route's ``observed`` (``escaler.sloapi.observed``:
the objectives in words, the values the last decision was computed from, the decision and its
``Ready`` condition, from the CR's status) is shown read-only, in the table and beside the editor:
"no status yet" for a route the engine has not written, "<signal> not measured" for a signal the
last decision lacked, the replicas with the ``Ready`` reason when it is not ``True`` (a held
decision). The table's ``data-loads`` counts the listings finished (the page lists once on load),
so a test knows when the rows it reads are the current ones.

The bound types offered follow the route shown (``allowedTypes``, the rules of
``escaler.sloapi.kinds``): an LLM route's ``replica`` and ``concurrency``, and ``pdengine`` only with
``deployType: pd``; a job route's min ``replica`` or ``concurrency`` and its max ``replica`` only.
The others are disabled (a type the server would refuse is never offered; issue 28 item 11).
"""

from __future__ import annotations

__all__ = ["FORM_CSP", "FORM_HTML"]

FORM_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")

FORM_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>escaler SLO API</title>
<style>
 body { font-family: sans-serif; margin: 2em; max-width: 60em; }
 table { border-collapse: collapse; margin: 1em 0; }
 td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
 pre { background: #f4f4f4; padding: 1em; }
 .side { display: flex; gap: 2em; align-items: flex-start; }
 #observed th { background: #f4f4f4; }
 #message.error { color: #b00020; }
 #message.ok { color: #1b5e20; }
</style>
</head>
<body>
<h1>SLO routes</h1>
<p><label>Bearer token (with --auth token):
 <input id="token" type="password" size="40" autocomplete="off"></label>
 <button id="refresh" type="button">List routes</button></p>
<table id="routes"><thead>
<tr><th>namespace</th><th>route</th><th>kind</th><th>high priority</th><th>bounds</th><th>objective</th>
<th>measured</th><th>decision</th><th></th></tr></thead>
<tbody></tbody></table>
<h2>Route <span id="current"></span></h2>
<div class="side">
<div><p><label>bound <select id="bound-end"><option>min</option><option>max</option></select></label>
 <label>type <select id="bound-type"><option>replica</option><option>concurrency</option>
 <option>pdengine</option></select></label>
 <label>value <input id="bound-value" type="number" value="1"></label>
 <button id="save-bound" type="button" disabled>Save bound</button></p></div>
<table id="observed" aria-label="observed by the decision engine (read-only)"><tbody>
<tr><th>objective</th><td id="observed-objective"></td></tr>
<tr><th>measured</th><td id="observed-measured"></td></tr>
<tr><th>decision</th><td id="observed-decision"></td></tr>
<tr><th>reason</th><td id="observed-reason"></td></tr>
<tr><th>ready</th><td id="observed-ready"></td></tr>
<tr><th>as of</th><td id="observed-time"></td></tr>
</tbody></table>
</div>
<p id="message" role="status"></p>
<pre id="detail"></pre>
<script>
"use strict";
let current = null;  // {namespace, route} of the route shown
let loads = 0;
function headers(extra) {
  const h = Object.assign({"Accept": "application/json"}, extra || {});
  const token = document.getElementById("token").value.trim();
  if (token) { h["Authorization"] = "Bearer " + token; }
  return h;
}
function say(text, ok) {
  const m = document.getElementById("message");
  m.textContent = text;
  m.className = ok ? "ok" : "error";
}
async function call(method, path, body) {
  const init = {method: method, headers: headers(body ? {"Content-Type": "application/json"} : {})};
  if (body) { init.body = JSON.stringify(body); }
  const resp = await fetch(path, init);
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error.code + ": " + data.error.message : "HTTP " + resp.status;
    throw new Error(msg);
  }
  return data;
}
function boundsText(b) {
  if (!b) { return "none"; }
  return b.min.type + " " + b.min.value + " .. " + b.max.type + " " + b.max.value;
}
// what the engine observed (the route's "observed", made by escaler.sloapi.observed), as text
function noStatus(o) { return o.decision === null && o.ready === null; }
function objectiveText(o) {
  return o.objectives.length ? o.objectives.map((x) => x.objective).join("; ") : "none";
}
function measuredText(o) {
  if (noStatus(o)) { return "no status yet"; }
  if (!o.objectives.length) { return "none"; }
  return o.objectives.map((x) => x.measured === null ? x.signal + " not measured" : x.measured).join("; ");
}
function decisionText(o) {
  if (noStatus(o)) { return "no status yet"; }
  if (o.decision === null) { return "no decision yet"; }
  const n = o.decision.replicas === null ? "?" : String(o.decision.replicas);
  const held = o.ready !== null && o.ready.status !== "True" ? " (" + o.ready.reason + ")" : "";
  return n + " replicas" + held;
}
function showObserved(o) {
  const text = {
    "observed-objective": objectiveText(o), "observed-measured": measuredText(o),
    "observed-decision": decisionText(o), "observed-reason": o.decision ? o.decision.reason : "",
    "observed-ready": o.ready ? o.ready.status + " " + o.ready.reason + ": " + o.ready.message : "",
    "observed-time": o.decision ? o.decision.time : "",
  };
  for (const id in text) { document.getElementById(id).textContent = text[id]; }
}
async function listRoutes() {
  try {
    const data = await call("GET", "/config");
    const body = document.querySelector("#routes tbody");
    body.replaceChildren();
    for (const r of data.routes) {
      const tr = document.createElement("tr");
      tr.dataset.namespace = r.namespace;
      tr.dataset.route = r.route;
      const o = r.observed;
      const cells = [["namespace", r.namespace], ["route", r.route], ["kind", r.kind],
                     ["priority", String(r.highPriority)], ["bounds", boundsText(r.bounds)],
                     ["objective", objectiveText(o)], ["measured", measuredText(o)],
                     ["decision", decisionText(o)]];
      for (const [name, v] of cells) {
        const td = document.createElement("td"); td.className = name; td.textContent = v; tr.appendChild(td);
      }
      const td = document.createElement("td");
      const b = document.createElement("button");
      b.type = "button"; b.className = "view"; b.textContent = "view";
      b.addEventListener("click", () => view(r.namespace, r.route));
      td.appendChild(b); tr.appendChild(td); body.appendChild(tr);
    }
    say(data.routes.length + " route(s)", true);
  } catch (e) { say(e.message, false); }
  loads += 1;
  document.getElementById("routes").dataset.loads = String(loads);
}
function allowedTypes(data, end) {
  if (data.kind === "job") { return end === "max" ? ["replica"] : ["replica", "concurrency"]; }
  return data.deployType === "pd" ? ["replica", "concurrency", "pdengine"] : ["replica", "concurrency"];
}
function offerTypes() {
  if (current === null) { return; }
  const end = document.getElementById("bound-end").value;
  const allowed = allowedTypes(current.data, end);
  const select = document.getElementById("bound-type");
  for (const option of select.options) { option.disabled = !allowed.includes(option.value); }
  if (!allowed.includes(select.value)) { select.value = allowed[0]; }
}
function routePath(namespace, route) {
  return "/config/namespaces/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(route);
}
async function view(namespace, route) {
  try {
    const data = await call("GET", routePath(namespace, route));
    current = {namespace: namespace, route: route, data: data};
    offerTypes();
    document.getElementById("current").textContent = namespace + "/" + route;
    document.getElementById("detail").textContent = JSON.stringify(data, null, 2);
    showObserved(data.observed);
    document.getElementById("save-bound").disabled = false;
    say("loaded " + route, true);
  } catch (e) { say(e.message, false); }
}
async function saveBound() {
  if (current === null) { return; }
  const end = document.getElementById("bound-end").value;
  const raw = document.getElementById("bound-value").value;
  const value = raw === "" ? null : Number(raw);
  const bound = {type: document.getElementById("bound-type").value, value: value};
  try {
    const data = await call("PUT", routePath(current.namespace, current.route), {bounds: {[end]: bound}});
    document.getElementById("detail").textContent = JSON.stringify(data, null, 2);
    showObserved(data.observed);
    say("saved bounds." + end + " of " + current.route, true);
    await listRoutes();
    say("saved bounds." + end + " of " + current.route, true);
  } catch (e) { say(e.message, false); }
}
document.getElementById("refresh").addEventListener("click", listRoutes);
document.getElementById("save-bound").addEventListener("click", saveBound);
document.getElementById("bound-end").addEventListener("change", offerTypes);
listRoutes();
</script>
</body>
</html>
"""
