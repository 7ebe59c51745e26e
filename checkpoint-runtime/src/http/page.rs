//! The web page: one HTML document, a script and a style sheet, shipped in
//! the crate (`page/`) and served as they are: no build step.
//!
//! They hold no data and no secret, so they are served without the token:
//! a browser cannot send an `Authorization` header when it opens a page.
//! The script asks for the token (a login form, or a `#token=` fragment,
//! which never reaches the server) and keeps it in `sessionStorage` for
//! the API requests it makes.

use axum::extract::OriginalUri;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");

/// What the page may load and where it may connect: itself only. No inline
/// script or style (the page builds every node with `textContent`, so run
/// data is never parsed as HTML); no frames, so it cannot be overlaid.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'self'; form-action 'self'; \
     frame-ancestors 'none'";

/// `GET /`: the document, with a `<base>` at the path it is served under
/// (`/` alone, or the prefix a user's app nests the router at), so that its
/// script, style sheet and API calls resolve there.
pub(crate) async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let base = if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    };
    let html = INDEX.replace("{{BASE}}", &escape_attribute(&base));
    with_type(html, "text/html; charset=utf-8", true)
}

/// `GET /app.js`.
pub(crate) async fn script() -> Response {
    with_type(SCRIPT.to_owned(), "text/javascript; charset=utf-8", false)
}

/// `GET /style.css`.
pub(crate) async fn style() -> Response {
    with_type(STYLE.to_owned(), "text/css; charset=utf-8", false)
}

fn with_type(body: String, content_type: &'static str, document: bool) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Embedded in the binary: a new build may change them, so always ask.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if document {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        );
    }
    response
}

/// `s` safe inside a double-quoted HTML attribute.
fn escape_attribute(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_escaped_and_the_document_has_its_slot() {
        assert_eq!(
            escape_attribute("/a\"b<c>&'"),
            "/a&quot;b&lt;c&gt;&amp;&#39;"
        );
        assert!(INDEX.contains("<base href=\"{{BASE}}\">"));
        // Relative references only: they resolve against the base.
        assert!(INDEX.contains("src=\"app.js\""));
        assert!(INDEX.contains("href=\"style.css\""));
        assert!(
            !SCRIPT.contains("innerHTML"),
            "the script builds nodes with textContent"
        );
    }
}
