// heddle's UI works without scripts; this only adds conveniences.
"use strict";
document.addEventListener("keydown", (e) => {
  // "/" focuses the page's search field, as on many sites.
  if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
  const field = document.querySelector("form[role=search] input[type=search]");
  if (field) { e.preventDefault(); field.focus(); }
});
// Times are printed in UTC; the local time is shown on hover.
for (const el of document.querySelectorAll("time[datetime]")) {
  const d = new Date(el.getAttribute("datetime"));
  if (!isNaN(d)) el.title = d.toLocaleString();
}
// Keep the selected call of a trace in view inside the tree's scroll box.
const current = document.querySelector(".tree-rows a[aria-current]");
if (current) current.scrollIntoView({ block: "nearest" });
