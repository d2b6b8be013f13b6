//! The web viewer's static assets (`web/static/`), compiled into the binary and served outside
//! `/api/`: `GET`/`HEAD /` and `/index.html` answer the page, `/<path>` the file at that path.
//!
//! The page holds no data, so no token is asked for it; the Host/Origin trust fence applies as to
//! `/api`. Every answer carries a strict content security policy, `nosniff`, `no-referrer`,
//! `no-cache` and an `etag` (a hash of the bytes) that `If-None-Match` turns into 304.

use include_dir::{Dir, File, include_dir};
use sha2::{Digest, Sha256};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::Response,
};

/// The assets, read at compile time.
static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/web/static");

/// The content security policy of every asset: only this origin, no inline script or style.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The asset a `GET`/`HEAD` of `path` names, if there is one: `/` and `/index.html` are the page.
pub(crate) fn asset(method: &Method, path: &str) -> Option<&'static File<'static>> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let relative = match path.strip_prefix('/')? {
        "" => "index.html",
        other => other,
    };
    // Only plain relative paths: no empty, `.` or `..` segment reaches the lookup.
    if relative.split('/').any(|segment| segment.is_empty() || segment == "." || segment == "..") {
        return None;
    }
    ASSETS.get_file(relative)
}

/// The content type by extension; an unknown one is served as opaque bytes.
fn content_type(path: &std::path::Path) -> &'static str {
    match path.extension().and_then(|extension| extension.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// The strong entity tag of `bytes`: the first 16 bytes of their SHA-256, in hex, quoted.
fn etag(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether `If-None-Match` names `tag` (or is `*`); weak comparison, as RFC 9110 §13.1.2 asks.
fn not_modified(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag)
}

/// The security headers every viewer answer carries (the page, its files, and their 304s).
fn secure(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

/// The answer for `file` to a request with `headers` (a `HEAD` answer's body is dropped by the
/// connection, which keeps its length).
pub(crate) fn serve(file: &'static File<'static>, headers: &HeaderMap) -> Response {
    let bytes = file.contents();
    let tag = etag(bytes);
    let mut response = if not_modified(headers, &tag) {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = Response::new(Body::from(bytes));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(file.path())));
        response
    };
    secure(&mut response);
    // Invariant: the tag is a quoted run of hex digits, a valid header value.
    if let Ok(value) = HeaderValue::from_str(&tag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_assets() {
        assert!(asset(&Method::GET, "/").is_some_and(|file| file.path().ends_with("index.html")));
        assert!(asset(&Method::HEAD, "/index.html").is_some());
        assert!(asset(&Method::GET, "/js/app.js").is_some());
        assert!(asset(&Method::POST, "/").is_none());
        assert!(asset(&Method::GET, "/js/../index.html").is_none());
        assert!(asset(&Method::GET, "//index.html").is_none());
        assert!(asset(&Method::GET, "/js").is_none());
        assert!(asset(&Method::GET, "/missing.js").is_none());
    }

    #[test]
    fn if_none_match_lists_and_weak_tags_match() {
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\", W/\"abc\""));
        assert!(not_modified(&headers, "\"abc\""));
        assert!(!not_modified(&headers, "\"abd\""));
        assert!(!not_modified(&HeaderMap::new(), "\"abc\""));
    }
}
