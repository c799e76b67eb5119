//! The dashboard's first render on loopback, in Debian's headless Chromium (the tests' browser,
//! `corral_tests::browser`): a fresh load of `/` each pass, against `corral serve` with one tiny
//! fixture model and no keys. Per pass: the first contentful paint, DOMContentLoaded, the load
//! event, the moment the models table shows its first row (the page's first answer from the
//! API), and the bytes transferred (the page's own, and everything, the API's answers included).
//! Medians of the passes.
//!
//! ```text
//! cargo xtask cargo build --release --bins
//! cargo xtask cargo bench -p corral-tests --bench dashboard
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` sets the passes (default 9). Only 127.0.0.1 is contacted.

use std::time::Duration;

use corral_fixture::Arch;
use corral_tests::bench::{self, CorralServer};
use corral_tests::browser::Browser;
use serde_json::Value;

const PATIENCE: Duration = Duration::from_secs(300);

/// Waits for the models table's first row, then reports the page's timings and transfers.
const MEASURE: &str = r#"
const done = arguments[arguments.length - 1];
function check() {
  if (!document.querySelector('#models tr[data-model]')) { setTimeout(check, 2); return; }
  const shown = performance.now();
  const navigation = performance.getEntriesByType('navigation')[0];
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  const resources = performance.getEntriesByType('resource');
  const bytes = list => list.reduce((sum, entry) => sum + entry.transferSize, 0);
  done({
    first_paint_ms: paint ? paint.startTime : null,
    dom_content_loaded_ms: navigation.domContentLoadedEventEnd,
    load_ms: navigation.loadEventEnd,
    models_shown_ms: shown,
    page_bytes: navigation.transferSize + bytes(resources.filter(r => r.name.includes('/ui/'))),
    all_bytes: navigation.transferSize + bytes(resources),
  });
}
check();
"#;

const COLUMNS: [(&str, &str); 6] = [
    ("first_paint_ms", "first paint (ms)"),
    ("dom_content_loaded_ms", "DOMContentLoaded (ms)"),
    ("load_ms", "load (ms)"),
    ("models_shown_ms", "models shown (ms)"),
    ("page_bytes", "page (bytes)"),
    ("all_bytes", "with API answers (bytes)"),
];

fn main() {
    let passes = bench::iterations(9);
    let models = tempfile::tempdir().unwrap();
    let model = corral_tests::tiny_model(Arch::Llama);
    std::fs::rename(model.path(), models.path().join("llama")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let server = CorralServer::start(models.path(), state.path(), &[], PATIENCE);
    let page = Browser::open();
    // One load first, so that the browser and the server are both warm.
    page.goto(&server.url("/"));
    page.script_async(MEASURE);
    let samples: Vec<Value> = (0..passes)
        .map(|_| {
            page.goto(&server.url("/"));
            page.script_async(MEASURE)
        })
        .collect();
    println!("| dashboard, {passes} passes, median | value |");
    println!("|---|---|");
    for (key, label) in COLUMNS {
        let mut values: Vec<f64> = samples
            .iter()
            .filter_map(|sample| sample[key].as_f64())
            .collect();
        values.sort_by(f64::total_cmp);
        match values.get(values.len() / 2) {
            Some(median) => println!("| {label} | {median:.1} |"),
            None => println!("| {label} | not reported |"),
        }
    }
}
