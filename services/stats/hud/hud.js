// relay HUD: draws each chart the server described in a
// <script type="application/json" class="hud-chart" data-canvas="ID"> block
// on the canvas with that id, with Chart.js (served from /hud/static).
"use strict";

const PALETTE = ["#1a7f37", "#cf222e", "#9a6700", "#0969da", "#8250df"];

function drawCharts() {
  for (const block of document.querySelectorAll("script.hud-chart")) {
    const canvas = document.getElementById(block.dataset.canvas);
    if (!canvas) continue;
    const spec = JSON.parse(block.textContent);
    new Chart(canvas, {
      type: spec.type,
      data: {
        labels: spec.labels,
        datasets: spec.datasets.map((d, i) => ({
          label: d.label,
          data: d.data,
          borderColor: PALETTE[i % PALETTE.length],
          backgroundColor: PALETTE[i % PALETTE.length],
          pointRadius: spec.labels.length > 40 ? 0 : 3,
          tension: 0.2,
        })),
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: { y: { beginAtZero: true, title: { display: true, text: spec.y_title } } },
      },
    });
    canvas.dataset.drawn = "1";
  }
}

document.addEventListener("DOMContentLoaded", drawCharts);
