//! The web viewer's assets: served outside `/api/` with a strict policy and entity tags, behind
//! the trust fence but without a token, and never a path outside the compiled folder.

use apiproxy::{AccessConfig, ProxyConfig};
use hyper::StatusCode;

use crate::support::Server;

fn header<'a>(headers: &'a hyper::HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_modules_are_served_with_a_strict_policy() {
    let server = Server::start().await;
    let (status, headers, body) = server.raw("GET", "/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    let page = String::from_utf8(body.to_vec()).unwrap();
    // The page names its modules under this build's version, answered immutable.
    let start = page.find(r#"<script type="module" src="/v/"#).expect("the versioned module")
        + r#"<script type="module" src=""#.len();
    let app = &page[start..start + page[start..].find('"').unwrap()];
    assert!(app.starts_with("/v/") && app.ends_with("/js/app.js"), "{app}");
    let (status, versioned, module) = server.raw("GET", app, &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&versioned, "cache-control"), "public, max-age=31536000, immutable");
    assert!(String::from_utf8_lossy(&module).contains("import"));
    let policy = header(&headers, "content-security-policy");
    assert!(policy.contains("default-src 'self'") && policy.contains("script-src 'self'"), "{policy}");
    assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
    assert_eq!(header(&headers, "cache-control"), "no-cache");

    let (status, headers, body) = server.raw("GET", "/js/app.js", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/javascript; charset=utf-8");
    assert!(String::from_utf8_lossy(&body).contains("import"));
    let (status, headers, _) = server.raw("GET", "/app.css", &[], "").await;
    assert_eq!((status, header(&headers, "content-type")), (StatusCode::OK, "text/css; charset=utf-8"));

    let (status, headers, body) = server.raw("HEAD", "/index.html", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
    assert_eq!(header(&headers, "content-length"), page.len().to_string());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_asset_answers_not_modified() {
    let server = Server::start().await;
    let (_, headers, _) = server.raw("GET", "/js/live.js", &[], "").await;
    let etag = header(&headers, "etag").to_owned();
    assert!(etag.starts_with('"'), "{etag}");
    let (status, _, body) = server.raw("GET", "/js/live.js", &[("if-none-match", &etag)], "").await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    let (status, _, _) = server.raw("GET", "/js/live.js", &[("if-none-match", "\"other\"")], "").await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_compiled_assets_are_served() {
    let server = Server::start().await;
    for path in [
        "/nothing.js",
        "/js/",
        "/../Cargo.toml",
        "/js/%2e%2e/index.html",
        "/web/static/index.html",
        "/test/logic.test.js",
    ] {
        let (status, _, body) = server.raw("GET", path, &[], "").await;
        assert_eq!((status, &body[..]), (StatusCode::NOT_FOUND, &b"not found"[..]), "{path}");
    }
    let (status, _, _) = server.raw("POST", "/", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_needs_no_token_but_passes_the_trust_fence() {
    let access = AccessConfig { operator_tokens: vec!["op-token".to_owned()], ..AccessConfig::default() };
    let server = Server::start_with(ProxyConfig { access, ..ProxyConfig::default() }).await;
    let (status, _, _) = server.raw("GET", "/", &[], "").await;
    assert_eq!(status, StatusCode::OK, "the page holds no data");
    let (status, _, _) = server.raw("GET", "/", &[("host", "evil.example")], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = server.raw("GET", "/", &[("sec-fetch-site", "cross-site")], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let json = ("content-type", "application/json");
    let body = r#"{"type":"client-request","rpcId":"r","method":"session.list","payload":{}}"#;
    let (status, _, _) = server.raw("POST", "/api/session.list", &[json], body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the data still needs the token");
    server.stop().await;
}
