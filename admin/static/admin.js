// wmoutbox admin: a checkbox with data-select-all="name" ticks or clears
// every checkbox of that name in its form. The pages work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    var boxes = function () {
      return all.form ? all.form.querySelectorAll('input[type=checkbox][name="' + all.dataset.selectAll + '"]') : [];
    };
    all.addEventListener("change", function () {
      boxes().forEach(function (b) { b.checked = all.checked; });
    });
  });
});
