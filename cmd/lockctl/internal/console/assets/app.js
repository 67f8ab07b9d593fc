// The page: it polls the lockctl ui server with short GETs (/api/poll) for
// the listing it shows, when it changed, and, with a detail view open, that
// name's new watch events. No request is held open, so that any number of
// tabs leave the browser's six connections per host free. Nothing here
// talks to anything but the server that served it.
"use strict";

(function () {
  var PAGE = 50;
  // RESTARTED is what the page says when the server no longer knows its
  // session (401).
  var RESTARTED = "lockctl ui was restarted: open the new URL it printed";
  var $ = function (id) { return document.getElementById(id); };
  var state = {
    view: "locks", snap: null, filter: "", page: 0,
    detail: null, // {kind, name, events: []}
    pending: null, // the lease the confirmation shows
    timer: null, // the next poll
    pollGen: 0, // numbers the polls: an answer to an older one is dropped
    lost: false, // the last poll failed
    reasonMax: 500, // the service's bound on a reason, in bytes (the server says)
  };

  // el makes an element with attributes and children (strings become text:
  // nothing from the service is ever parsed as HTML).
  function el(tag, attrs) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "on") Object.keys(attrs.on).forEach(function (ev) { e.addEventListener(ev, attrs.on[ev]); });
      else if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // time shows an instant in the browser's time zone, with UTC on hover.
  function time(iso) {
    if (!iso) return "–";
    var d = new Date(iso);
    var today = d.toDateString() === new Date().toDateString();
    var shown = today ? d.toLocaleTimeString(undefined, { hour12: false }) : d.toLocaleString(undefined, { hour12: false });
    return el("time", { datetime: d.toISOString(), title: "UTC " + d.toISOString().replace("T", " ").replace("Z", "") }, shown);
  }

  // expiry is an expiry with its countdown, updated every second.
  function expiry(lease) {
    return el("span", {}, time(lease.expires_at), " ",
      el("span", { class: "countdown", "data-expires": lease.expires_at }, lockui.countdown(lease.expires_at, Date.now())));
  }

  // delay is a lease's lock-delay and when the name is free if the lease
  // expires unreleased.
  function delay(lease) {
    if (!lease.lock_delay_seconds) return "none";
    return el("span", {}, lease.lock_delay_seconds + "s · free at ", time(new Date(lockui.freeAt(lease)).toISOString()));
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-expires]").forEach(function (e) {
      e.textContent = lockui.countdown(e.getAttribute("data-expires"), now);
      e.classList.toggle("expired", Date.parse(e.getAttribute("data-expires")) < now);
    });
    document.querySelectorAll("[data-since]").forEach(function (e) {
      e.textContent = "waiting " + lockui.duration(now - Date.parse(e.getAttribute("data-since")));
    });
  }

  function show(id, text) {
    var e = $(id);
    e.textContent = text || "";
    e.hidden = !text;
  }

  // problemText is a problem as the page says it: the service's title
  // first.
  function problemText(p) {
    return p.title + (p.detail ? " — " + p.detail : "") + " (" + p.status + ")";
  }

  // poll asks the server, now, for what changed since the page's last
  // answer, and polls again after the interval the server says.
  function poll() {
    clearTimeout(state.timer);
    var gen = ++state.pollGen;
    var q = "view=" + encodeURIComponent(state.view) + "&version=" + (state.snap ? state.snap.version : 0);
    var d = state.detail;
    if (d) q += "&watch=" + encodeURIComponent(d.name) + "&wkind=" + d.kind + "&wid=" + d.wid + "&wseq=" + d.seq;
    fetch("/api/poll?" + q, { cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) return { restarted: true };
        if (!r.ok) throw new Error(r.status);
        return r.json();
      })
      .then(function (j) {
        if (gen !== state.pollGen) return; // a newer poll is under way
        if (j.restarted) {
          // The session is gone: this lockctl ui stopped and another runs
          // on its port. Only its new URL opens a session.
          $("refresh").textContent = RESTARTED;
          return;
        }
        answer(j, d);
        state.timer = setTimeout(poll, j.poll_ms);
      })
      .catch(function () {
        if (gen !== state.pollGen) return;
        state.lost = true;
        $("refresh").textContent = "lost the lockctl ui server; reconnecting…";
        state.timer = setTimeout(poll, 2000);
      });
  }

  // answer takes in a poll's answer; d is the detail view it was asked
  // for.
  function answer(j, d) {
    state.reasonMax = j.reason_max_bytes || state.reasonMax;
    $("endpoint").textContent = "at " + j.endpoint + (j.prefix ? " (prefix " + j.prefix + ")" : "");
    var recovered = state.lost;
    state.lost = false;
    if (j.listing) state.snap = j.listing;
    if (j.listing || recovered && state.snap) {
      renderListing();
      if (state.detail) renderDetail();
    }
    if (j.watch && d && d === state.detail) {
      if (j.watch.id !== d.wid) { d.wid = j.watch.id; d.seq = 0; } // the watch was restarted: its events start again
      j.watch.events.forEach(function (e) { d.events.push(e); d.seq = e.seq; });
      if (j.watch.events.length) renderDetail();
    }
  }

  function rows() {
    if (!state.snap) return [];
    return state.snap[{ locks: "locks", semaphores: "permits", rwlocks: "rwlocks" }[state.view]] || [];
  }

  function renderListing() {
    var s = state.snap;
    $("refresh").textContent = "refreshed " + new Date(s.at).toLocaleTimeString(undefined, { hour12: false }) +
      ", next in " + lockui.duration(s.next_in_ms) + (s.truncated ? "; the listing is cut at " + rows().length + " rows" : "");
    show("notice", s.problem ? lockui.explain(state.view, s.problem) : "");
    var sem = state.view === "semaphores", rw = state.view === "rwlocks";
    var head = $("head");
    head.textContent = "";
    (rw ? ["Read/write lock", "Writer", "Readers", "Expires", "Waiting"] :
      (sem ? ["Semaphore", "Slot", "Permits"] : ["Lock", "Lock set"]).concat(["Owner", "Principal", "Token", "Acquired", "Expires", "Lock-delay", "Waiting"]))
      .forEach(function (h) { head.appendChild(el("th", { scope: "col" }, h)); });
    var all = lockui.filterRows(rows(), state.filter);
    var sets = lockui.setMembers(rows());
    var p = lockui.page(all, state.page, PAGE);
    state.page = p.n;
    // Redraw only what changed, so that a refresh neither moves the
    // keyboard focus nor replaces a control under the pointer.
    var key = JSON.stringify([state.view, p.rows, p.n, all.length]);
    if (key === state.listingKey) return;
    state.listingKey = key;
    var focused = document.activeElement && document.activeElement.getAttribute("data-key");
    var body = $("body");
    body.textContent = "";
    p.rows.forEach(function (r) {
      var name = lockui.rowName(r);
      if (rw) { body.appendChild(rwRow(r)); return; }
      var tr = el("tr", { "data-name": name, "data-token": r.fencing_token, "data-set": r.set_id || "" },
        el("td", {}, el("button", { type: "button", class: "link", "data-key": "open " + name + " " + r.fencing_token,
          on: { click: function () { openDetail(state.view, name); } } }, name)));
      if (sem) { tr.appendChild(el("td", { class: "num" }, r.slot)); tr.appendChild(el("td", { class: "num" }, r.permits)); }
      if (!sem) tr.appendChild(el("td", {}, setMark(r, sets)));
      tr.appendChild(el("td", {}, r.owner));
      tr.appendChild(el("td", {}, r.principal || "–"));
      tr.appendChild(el("td", { class: "num token" }, r.fencing_token));
      tr.appendChild(el("td", {}, time(r.acquired_at)));
      tr.appendChild(el("td", {}, expiry(r)));
      tr.appendChild(el("td", {}, delay(r)));
      tr.appendChild(el("td", { class: "num waiting" }, (r.queue || []).length));
      body.appendChild(tr);
    });
    $("empty").hidden = all.length > 0;
    $("pageinfo").textContent = all.length ? "rows " + p.first + "–" + p.last + " of " + all.length : "";
    $("prev").disabled = p.n === 0;
    $("next").disabled = p.n >= p.pages - 1;
    refocus(focused);
  }

  // rwRow is a read/write lock's row: its writer, readers with their
  // slots, earliest expiry and waiters with their kind (no detail view:
  // lockctl status and watch show one read/write lock).
  function rwRow(r) {
    var c = lockui.rwCells(r);
    return el("tr", { "data-name": r.name, "data-token": r.fencing_token },
      el("td", {}, r.name), el("td", { class: "writer" }, c.writer), el("td", { class: "readers" }, c.readers),
      el("td", {}, c.expires ? expiry({ expires_at: c.expires }) : "–"), el("td", { class: "waiting" }, c.waiting));
  }

  // setMark marks a row that is one lease of a lock set: the set's size in
  // the listing, its id and other names on hover; "–" for a lease of its
  // own.
  function setMark(r, sets) {
    if (!r.set_id) return "–";
    var names = sets[r.set_id] || [lockui.rowName(r)];
    return el("span", { class: "set", title: r.set_id + ": " + names.join(", ") }, "set of " + names.length);
  }

  // refocus gives the focus back to the redrawn control with data-key.
  function refocus(key) {
    if (!key) return;
    var again = document.querySelector('[data-key="' + CSS.escape(key) + '"]');
    if (again) again.focus();
  }

  // openDetail shows the detail view of name and watches it.
  function openDetail(kind, name) {
    state.detail = { kind: kind, name: name, events: [], wid: 0, seq: 0 };
    state.detailKey = null;
    $("detail").hidden = false;
    renderDetail();
    poll();
    $("detail").focus();
  }

  function closeDetail() {
    state.detail = null;
    $("detail").hidden = true;
    poll();
  }

  // listed is the listing's rows of the detail view's name, by token.
  function listed() {
    var by = {};
    if (!state.snap || state.snap.kind !== state.detail.kind) return by;
    rows().forEach(function (r) { if (lockui.rowName(r) === state.detail.name) by[r.fencing_token] = r; });
    return by;
  }

  function renderDetail() {
    var d = state.detail;
    $("detail-name").textContent = (d.kind === "locks" ? "Lock " : "Semaphore ") + d.name;
    var evs = d.events;
    var last = null;
    for (var i = evs.length - 1; i >= 0; i--) if (!evs[i].problem) { last = evs[i]; break; }
    var lastAll = evs[evs.length - 1];
    show("detail-problem", lastAll && lastAll.problem ? problemText(lastAll.problem) : "");
    var rowsBy = listed();
    var key = JSON.stringify([d.kind, d.name, evs.length, rowsBy]);
    if (key === state.detailKey) return;
    state.detailKey = key;
    var focused = document.activeElement && document.activeElement.getAttribute("data-key");
    var setLine = $("detail-set");
    setLine.textContent = "";
    var setIDs = {};
    Object.keys(rowsBy).forEach(function (t) { if (rowsBy[t].set_id) setIDs[rowsBy[t].set_id] = true; });
    var members = lockui.setMembers(rows());
    Object.keys(setIDs).forEach(function (id) {
      var others = (members[id] || []).filter(function (n) { return n !== d.name; });
      setLine.appendChild(el("span", { "data-set": id }, "Taken with lock set ", el("code", {}, id),
        others.length ? ", together with " + others.join(", ") : "", ". "));
    });
    setLine.hidden = !setLine.firstChild;
    var holders = $("detail-holders");
    holders.textContent = "";
    var queue = [];
    (last ? last.holders : []).forEach(function (h) {
      var r = rowsBy[h.fencing_token] || {};
      var lease = { kind: d.kind, name: d.name, slot: h.slot, owner: h.owner, fencing_token: h.fencing_token,
        expires_at: r.expires_at || h.expires_at, principal: r.principal,
        lock_delay_seconds: r.fencing_token ? r.lock_delay_seconds || 0 : undefined }; // unknown until listed
      (r.queue || []).forEach(function (q) { queue.push(q); });
      holders.appendChild(el("tr", { "data-token": h.fencing_token },
        el("td", { class: "num" }, h.slot === undefined ? "–" : h.slot),
        el("td", {}, h.owner), el("td", {}, r.principal || "–"),
        el("td", { class: "num token" }, h.fencing_token), el("td", {}, time(h.acquired_at)),
        el("td", {}, expiry(lease)), el("td", {}, r.fencing_token ? delay(r) : "–"),
        el("td", {}, el("button", { type: "button", class: "danger force", "data-key": "force " + h.fencing_token,
          on: { click: function () { confirmForce(lease); } } }, "Force release…"))));
    });
    if (!holders.firstChild) holders.appendChild(el("tr", {}, el("td", { colspan: 8, class: "muted" }, last ? "Nobody holds it." : "Watching…")));
    var ql = $("detail-queue");
    ql.textContent = "";
    queue.forEach(function (q) {
      ql.appendChild(el("li", {}, q.owner, q.principal ? " (" + q.principal + ")" : "", " — ",
        q.joined_at ? el("span", { "data-since": q.joined_at }, "waiting " + lockui.duration(Date.now() - Date.parse(q.joined_at))) : "waiting",
        ", place kept until ", time(q.until)));
    });
    if (!queue.length) ql.appendChild(el("li", { class: "muted" }, state.snap && state.snap.problem ? "unknown (the listing is refused)" : "nobody"));
    var tl = $("detail-timeline");
    tl.textContent = "";
    lockui.timeline(evs).forEach(function (s) {
      tl.appendChild(el("li", {}, s.owner, " (token " + s.token + (s.slot !== undefined ? ", slot " + s.slot : "") + "): ",
        time(s.from), " – ", s.to ? time(s.to) : "now"));
    });
    $("detail-skipped").textContent = "(" + lockui.skipped(evs) + " leases skipped: begun and ended between two answers)";
    var tb = $("detail-events");
    tb.textContent = "";
    evs.slice().reverse().forEach(function (e) {
      if (e.problem) { tb.appendChild(el("tr", {}, el("td", {}, time(e.at)), el("td", { colspan: 4 }, problemText(e.problem)))); return; }
      tb.appendChild(el("tr", {}, el("td", {}, time(e.at)), el("td", { class: "num" }, e.index),
        el("td", { class: "num" }, e.fencing_token),
        el("td", {}, e.holders.map(function (h) { return h.owner + " (" + h.fencing_token + ")"; }).join(", ") || "nobody"),
        el("td", { class: "num" }, e.skipped)));
    });
    refocus(focused);
  }

  // confirmForce opens the confirmation for lease.
  function confirmForce(lease) {
    state.pending = lease;
    var dl = $("confirm-lease");
    dl.textContent = "";
    [["Name", lease.name], lease.slot !== undefined ? ["Slot", lease.slot] : null, ["Owner", lease.owner],
      ["Principal", lease.principal || "–"], ["Fencing token", lease.fencing_token], ["Expires", expiry(lease)],
      ["Lock-delay", forceDelay(lease.lock_delay_seconds)]]
      .forEach(function (kv) { if (kv) { dl.appendChild(el("dt", {}, kv[0])); dl.appendChild(el("dd", {}, kv[1])); } });
    // Each confirmation starts from the default, whatever the last one chose:
    // ending a lease at once is a choice made for that lease.
    document.querySelector("input[name=delay][value=default]").checked = true;
    state.forceGen = (state.forceGen || 0) + 1; // an earlier confirmation's late answer no longer touches this one
    $("confirm-go").disabled = false;
    $("confirm-reason").value = "";
    checkReason();
    show("confirm-problem", "");
    $("confirm").showModal();
    $("confirm-reason").focus();
  }

  // forceDelay says what each choice of the confirmation does with a
  // lease's lock-delay of n seconds (undefined: not in the listing). A
  // force release counts the lock-delay from the release, not from the
  // lease's expiry.
  function forceDelay(n) {
    if (n === undefined) return "unknown (the name is not in this listing): default keeps the lease's lock-delay, whatever it is";
    if (!n) return "none: the name is free once the lease ends, either way";
    return n + "s: default frees the name " + n + "s after the release, immediate at once";
  }

  // checkReason holds the reason to the service's bound, in bytes of
  // UTF-8 (a character may take up to four), and says how much is used.
  function checkReason() {
    var r = $("confirm-reason"), n = lockui.utf8Bytes(r.value);
    r.setCustomValidity(n > state.reasonMax ? "The reason is " + n + " bytes of UTF-8; the service takes at most " + state.reasonMax + "." : "");
    $("confirm-reason-count").textContent = n + " of " + state.reasonMax + " bytes";
  }

  function submitForce(ev) {
    ev.preventDefault();
    var l = state.pending, gen = state.forceGen;
    // The answer belongs to this confirmation only while it is open and no
    // other was opened since; else it goes to the result line.
    var current = function () { return gen === state.forceGen && $("confirm").open; };
    var body = { kind: l.kind, name: l.name, slot: l.slot || 0, reason: $("confirm-reason").value,
      immediate: document.querySelector("input[name=delay]:checked").value === "immediate", fencing_token: l.fencing_token };
    $("confirm-go").disabled = true;
    fetch("/api/force-release", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
      .then(function (r) {
        if (r.status === 401) return { ok: false, j: { status: 401, title: RESTARTED } };
        return r.json().then(function (j) { return { ok: r.ok, j: j }; });
      })
      .then(function (res) {
        var mine = current();
        if (mine) $("confirm-go").disabled = false;
        if (!res.ok) {
          var p = res.j, text = problemText(p);
          if (p.current) text += ". Held now by " + p.current.owner + " with fencing token " + p.current.fencing_token +
            ": close this and check it before ending that one.";
          if (mine) show("confirm-problem", text);
          else show("result", "Force release of " + l.name + " (token " + l.fencing_token + ") refused: " + text);
          return;
        }
        if (mine) $("confirm").close();
        show("result", "Force released " + l.name + ": the lease of " + l.owner + " (token " + l.fencing_token + ") ended; " +
          (res.j.free_at ? "free at " + new Date(res.j.free_at).toLocaleTimeString(undefined, { hour12: false }) : "free now") + ".");
      })
      .catch(function (err) {
        var text = "lockctl ui did not answer: " + err;
        if (current()) { $("confirm-go").disabled = false; show("confirm-problem", text); }
        else show("result", "Force release of " + l.name + ": " + text);
      });
  }

  function setView(view) {
    state.view = view; state.page = 0; state.snap = null; state.listingKey = null;
    document.querySelectorAll("[role=tab]").forEach(function (t) { t.setAttribute("aria-selected", String(t.dataset.view === view)); });
    // A name's detail view is a lock's or a semaphore's: the read/write
    // locks' listing has none to look up.
    $("lookup-name").disabled = $("lookup-go").disabled = view === "rwlocks";
    $("body").textContent = "";
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[role=tab]").forEach(function (t) { t.addEventListener("click", function () { setView(t.dataset.view); }); });
    $("filter").addEventListener("input", function () { state.filter = $("filter").value; state.page = 0; if (state.snap) renderListing(); });
    $("prev").addEventListener("click", function () { state.page--; renderListing(); });
    $("next").addEventListener("click", function () { state.page++; renderListing(); });
    $("lookup").addEventListener("submit", function (ev) { ev.preventDefault(); openDetail(state.view, $("lookup-name").value); });
    $("detail-close").addEventListener("click", closeDetail);
    $("confirm-cancel").addEventListener("click", function () { $("confirm").close(); });
    $("confirm-form").addEventListener("submit", submitForce);
    $("confirm-reason").addEventListener("input", checkReason);
    setInterval(tick, 1000);
    poll();
  });
})();
