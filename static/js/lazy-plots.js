/* Charts below the fold wait their turn (issue 21: a long run's page interactive within 2 s).
   smrweb.js asks window.smrwebDefer(el) before drawing a [data-plot] element. A chart that was on the page
   when it loaded is handed to an IntersectionObserver instead: drawn at once if it is on (or within half a
   screen of) the viewport, else when the page is idle or when it scrolls near, whichever comes first.
   So the first screen's charts are drawn first, and the run page's metric chart, three screens down, no
   longer holds up the timeline, the polls and the first paint. Charts that arrive later (polled or swapped
   in) are drawn at once as before: deferring them would flash an empty chart for a frame. Loaded before
   smrweb.js (both deferred); without IntersectionObserver every chart is drawn at once. */
(function () {
  "use strict";
  if (!("IntersectionObserver" in window)) return;

  var initial = new WeakSet();
  document.querySelectorAll("[data-plot]").forEach(function (el) { initial.add(el); });
  var released = new WeakSet();
  var idle = window.requestIdleCallback || function (fn) { return setTimeout(fn, 50); };

  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) release(entry.target);
      else idle(function () { release(entry.target); }, { timeout: 2000 });
    });
  }, { rootMargin: "50% 0px" });

  function release(el) {
    if (released.has(el)) return;
    released.add(el);
    observer.unobserve(el);
    if (el.isConnected && window.smrweb) window.smrweb.renderPlots(el.parentNode);
  }

  window.smrwebDefer = function (el) {
    if (!initial.has(el) || released.has(el)) return false;
    observer.observe(el);  // observing twice is a no-op
    return true;
  };
})();
