// Live updates for the inbox pages: polls the page's `live` URL and reloads the page when what
// it shows has changed, unless the person is typing an answer. No libraries, nothing fetched
// from elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) return;
  var url = live.getAttribute("data-live");
  var seen = null;
  var editing = false;
  document.addEventListener("input", function () { editing = true; });
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        if (seen === null) seen = data.version;
        else if (data.version !== seen && !editing) { window.location.reload(); return; }
        setTimeout(poll, data.status === "busy" ? 500 : 1500);
      })
      .catch(function () { setTimeout(poll, 3000); });
  }
  poll();
})();
