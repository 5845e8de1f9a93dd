//! The live dashboard at `/`: one HTML page, its script and its style sheet.
//!
//! Why embedded, hand-written files: an operator opens the dashboard on the machine's own network,
//! often without internet access, so the page must need nothing but this server — no framework,
//! no CDN, no build step. The three files in `crates/http/assets/dashboard/` are compiled into
//! the binary with `include_str!`. The page polls `GET /api/v1/overview` once a second and draws
//! everything client-side: rates are differences of the counters between polls, charts are
//! canvas line charts of the last minute. With `?report=URL` the page also POSTs a summary of what
//! it rendered to `URL` after each refresh (the headless-browser test reads it).

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// The page.
const INDEX_HTML: &str = include_str!("../assets/dashboard/index.html");
/// Its script.
const APP_JS: &str = include_str!("../assets/dashboard/app.js");
/// Its style sheet.
const STYLE_CSS: &str = include_str!("../assets/dashboard/style.css");

/// `/`, `/dashboard/app.js` and `/dashboard/style.css`.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route(
            "/dashboard/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        assert!(INDEX_HTML.contains("/dashboard/app.js"));
        assert!(INDEX_HTML.contains("/dashboard/style.css"));
        for text in [INDEX_HTML, APP_JS, STYLE_CSS] {
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "no network at run time"
            );
        }
        assert!(APP_JS.contains("/api/v1/overview"));
    }
}
