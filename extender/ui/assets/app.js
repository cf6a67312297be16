// Rota's status page: fetches /ui/api/state and renders it. Plain DOM, no
// framework; text goes in through textContent only.
"use strict";

(function () {
  var REFRESH_MS = 5000;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function gib(mib) {
    var g = mib / 1024;
    return (g >= 10 ? g.toFixed(0) : g.toFixed(1)) + " GiB";
  }

  function duration(sec) {
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + "s";
    var m = Math.floor(sec / 60), s = sec % 60;
    if (m < 60) return m + "m" + (s ? " " + s + "s" : "");
    var h = Math.floor(m / 60);
    return h + "h " + (m % 60) + "m";
  }

  function gpuTitle(node, g) {
    var lines = [node.name + " GPU " + g.index + " (" + g.model + ")",
      gib(g.usedMiB) + " of " + gib(g.memoryMiB) + " used"];
    if (!g.healthy) lines.push("UNHEALTHY" + (g.reason ? ": " + g.reason : ""));
    (g.pods || []).forEach(function (p) {
      lines.push(p.pod + ": " + (p.whole ? "whole GPU" : gib(p.memoryMiB)) + ", " + p.state +
        (p.gang ? ", gang " + p.gang : ""));
    });
    if (!g.pods || g.pods.length === 0) lines.push("no pod");
    return lines.join("\n");
  }

  function renderTotals(st) {
    var t = st.totals;
    var box = document.getElementById("totals");
    box.textContent = "";
    [[t.nodes, "nodes"], [t.gpus, "GPUs"], [t.busy, "in use"], [t.unhealthy, "unhealthy"],
      [gib(t.usedMiB) + " / " + gib(t.memoryMiB), "memory"], [t.waiting, "waiting pods"]].forEach(function (kv) {
      var s = el("span", "stat");
      s.appendChild(el("b", null, String(kv[0])));
      s.appendChild(document.createTextNode(" " + kv[1]));
      box.appendChild(s);
    });
    document.getElementById("updated").textContent = "updated " + new Date(st.time).toLocaleTimeString();
  }

  function renderMap(st) {
    var map = document.getElementById("map");
    map.textContent = "";
    if (st.nodes.length === 0) {
      map.appendChild(el("p", "empty", "No GPU node in the ledger."));
      return;
    }
    st.nodes.forEach(function (n) {
      var row = el("div", "node");
      row.dataset.node = n.name;
      var label = el("div", "node-name", n.name);
      if (n.tiers && n.tiers.length) label.title = "tiers: " + n.tiers.join(", ");
      row.appendChild(label);
      var gpus = el("div", "gpus");
      n.gpus.forEach(function (g) {
        var cell = el("div", "gpu " + g.use);
        cell.dataset.gpu = n.name + "/" + g.index;
        cell.title = gpuTitle(n, g);
        if (g.use === "shared" && g.memoryMiB > 0) {
          var fill = el("div", "fill");
          fill.style.height = Math.min(100, Math.round(100 * g.usedMiB / g.memoryMiB)) + "%";
          cell.appendChild(fill);
        }
        cell.appendChild(el("span", "gpu-index", String(g.index)));
        var who = (g.pods || []).map(function (p) { return p.pod.split("/")[1]; }).join(", ");
        if (who) cell.appendChild(el("span", "gpu-pods", who));
        gpus.appendChild(cell);
      });
      row.appendChild(gpus);
      map.appendChild(row);
    });
  }

  function renderQueue(st) {
    var body = document.querySelector("#queue tbody");
    body.textContent = "";
    document.getElementById("queue-count").textContent = "(" + st.queue.length + ")";
    document.getElementById("queue-empty").hidden = st.queue.length > 0;
    document.getElementById("queue").hidden = st.queue.length === 0;
    st.queue.forEach(function (w) {
      var tr = el("tr");
      tr.dataset.pod = w.pod;
      var pod = el("td", "pod", w.pod);
      if (w.gang) pod.appendChild(el("span", "gang", "gang " + w.gang));
      tr.appendChild(pod);
      tr.appendChild(el("td", null, w.request));
      tr.appendChild(el("td", "wait", duration(w.waitingSeconds)));
      var r = el("td", "reason", w.reason);
      if (w.verb) r.title = w.verb + " " + w.outcome + " at " + new Date(w.reasonAt).toLocaleTimeString();
      tr.appendChild(r);
      body.appendChild(tr);
    });
  }

  function percent(x) {
    return (100 * x).toFixed(x > 0 && x < 0.1 ? 1 : 0) + "%";
  }

  // renderTeams shows the queue controller's view: per team, its admitted
  // use and its queued pods in queue order.
  function renderTeams(st) {
    var q = st.teamQueues;
    var section = document.getElementById("teams-section");
    section.hidden = !q;
    if (!q) return;
    var box = document.getElementById("teams");
    box.textContent = "";
    document.getElementById("teams-standby").hidden = q.leader;
    var queued = 0;
    q.teams.forEach(function (t) { queued += t.pods.length; });
    document.getElementById("teams-count").textContent = "(" + q.teams.length + " teams, " + queued + " pods queued)";
    renderGroups(q);
    if (q.leader && q.teams.length === 0) {
      box.appendChild(el("p", "empty", "No team has admitted or queued GPU pods."));
      return;
    }
    q.teams.forEach(function (t) {
      var div = el("div", "team");
      div.dataset.team = t.team;
      var head = el("div", "team-head");
      head.appendChild(el("b", "team-name", t.team || "(namespaces without a team label)"));
      if (t.group) head.appendChild(el("span", "team-group", "in group " + t.group));
      head.appendChild(el("span", "team-use", t.admittedGPUs + (t.admittedGPUs === 1 ? " GPU" : " GPUs") + " admitted" +
        (t.admittedGPUMemoryMiB ? " (" + gib(t.admittedGPUMemoryMiB) + ")" : "") +
        ", dominant share " + percent(t.dominantShare) + ", " + t.pods.length + " queued"));
      div.appendChild(head);
      if (t.pods.length > 0) {
        var table = el("table", "queue team-queue");
        var hr = el("tr");
        ["#", "Pod", "Waiting", "Waits for", "Where it stands"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
        var thead = el("thead");
        thead.appendChild(hr);
        table.appendChild(thead);
        var body = el("tbody");
        t.pods.forEach(function (p) {
          var tr = el("tr");
          tr.dataset.queuedPod = p.pod;
          tr.appendChild(el("td", "position", p.position + " of " + p.of));
          var pod = el("td", "pod", p.pod);
          if (p.workload && p.workload !== p.pod) pod.appendChild(el("span", "gang", p.workload));
          tr.appendChild(pod);
          tr.appendChild(el("td", "wait", duration(p.waitingSeconds)));
          tr.appendChild(el("td", "waits-for", p.reason));
          tr.appendChild(el("td", "reason", p.message));
          body.appendChild(tr);
        });
        table.appendChild(body);
        div.appendChild(table);
      }
      box.appendChild(div);
    });
  }

  // renderGroups shows the quota tree: per group, indented under its
  // parent, what its teams borrow past their guarantees and from where.
  function renderGroups(q) {
    var box = document.getElementById("groups");
    box.textContent = "";
    if (!q.groups || q.groups.length === 0) return;
    var table = el("table", "queue quota-groups");
    var hr = el("tr");
    ["Quota group", "Pool", "Borrowed", "From its pool", "From child groups", "From above", "Above limit", "Lent"].forEach(function (h) {
      hr.appendChild(el("th", null, h));
    });
    var thead = el("thead");
    thead.appendChild(hr);
    table.appendChild(thead);
    var body = el("tbody");
    q.groups.forEach(function (g) {
      var tr = el("tr");
      tr.dataset.group = g.group;
      var name = el("td", "group-name", g.group);
      name.style.paddingLeft = (0.3 + 1.2 * g.depth) + "em";
      tr.appendChild(name);
      [g.poolGPUs, g.borrowedGPUs, g.fromPoolGPUs, g.fromLentGPUs, g.aboveGPUs].forEach(function (n) {
        tr.appendChild(el("td", "num", n + (n === 1 ? " GPU" : " GPUs")));
      });
      tr.appendChild(el("td", "num", g.borrowLimitGPUs === undefined ? "none" : g.borrowLimitGPUs + " GPUs"));
      tr.appendChild(el("td", "num", g.lentGPUs + (g.lentGPUs === 1 ? " GPU" : " GPUs")));
      body.appendChild(tr);
    });
    table.appendChild(body);
    box.appendChild(table);
  }

  // renderPools compares the node pools side by side.
  function renderPools(st) {
    var section = document.getElementById("pools-section");
    section.hidden = !st.pools;
    if (!st.pools) return;
    var box = document.getElementById("pools");
    box.textContent = "";
    var table = el("table", "queue node-pools");
    var hr = el("tr");
    ["Node pool", "Owner", "Policy", "Nodes", "GPUs", "In use", "Allocation", "Fragmented", "Queued", "Longest wait"].forEach(function (h) {
      hr.appendChild(el("th", null, h));
    });
    var thead = el("thead");
    thead.appendChild(hr);
    table.appendChild(thead);
    var body = el("tbody");
    st.pools.forEach(function (p) {
      var tr = el("tr");
      tr.dataset.pool = p.pool;
      tr.appendChild(el("td", "pool-name", p.pool || "(nodes without a pool)"));
      tr.appendChild(el("td", null, p.owner || "-"));
      tr.appendChild(el("td", "pool-policy", p.policy));
      [p.nodes, p.gpus, p.busy].forEach(function (n) { tr.appendChild(el("td", "num", String(n))); });
      tr.appendChild(el("td", "num pool-allocation", percent(p.allocation)));
      tr.appendChild(el("td", "num", p.fragmentedGPUs + " GPUs"));
      tr.appendChild(el("td", "num", String(p.queued)));
      tr.appendChild(el("td", "num", p.queued ? duration(p.longestWaitSeconds) : "-"));
      body.appendChild(tr);
    });
    table.appendChild(body);
    box.appendChild(table);
  }

  function renderUsage(st) {
    document.getElementById("usage-note").textContent = st.usageNote;
    var box = document.getElementById("usage");
    box.textContent = "";
    if (st.namespaces.length === 0) {
      box.appendChild(el("p", "empty", "No GPU in use."));
      return;
    }
    var most = Math.max.apply(null, st.namespaces.map(function (n) { return n.gpus; }).concat([1]));
    st.namespaces.forEach(function (n) {
      var row = el("div", "bar-row");
      row.dataset.namespace = n.namespace;
      row.appendChild(el("span", "bar-label", n.namespace));
      var bar = el("span", "bar");
      var fill = el("span", "bar-fill");
      fill.style.width = Math.round(100 * n.gpus / most) + "%";
      bar.appendChild(fill);
      row.appendChild(bar);
      var txt = n.gpus + " GPUs (" + n.wholeGPUs + " whole, " + gib(n.memoryMiB) + ", " + n.pods + " pods)";
      if (n.waiting) txt += ", " + n.waiting + " waiting";
      row.appendChild(el("span", "bar-value", txt));
      box.appendChild(row);
    });
  }

  // renderFrag draws an SVG line chart; only numbers go into the markup.
  function renderFrag(st) {
    document.getElementById("frag-every").textContent = st.sampleEvery;
    var box = document.getElementById("frag");
    var s = st.fragmentation || [];
    if (s.length === 0) {
      box.textContent = "No sample yet.";
      return;
    }
    var W = 560, H = 180, L = 40, B = 20;
    var t0 = Date.parse(s[0].time), t1 = Date.parse(s[s.length - 1].time);
    var span = Math.max(t1 - t0, 1);
    var top = Math.max.apply(null, s.map(function (x) { return Math.max(x.fragmentedGPUs, x.freeGPUs); }).concat([1]));
    function x(v) { return (L + (W - L - 5) * (Date.parse(v.time) - t0) / span).toFixed(1); }
    function y(v) { return (H - B - (H - B - 10) * v / top).toFixed(1); }
    function line(key) {
      if (s.length === 1) return "M" + L + " " + y(s[0][key]) + " H" + (W - 5);
      return s.map(function (v, i) { return (i ? "L" : "M") + x(v) + " " + y(v[key]); }).join(" ");
    }
    var last = s[s.length - 1];
    var ago = t1 > t0 ? "-" + duration(span / 1000) : "now";
    box.innerHTML =
      '<svg class="chart" viewBox="0 0 ' + W + " " + H + '" role="img" aria-label="fragmentation over time">' +
      '<line class="axis" x1="' + L + '" y1="' + (H - B) + '" x2="' + W + '" y2="' + (H - B) + '"></line>' +
      '<line class="axis" x1="' + L + '" y1="10" x2="' + L + '" y2="' + (H - B) + '"></line>' +
      '<text class="tick" x="' + (L - 4) + '" y="14" text-anchor="end">' + Number(top.toFixed(1)) + "</text>" +
      '<text class="tick" x="' + (L - 4) + '" y="' + (H - B) + '" text-anchor="end">0</text>' +
      '<text class="tick" x="' + L + '" y="' + (H - 4) + '">' + ago + "</text>" +
      '<text class="tick" x="' + (W - 5) + '" y="' + (H - 4) + '" text-anchor="end">now</text>' +
      '<path class="free" d="' + line("freeGPUs") + '"></path>' +
      '<path class="fragmented" d="' + line("fragmentedGPUs") + '"></path>' +
      "</svg>";
    var legend = el("div", "chart-legend");
    legend.appendChild(el("span", "key fragmented", "fragmented: " + last.fragmentedGPUs + " GPUs"));
    legend.appendChild(el("span", "key free", "free: " + last.freeGPUs + " GPUs"));
    box.appendChild(legend);
  }

  function render(st) {
    renderTotals(st);
    renderMap(st);
    renderQueue(st);
    renderTeams(st);
    renderPools(st);
    renderUsage(st);
    renderFrag(st);
    document.getElementById("error").hidden = true;
  }

  function refresh() {
    fetch("/ui/api/state", { cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("state: HTTP " + r.status);
        return r.json();
      })
      .then(render)
      .catch(function (err) {
        var e = document.getElementById("error");
        e.textContent = "Cannot read the extender's state: " + err.message;
        e.hidden = false;
      });
  }

  refresh();
  setInterval(refresh, REFRESH_MS);
})();
