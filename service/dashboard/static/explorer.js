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
        cell(row, fmt(plan.epsilon), "num");
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

  async function load() {
    const epsilon = slider.value;
    const mine = ++seq;
    shown.textContent = epsilon;
    status.textContent = "planning at epsilon " + epsilon + "…";
    try {
      const resp = await fetch(
        "/admin/datasets/" + encodeURIComponent(dataset) + "/plans.json?epsilon=" + epsilon,
        { credentials: "same-origin" },
      );
      if (mine !== seq) return;  // a newer position answered first
      if (resp.status === 202) {
        status.textContent = "profiles are being computed; trying again…";
        timer = setTimeout(load, 1500);
        return;
      }
      if (!resp.ok) {
        status.textContent = "could not plan: HTTP " + resp.status;
        return;
      }
      render(await resp.json());
      status.textContent = "plans at epsilon " + epsilon;
      root.dataset.shownEpsilon = epsilon;
    } catch (err) {
      status.textContent = "could not plan: " + err;
    }
  }

  slider.addEventListener("input", function () {
    shown.textContent = slider.value;
    clearTimeout(timer);
    timer = setTimeout(load, 250);
  });
  load();
})();
