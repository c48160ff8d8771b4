// The plan explorer: move the slider, see RS and LC plans at that target (dry runs).
(function () {
  "use strict";
  const root = document.getElementById("explorer");
  if (!root) return;
  const dataset = root.dataset.dataset;
  const slider = document.getElementById("target");
  const shown = document.getElementById("target-value");
  const status = document.getElementById("status");
  const body = document.querySelector("#plans tbody");
  const labels = {
    rs_rdp: "RS, RDP", rs_pld: "RS, PLD", lc_rdp: "LC, RDP", lc_pld: "LC, PLD",
  };
  let timer = null;
  let seq = 0;

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function fmt(x) {
    return x === null || x === undefined ? "" : Number(x).toPrecision(4);
  }

  function render(data) {
    body.replaceChildren();
    for (const key of Object.keys(labels)) {
      const plan = data.plans[key];
      const row = document.createElement("tr");
      row.dataset.plan = key;
      cell(row, labels[key]);
      if (!plan || plan.error) {
        cell(row, plan && plan.min_epsilon ? "min " + plan.min_epsilon : "");
        cell(row, "");
        const td = document.createElement("td");
        td.colSpan = 2;
        td.className = "error";
        td.textContent = plan ? plan.error : "no plan";
        row.appendChild(td);
      } else {
        cell(row, String(plan.epsilon), "num");  // rounded up by the server: shown as is
        cell(row, plan.objective + " " + fmt(plan.objective_value));
        const weights = Object.entries(plan.weights)
          .map(([id, w]) => (data.names[id] || id) + " " + Number(w).toFixed(3))
          .join(", ");
        cell(row, weights, "weights");
        cell(row, plan.bound);
      }
      body.appendChild(row);
    }
  }

  // seconds to wait before asking again, from a 202's Retry-After (at least 0.5 s)
  function retryAfter(resp) {
    const s = Number(resp.headers.get("Retry-After"));
    return 1000 * (Number.isFinite(s) && s > 0.5 ? Math.min(s, 10) : 1.5);
  }

  // the reason a failed answer gives (problem+json "detail"), else its status
  async function reason(resp) {
    try {
      const problem = await resp.json();
      if (problem && problem.detail) return problem.detail;
    } catch (err) {
      // not JSON: the status says enough
    }
    return "HTTP " + resp.status;
  }

  // a 202 says why: profiles still computed, or plans computed as a job
  async function pendingText(resp, what) {
    try {
      const body = await resp.json();
      const jobs = (body && body.jobs) || [];
      if (jobs.some((j) => j.kind === "plan")) {
        return what + " take longer than a request; computing them as a job…";
      }
    } catch (err) {
      // no body: fall through
    }
    return "profiles are being computed; trying again…";
  }

  async function load() {
    const epsilon = slider.value;
    const mine = ++seq;
    shown.textContent = epsilon;
    status.textContent = "planning at epsilon " + epsilon + "…";
    try {
      const resp = await fetch(
        "/admin/datasets/" + encodeURIComponent(dataset) + "/plans.json?epsilon=" + epsilon,
        { credentials: "same-origin", headers: { Accept: "application/json" } },
      );
      if (mine !== seq) return;  // a newer position answered first
      if (resp.status === 202) {
        const text = await pendingText(resp, "the plans at epsilon " + epsilon);
        if (mine !== seq) return;
        status.textContent = text;
        timer = setTimeout(load, retryAfter(resp));
        return;
      }
      if (resp.status === 429) {  // every plan process busy: ask again shortly
        status.textContent = "the plan processes are busy; trying again…";
        timer = setTimeout(load, retryAfter(resp));
        return;
      }
      if (!resp.ok) {
        const why = await reason(resp);
        if (mine === seq) status.textContent = "could not plan: " + why;
        return;
      }
      const data = await resp.json();
      if (mine !== seq) return;
      render(data);
      status.textContent = "plans at epsilon " + epsilon;
      root.dataset.shownEpsilon = epsilon;
    } catch (err) {
      if (mine === seq) status.textContent = "could not plan: " + err;
    }
  }

  // The frontier: fetched here and shown from a data: URL (the CSP allows images from
  // this origin and data: only), so a 202 while its plans compute is polled instead of
  // showing a broken image.
  const figure = document.getElementById("frontier");
  const figureStatus = document.getElementById("frontier-status");

  async function loadFrontier() {
    if (!figure) return;
    try {
      const resp = await fetch(figure.dataset.src, {
        credentials: "same-origin",
        headers: { Accept: "image/svg+xml, application/json" },
      });
      if (resp.status === 202) {
        figureStatus.textContent = await pendingText(resp, "the frontier's plans");
        setTimeout(loadFrontier, retryAfter(resp));
        return;
      }
      if (resp.status === 429) {
        figureStatus.textContent = "the plan processes are busy; trying again…";
        setTimeout(loadFrontier, retryAfter(resp));
        return;
      }
      if (!resp.ok) {
        figureStatus.textContent = "could not draw the frontier: " + (await reason(resp));
        return;
      }
      const svg = await resp.text();
      figure.addEventListener("load", function () {
        figure.hidden = false;
        figure.dataset.loaded = "1";
        figureStatus.textContent = "";
      }, { once: true });
      figure.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svg);
    } catch (err) {
      figureStatus.textContent = "could not draw the frontier: " + err;
    }
  }

  slider.addEventListener("input", function () {
    shown.textContent = slider.value;
    clearTimeout(timer);
    timer = setTimeout(load, 250);
  });
  load();
  loadFrontier();
})();
