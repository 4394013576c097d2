// The dashboard the monitor serves at / on --metrics-port: one self-contained HTML page (its
// script and styles inline, nothing fetched from elsewhere) that polls /api/history
// (actors/monitor/monitor_history.hpp) every second and draws, on <canvas>, the loss, tokens/s and
// memory of the recent log lines, each stage's time breakdown, and the pipeline timeline of
// the latest traced iterations (a row per stage, forwards blue, backwards green).
//
// For tests and scripts the page states what it drew: each chart's element carries
// data-points="N" (points or boxes drawn), #errors collects any script error
// (window.onerror, unhandled rejections, console.error) with data-count="N".
#pragma once

namespace troupe::actors {

// The page, UTF-8 HTML.
const char* dashboard_html();

}  // namespace troupe::actors
