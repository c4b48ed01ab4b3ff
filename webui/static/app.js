// rackd web UI: live updates (Server-Sent Events from /events), import
// progress and confirmations. Every page reads correctly without it.
(function () {
  "use strict";
  var TRANSIENT = { COMMISSIONING: true, DEPLOYING: true, RELEASING: true };

  function stateClass(s) { return "st-" + s.toLowerCase().replace(/_/g, "-"); }

  function setState(cell, state) {
    if (!cell) return;
    cell.textContent = state;
    cell.className = cell.className.split(" ").filter(function (c) {
      return c.indexOf("st-") !== 0 && c !== "transient";
    }).concat([stateClass(state)], TRANSIENT[state] ? ["transient"] : []).join(" ");
  }

  function fmtTime(iso) {
    var d = new Date(iso);
    if (isNaN(d)) return iso;
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function span(cls, text) {
    var s = document.createElement("span");
    s.className = cls;
    s.textContent = text;
    return s;
  }

  // eventItem builds a timeline entry with text nodes only: what the event
  // says is never parsed as HTML.
  function eventItem(e, link) {
    var li = document.createElement("li");
    li.dataset.seq = e.seq;
    var t = document.createElement("time");
    t.dateTime = e.time;
    t.textContent = fmtTime(e.time);
    li.appendChild(t);
    if (link) {
      li.appendChild(document.createTextNode(" "));
      var a = document.createElement("a");
      a.href = "/machines/" + encodeURIComponent(e.machine);
      a.textContent = link;
      li.appendChild(a);
    }
    li.appendChild(document.createTextNode(" "));
    li.appendChild(span("action", e.action));
    if (e.to) {
      li.appendChild(document.createTextNode(" "));
      li.appendChild(span("transition", (e.from || "") + " → " + e.to));
    }
    li.appendChild(document.createTextNode(" "));
    li.appendChild(span("actor", "by " + e.actor));
    if (e.reason) {
      li.appendChild(document.createTextNode(" "));
      li.appendChild(span("reason", e.reason));
    }
    return li;
  }

  function prepend(list, li, max) {
    var empty = list.querySelector(".empty");
    if (empty) empty.remove();
    list.insertBefore(li, list.firstChild);
    while (max && list.children.length > max) list.removeChild(list.lastChild);
  }

  function bump(state, by) {
    if (!state) return;
    var li = document.querySelector('#state-counts li[data-state="' + state + '"] .count');
    if (li) li.textContent = String(Math.max(0, parseInt(li.textContent, 10) + by));
  }

  function announce(text) {
    var live = document.getElementById("live");
    if (live) live.textContent = text;
  }

  function onMachine(e) {
    // Resuming after the page's mark may repeat an event the page was
    // rendered with: it is counted once.
    if (document.querySelector('#recent-events li[data-seq="' + e.seq + '"]')) return;
    var row = document.getElementById("machine-" + e.machine);
    var page = document.querySelector(".machine[data-machine]");
    if (e.to && e.from !== e.to) {
      if (row) {
        row.dataset.state = e.to;
        setState(row.querySelector(".state"), e.to);
      }
      bump(e.from, -1);
      bump(e.to, +1);
      var total = document.getElementById("total");
      if (total && (e.action === "create" || e.action === "delete")) {
        total.textContent = String(parseInt(total.textContent, 10) + (e.action === "create" ? 1 : -1));
      }
    }
    if (page && page.dataset.machine === e.machine) {
      var events = document.getElementById("events");
      if (events && !events.querySelector('li[data-seq="' + e.seq + '"]')) prepend(events, eventItem(e));
      if (e.to) {
        setState(document.getElementById("state"), e.to);
        var since = document.getElementById("state-since");
        if (since) since.textContent = fmtTime(e.time);
        announce("State: " + e.to);
      }
    }
    var recent = document.getElementById("recent-events");
    if (recent) {
      var name = e.machine;
      var known = document.querySelector('#recent-events a[href="/machines/' + e.machine + '"]');
      if (known) name = known.textContent;
      prepend(recent, eventItem(e, name), 20);
    }
  }

  // observedAfter is the power a request that ended done leaves behind.
  var observedAfter = { on: "on", off: "off", cycle: "on" };

  function onPower(p) {
    var seen = p.state === "done" ? observedAfter[p.action] : "";
    var listRow = document.getElementById("machine-" + p.machine);
    var cell = listRow && listRow.querySelector("td.power");
    if (cell && seen) {
      var desired = cell.textContent.split(" / ")[0];
      cell.textContent = desired + " / " + seen;
    }
    var observed = document.getElementById("power-observed");
    var page = document.querySelector(".machine[data-machine]");
    if (observed && seen && page && page.dataset.machine === p.machine) observed.textContent = seen;
    if (!page || page.dataset.machine !== p.machine) return;
    var table = document.querySelector("#power-requests tbody");
    if (!table) return;
    var row = document.getElementById("power-" + p.id);
    if (!row) {
      row = document.createElement("tr");
      row.id = "power-" + p.id;
      var cells = [p.id, p.action, p.state, "", "", "", p.error || ""];
      cells.forEach(function (c, i) {
        var td = document.createElement("td");
        if (i === 2) td.className = "pstate";
        td.textContent = c;
        row.appendChild(td);
      });
      var empty = table.querySelector("td[colspan]");
      if (empty) empty.parentNode.remove();
      table.insertBefore(row, table.firstChild);
    } else {
      var st = row.querySelector(".pstate");
      if (st) st.textContent = p.state;
      if (p.error) row.lastElementChild.textContent = p.error;
    }
    row.dataset.state = p.state;
    var failure = document.getElementById("power-failure");
    if (failure && (p.state === "failed" || p.state === "done")) {
      failure.hidden = p.state !== "failed";
      if (p.state === "failed") {
        failure.textContent = "The last power request (" + p.action + ", " + p.id + ") failed: " + (p.error || "no reason given");
        failure.setAttribute("role", "alert");
      } else {
        failure.textContent = "";
        failure.removeAttribute("role");
      }
    }
    announce("Power " + p.action + ": " + p.state + (p.error ? " (" + p.error + ")" : ""));
  }

  function live() {
    if (!document.body.dataset.csrf || !window.EventSource) return;
    // The stream resumes after the hub's mark the page was rendered with:
    // what changed in between is not lost.
    var since = document.body.dataset.since;
    var es = new EventSource("/events" + (since ? "?since=" + encodeURIComponent(since) : ""));
    es.addEventListener("stale", function () { es.close(); window.location.reload(); });
    // The session's right ended (token revoked or expired, user removed,
    // logout): back to the login.
    es.addEventListener("ended", function (m) {
      es.close();
      document.body.dataset.live = "ended";
      announce("Your session has ended: " + JSON.parse(m.data).reason);
      window.location.reload();
    });
    es.addEventListener("machine", function (m) { onMachine(JSON.parse(m.data)); });
    es.addEventListener("power", function (m) { onPower(JSON.parse(m.data)); });
    es.addEventListener("open", function () { document.body.dataset.live = "on"; });
    es.addEventListener("error", function () { document.body.dataset.live = "off"; });
  }

  // human is the pages' humanBytes: 1.4 MiB, 64 GiB.
  function human(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1).replace(/\.0$/, "") : String(n)) + " " + u[i];
  }

  // imports follows running image imports on the images page.
  function imports() {
    var table = document.getElementById("imports");
    if (!table || !table.querySelector('tr[data-state="running"]')) return;
    var timer = setInterval(function () {
      fetch("/images/imports", { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (jobs) {
          var running = false;
          jobs.forEach(function (j) {
            var row = document.getElementById("import-" + j.id);
            if (!row) return;
            row.dataset.state = j.state;
            var bar = row.querySelector("progress");
            if (bar) { bar.max = j.bytes_total || 1; bar.value = j.bytes_done; }
            var b = row.querySelector(".bytes");
            if (b) b.textContent = human(j.bytes_done) + " of " + human(j.bytes_total) +
              (j.bytes_total > 0 ? " (" + Math.round(100 * j.bytes_done / j.bytes_total) + "%)" : "");
            var st = row.querySelector(".istate");
            if (st) st.textContent = j.state + (j.error ? ": " + j.error : "");
            if (j.state === "running") running = true;
          });
          if (!running) { clearInterval(timer); announce("Imports finished: reload to see the images."); }
        })
        .catch(function () { clearInterval(timer); });
    }, 1000);
  }

  function confirms() {
    document.addEventListener("submit", function (ev) {
      var f = ev.target;
      if (f.classList && f.classList.contains("confirm") && !window.confirm(f.dataset.confirm || "Sure?")) {
        ev.preventDefault();
      }
    });
  }

  function selectAll() {
    var table = document.getElementById("machines");
    if (!table) return;
    var head = table.querySelector("thead th");
    if (!head) return;
    var box = document.createElement("input");
    box.type = "checkbox";
    box.id = "select-all";
    box.setAttribute("aria-label", "Select all machines on this page");
    box.addEventListener("change", function () {
      table.querySelectorAll('tbody input[type="checkbox"]').forEach(function (c) { c.checked = box.checked; });
    });
    head.appendChild(box);
  }

  // driverFields shows the power settings' fields of the driver chosen
  // only (without the script, all are shown, each under its driver's name).
  function driverFields() {
    var sel = document.getElementById("ps-driver");
    if (!sel) return;
    function show() {
      document.querySelectorAll("fieldset.driver-only").forEach(function (fs) {
        fs.hidden = fs.dataset.driver !== sel.value;
      });
    }
    sel.addEventListener("change", show);
    show();
  }

  document.addEventListener("DOMContentLoaded", function () {
    driverFields();
    live();
    imports();
    confirms();
    selectAll();
  });
})();
