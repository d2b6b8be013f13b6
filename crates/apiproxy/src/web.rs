//! The web viewer's assets: `web/static/` compiled into the binary and served outside `/api/`.
//!
//! The page holds no data, so it is served without a token; the trust fence still applies (a
//! page answered to a rebinding host would run its scripts against this gateway). Every answer
//! carries a strict content security policy: the page loads only its own scripts and styles and
//! talks only to its own origin, so nothing is fetched from outside and it works offline.
//!
//! Caching: the page (`/`, `/index.html`) is revalidated on every load (`no-cache` with an entity
//! tag), and names its styles and modules under `/v/<version>/`, where the version is a hash of
//! every asset of this build. Those answers are `immutable`: a reload asks the gateway for the
//! page and its data only, and a new build's page names new URLs. A module's relative imports
//! resolve under the same prefix. The unversioned paths still answer, revalidated each time.

use std::{collections::HashMap, hash::Hasher, sync::LazyLock};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use include_dir::{Dir, include_dir};

static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/web/static");

/// The policy every asset is served with: own origin only, no inline script or style.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Each asset's entity tag, a hash of its bytes computed once.
static ETAGS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    let mut tags = HashMap::new();
    collect_etags(&ASSETS, &mut tags);
    tags
});

fn collect_etags(dir: &'static Dir<'static>, tags: &mut HashMap<&'static str, String>) {
    for file in dir.files() {
        if let Some(path) = file.path().to_str() {
            let mut hasher = std::hash::DefaultHasher::new();
            hasher.write(file.contents());
            tags.insert(path, format!("\"{:016x}-{:x}\"", hasher.finish(), file.contents().len()));
        }
    }
    for sub in dir.dirs() {
        collect_etags(sub, tags);
    }
}

/// This build's asset version: a hash of every asset's path and entity tag.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let mut tags: Vec<(&str, &String)> = ETAGS.iter().map(|(path, tag)| (*path, tag)).collect();
    tags.sort();
    let mut hasher = std::hash::DefaultHasher::new();
    for (path, tag) in tags {
        hasher.write(path.as_bytes());
        hasher.write(tag.as_bytes());
    }
    format!("{:016x}", hasher.finish())
});

/// The page as served: every `"/<asset>"` it names rewritten to `"/v/<version>/<asset>"`.
static PAGE: LazyLock<(Vec<u8>, String)> = LazyLock::new(|| {
    // Invariant: the page is part of the compiled folder.
    let file = ASSETS.get_file("index.html").expect("web/static holds index.html");
    let mut page = String::from_utf8_lossy(file.contents()).into_owned();
    let mut names: Vec<&str> = ETAGS.keys().copied().filter(|name| *name != "index.html").collect();
    // Longer names first, so no name is rewritten inside a longer one.
    names.sort_by_key(|name| std::cmp::Reverse(name.len()));
    for name in names {
        page = page.replace(&format!("\"/{name}\""), &format!("\"/v/{}/{name}\"", *VERSION));
    }
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(page.as_bytes());
    let etag = format!("\"{:016x}-{:x}\"", hasher.finish(), page.len());
    (page.into_bytes(), etag)
});

/// The content type of an asset, by its extension.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// How an answer may be cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caching {
    /// Revalidated on every use.
    Revalidate,
    /// A versioned URL of this build: never changes.
    Immutable,
}

/// The asset at a request path outside `/api/`, if there is one: `/` is the page itself, and
/// `/v/<version>/<path>` is `<path>` (immutable when the version is this build's).
fn asset(path: &str) -> Option<(&'static str, &'static [u8], Caching)> {
    if let Some(rest) = path.strip_prefix("/v/") {
        let (version, rest) = rest.split_once('/')?;
        let caching = if version == VERSION.as_str() { Caching::Immutable } else { Caching::Revalidate };
        let (name, contents, _) = asset(&format!("/{rest}")).filter(|(name, _, _)| *name != "index.html")?;
        return Some((name, contents, caching));
    }
    let relative = match path {
        "/" => "index.html",
        other => other.strip_prefix('/')?,
    };
    // Only plain relative paths name assets; include_dir's lookup never leaves the folder, but a
    // `..` or an empty segment is refused outright rather than normalized.
    if relative.split('/').any(|segment| segment.is_empty() || segment == "." || segment == "..") {
        return None;
    }
    let file = ASSETS.get_file(relative)?;
    Some((file.path().to_str()?, file.contents(), Caching::Revalidate))
}

/// Answers `GET` or `HEAD` of an asset, or `None` when `path` names none (the caller answers 404).
pub(crate) fn serve(method: &Method, path: &str, headers: &HeaderMap) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let (name, contents, caching) = asset(path)?;
    let (contents, etag): (&[u8], &str) =
        if name == "index.html" { (&PAGE.0, &PAGE.1) } else { (contents, ETAGS.get(name)?) };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Body::empty())
    } else if method == Method::HEAD {
        (StatusCode::OK, Body::empty())
    } else {
        (StatusCode::OK, Body::from(contents))
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
    if !fresh {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(contents.len()));
    }
    if let Ok(tag) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, tag);
    }
    let cache_control = match caching {
        Caching::Revalidate => "no-cache",
        Caching::Immutable => "public, max-age=31536000, immutable",
    };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_page_and_paths_never_leave_the_folder() {
        assert_eq!(asset("/").map(|(name, _, _)| name), Some("index.html"));
        assert_eq!(
            asset("/js/app.js").map(|(name, _, caching)| (name, caching)),
            Some(("js/app.js", Caching::Revalidate))
        );
        let versioned = format!("/v/{}/js/app.js", *VERSION);
        assert_eq!(
            asset(&versioned).map(|(name, _, caching)| (name, caching)),
            Some(("js/app.js", Caching::Immutable))
        );
        assert_eq!(asset("/v/0123/js/app.js").map(|(_, _, caching)| caching), Some(Caching::Revalidate));
        let page = format!("/v/{}/index.html", *VERSION);
        for path in ["/../Cargo.toml", "/js/../index.html", "//index.html", "/js/", "/missing.js", "index.html", &page]
        {
            assert!(asset(path).is_none(), "{path} must name no asset");
        }
        let traversal = format!("/v/{}/../Cargo.toml", *VERSION);
        assert!(asset(&traversal).is_none());
    }

    #[test]
    fn the_page_names_every_style_and_module_under_this_builds_version() {
        let page = String::from_utf8(PAGE.0.clone()).unwrap();
        let prefix = format!("/v/{}/", *VERSION);
        assert!(page.contains(&format!(r#"<script type="module" src="{prefix}js/app.js"></script>"#)), "{page}");
        assert!(page.contains(&format!(r#"href="{prefix}app.css""#)), "{page}");
        assert!(page.contains(&format!(r#"href="{prefix}js/rpc.js""#)), "{page}");
        assert!(!page.contains(r#"src="/js/"#) && !page.contains(r#"href="/js/"#), "{page}");
        assert!(page.contains(r##"href="#/""##), "in-page links are left alone");
    }

    #[test]
    fn every_asset_has_a_known_content_type() {
        for (name, _) in ETAGS.iter() {
            assert_ne!(content_type(name), "application/octet-stream", "{name} has no content type");
        }
    }
}
