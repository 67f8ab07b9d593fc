// The page's own logic, apart from the DOM: durations, free-at, filtering,
// paging and the holders' timeline. logic_test.cjs tests it under Node.
"use strict";

var lockui = (function () {
  // duration formats a non-negative number of milliseconds as "45s",
  // "3m 05s" or "2h 03m".
  function duration(ms) {
    var s = Math.floor(Math.max(0, ms) / 1000);
    if (s < 60) return s + "s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m " + String(s % 60).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h " + String(m % 60).padStart(2, "0") + "m";
  }

  // countdown says how far now is from the expiry: "in 12s", or "12s ago".
  function countdown(expiresAt, now) {
    var ms = Date.parse(expiresAt) - now;
    return ms >= 0 ? "in " + duration(ms) : duration(-ms) + " ago";
  }

  // freeAt is when others may take the name after the lease expires
  // unreleased: its expiry plus its lock-delay (milliseconds since the
  // epoch).
  function freeAt(lease) {
    return Date.parse(lease.expires_at) + 1000 * (lease.lock_delay_seconds || 0);
  }

  // rowName is a listing row's name: a lock's resource or a permit's
  // semaphore.
  function rowName(row) {
    return row.resource !== undefined ? row.resource : row.name;
  }

  // filterRows keeps the rows whose name starts with prefix, sorted by
  // name, then slot.
  function filterRows(rows, prefix) {
    return rows.filter(function (r) { return rowName(r).indexOf(prefix) === 0; })
      .sort(function (a, b) {
        var x = rowName(a), y = rowName(b);
        if (x !== y) return x < y ? -1 : 1;
        return (a.slot || 0) - (b.slot || 0);
      });
  }

  // page returns page number n (from 0, clamped) of rows, size rows each,
  // with the clamped number and the count of pages.
  function page(rows, n, size) {
    var pages = Math.max(1, Math.ceil(rows.length / size));
    n = Math.min(Math.max(0, n), pages - 1);
    return { rows: rows.slice(n * size, (n + 1) * size), n: n, pages: pages, first: n * size + 1, last: Math.min(rows.length, (n + 1) * size) };
  }

  // timeline turns watch events into holder spans, oldest first: owner,
  // token, slot, from (when first seen), to (when last seen gone; null while
  // held). A lease is one span however often it renews.
  function timeline(events) {
    var spans = [], open = {};
    events.forEach(function (e) {
      if (e.problem) return;
      var live = {};
      (e.holders || []).forEach(function (h) {
        live[h.fencing_token] = true;
        if (!open[h.fencing_token]) {
          open[h.fencing_token] = { owner: h.owner, token: h.fencing_token, slot: h.slot, from: e.at, to: null };
          spans.push(open[h.fencing_token]);
        }
      });
      Object.keys(open).forEach(function (t) {
        if (!live[t]) { open[t].to = e.at; delete open[t]; }
      });
    });
    return spans;
  }

  // setMembers groups the rows of lock sets: each set_id to its names in
  // the rows, sorted (a set's names are its leases, one row each).
  function setMembers(rows) {
    var sets = {};
    rows.forEach(function (r) {
      if (!r.set_id) return;
      (sets[r.set_id] = sets[r.set_id] || []).push(rowName(r));
    });
    Object.keys(sets).forEach(function (id) { sets[id].sort(); });
    return sets;
  }

  // rwCells are the cells of a read/write lock's row in the listing
  // (/admin/rwlocks): the writer ("owner (token T)", or "–"); the readers
  // by slot ("slot 3: owner (token T), ...", or "–"; a reader in slot 0
  // may come without its slot); the waiters in queue order with their kind
  // ("write w1, read r2", or "–"); and the earliest expiry of its leases
  // (null without a lease).
  function rwCells(l) {
    var lease = function (x) { return x.owner + " (token " + x.fencing_token + ")"; };
    var readers = (l.readers || []).slice().sort(function (a, b) { return (a.slot || 0) - (b.slot || 0); });
    var expires = null;
    (l.writer ? [l.writer] : []).concat(readers).forEach(function (x) {
      if (expires === null || Date.parse(x.expires_at) < Date.parse(expires)) expires = x.expires_at;
    });
    var queue = l.queue || [];
    return {
      writer: l.writer ? lease(l.writer) : "–",
      readers: readers.length ? readers.map(function (r) { return "slot " + (r.slot || 0) + ": " + lease(r); }).join(", ") : "–",
      waiting: queue.length ? queue.map(function (q) { return q.mode + " " + q.owner; }).join(", ") : "–",
      expires: expires,
    };
  }

  // skipped sums the leases the watch counted as begun and ended unseen.
  function skipped(events) {
    return events.reduce(function (n, e) { return n + (e.skipped || 0); }, 0);
  }

  // utf8Bytes is the length of s in bytes of UTF-8, which is how the
  // service bounds a reason (a character may take up to four).
  function utf8Bytes(s) {
    return new TextEncoder().encode(s).length;
  }

  // explain says why a listing failed, for the operator: the admin API's
  // refusals get an explanation, the rest their problem title.
  function explain(kind, p) {
    if (p.status === 403) {
      return "You are not an administrator of this service (" + p.title + "), so it will not list " + kind +
        ". Administrators are the identities in the stack's admins allowlist (-c admins=…). " +
        "You can still look up a name: type it under “Look up a name” for its status and its watch stream.";
    }
    if (p.status === 404) {
      return "This service has no admin API (" + p.status + " " + p.title + " on /admin/" + kind +
        "): it was deployed without -c admins, so it cannot list or force release. " +
        "You can still look up a name for its status and its watch stream.";
    }
    return "Listing " + kind + " failed: " + p.title + (p.detail ? " — " + p.detail : "") + " (" + p.status + ")";
  }

  return { duration: duration, countdown: countdown, freeAt: freeAt, rowName: rowName, filterRows: filterRows,
    page: page, timeline: timeline, setMembers: setMembers, rwCells: rwCells, skipped: skipped, utf8Bytes: utf8Bytes, explain: explain };
})();

if (typeof module !== "undefined") module.exports = lockui;
