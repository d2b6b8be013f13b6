//! The web viewer's static assets: the page and its files with their headers, ETag revalidation,
//! unknown paths, the trust fence, and a token-protected gateway (the page needs no token, `/api` does).

use apiproxy::{AccessConfig, ProxyConfig};
use hyper::{StatusCode, header::HeaderMap};
use serde_json::json;

use crate::support::Server;

const CSP: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'";

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or_else(|| panic!("no {name} header: {headers:?}"))
}

fn assert_secure(headers: &HeaderMap) {
    assert_eq!(header(headers, "content-security-policy"), CSP);
    assert_eq!(header(headers, "x-content-type-options"), "nosniff");
    assert_eq!(header(headers, "referrer-policy"), "no-referrer");
    assert_eq!(header(headers, "cache-control"), "no-cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files() {
    let server = Server::start().await;
    let (status, headers, body) = server.raw("GET", "/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert_secure(&headers);
    let page = String::from_utf8(body.to_vec()).unwrap();
    assert!(page.to_ascii_lowercase().starts_with("<!doctype html>"), "{page}");
    assert!(page.contains(r#"<script type="module" src="/js/app.js">"#), "{page}");
    let etag = header(&headers, "etag").to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2, "{etag}");

    let (status, same_headers, same_body) = server.raw("GET", "/index.html", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(same_body, body);
    assert_eq!(header(&same_headers, "etag"), etag);

    let (status, headers, head_body) = server.raw("HEAD", "/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(head_body.is_empty());
    assert_eq!(header(&headers, "content-length"), body.len().to_string());
    assert_secure(&headers);

    let (status, headers, script) = server.raw("GET", "/js/app.js", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/javascript; charset=utf-8");
    assert_secure(&headers);
    assert!(!script.is_empty());
    let (status, headers, _) = server.raw("GET", "/app.css", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/css; charset=utf-8");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_none_match_answers_304() {
    let server = Server::start().await;
    let (_, headers, _) = server.raw("GET", "/js/app.js", &[], "").await;
    let etag = header(&headers, "etag").to_owned();
    let (status, headers, body) = server.raw("GET", "/js/app.js", &[("if-none-match", &etag)], "").await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(header(&headers, "etag"), etag);
    assert_secure(&headers);
    let (status, _, body) = server.raw("GET", "/js/app.js", &[("if-none-match", "\"stale\"")], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods_are_not_found() {
    let server = Server::start().await;
    for (method, path) in
        [("GET", "/missing.js"), ("GET", "/js"), ("GET", "/js/../index.html"), ("POST", "/"), ("DELETE", "/app.css")]
    {
        let (status, _, body) = server.raw(method, path, &[], "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(&body[..], b"not found", "{method} {path}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trust_fence_guards_the_page() {
    let server = Server::start().await;
    for headers in [
        vec![("host", "evil.example")],
        vec![("origin", "http://evil.example")],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        let (status, _, body) = server.raw("GET", "/", &headers, "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
        assert_eq!(&body[..], b"forbidden");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_protected_gateway_serves_the_page_but_not_the_api() {
    let access = AccessConfig { operator_tokens: vec!["op-token".to_owned()], ..AccessConfig::default() };
    let server = Server::start_with(ProxyConfig { access, ..ProxyConfig::default() }).await;
    let (status, _, body) = server.raw("GET", "/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    let (status, _, _) = server.raw("GET", "/js/app.js", &[], "").await;
    assert_eq!(status, StatusCode::OK);

    let describe =
        json!({"type": "client-request", "rpcId": "r", "method": "host.describe", "payload": {}}).to_string();
    let json = ("content-type", "application/json");
    let (status, _, _) = server.raw("POST", "/api/host.describe", &[json], describe.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) =
        server.raw("POST", "/api/host.describe", &[json, ("authorization", "Bearer op-token")], describe).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}
