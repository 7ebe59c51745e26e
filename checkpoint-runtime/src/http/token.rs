//! The bearer token every API request carries, and the layer that checks it.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The environment variable [`Token::from_env_or_generate`] reads.
///
/// ```
/// assert_eq!(checkpoint_runtime::http::TOKEN_ENV, "CHECKPOINT_TOKEN");
/// ```
pub const TOKEN_ENV: &str = "CHECKPOINT_TOKEN";

/// How many random bytes a generated token has (it is printed as twice as
/// many hex digits).
const GENERATED_BYTES: usize = 32;

/// The secret that every request to the API must carry as
/// `Authorization: Bearer TOKEN`. Compared in constant time; its `Debug`
/// form never shows it.
///
/// ```
/// use checkpoint_runtime::http::Token;
///
/// let token = Token::new("s3cret-token").unwrap();
/// assert_eq!(token.as_str(), "s3cret-token");
/// assert_eq!(format!("{token:?}"), "Token(..)");
/// assert!(Token::new("").is_err());
/// assert!(Token::new("has space").is_err());
/// assert_eq!(Token::generate().unwrap().as_str().len(), 64);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why a token was refused ([`Token::new`]) or could not be made
/// ([`Token::generate`]).
///
/// ```
/// let e = checkpoint_runtime::http::Token::new("").unwrap_err();
/// assert_eq!(e.to_string(), "the token is empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(String);

impl Token {
    /// A token from `secret`: non-empty, printable ASCII without spaces (it
    /// travels in a header), at most 512 bytes.
    ///
    /// ```
    /// use checkpoint_runtime::http::Token;
    /// assert!(Token::new("0123abcd").is_ok());
    /// assert!(Token::new("tab\there").is_err());
    /// assert!(Token::new("x".repeat(513)).is_err());
    /// ```
    pub fn new(secret: impl Into<String>) -> Result<Token, TokenError> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err(TokenError("the token is empty".to_owned()));
        }
        if secret.len() > 512 {
            return Err(TokenError("the token is longer than 512 bytes".to_owned()));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError(
                "the token may only hold printable ASCII characters without spaces".to_owned(),
            ));
        }
        Ok(Token(secret))
    }

    /// A fresh random token: 32 bytes from the operating system's generator,
    /// as 64 hex digits.
    ///
    /// ```
    /// let token = checkpoint_runtime::http::Token::generate().unwrap();
    /// assert!(token.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
    /// ```
    pub fn generate() -> Result<Token, TokenError> {
        let mut bytes = [0u8; GENERATED_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| TokenError(format!("cannot generate a token: {e}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Token(hex))
    }

    /// The token in `CHECKPOINT_TOKEN` if it is set (`generated` is then
    /// `false`), else [`Token::generate`]d (`true`: show it to the user,
    /// who has no other way to learn it). A set but invalid value is an
    /// error, not a reason to generate one.
    ///
    /// ```
    /// # fn main() -> Result<(), checkpoint_runtime::http::TokenError> {
    /// let (token, generated) = checkpoint_runtime::http::Token::from_env_or_generate()?;
    /// if generated {
    ///     println!("token: {}", token.as_str());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn from_env_or_generate() -> Result<(Token, bool), TokenError> {
        match std::env::var(TOKEN_ENV) {
            Ok(secret) => Token::new(secret)
                .map(|t| (t, false))
                .map_err(|e| TokenError(format!("{TOKEN_ENV}: {e}"))),
            Err(std::env::VarError::NotPresent) => Token::generate().map(|t| (t, true)),
            Err(std::env::VarError::NotUnicode(_)) => Err(TokenError(format!(
                "{TOKEN_ENV}: the token is not valid UTF-8"
            ))),
        }
    }

    /// The secret itself (to print it, or to send it as a client).
    ///
    /// ```
    /// let token = checkpoint_runtime::http::Token::new("abc").unwrap();
    /// assert_eq!(format!("Bearer {}", token.as_str()), "Bearer abc");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `headers` carry this token as `Authorization: Bearer TOKEN`
    /// (the scheme in any case, RFC 7235), compared in constant time.
    pub(crate) fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let value = value.as_bytes();
        let Some((scheme, given)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(given.ct_eq(self.0.as_bytes()))
    }
}

/// The layer in front of every API route: a request without the token is
/// answered 401 and goes no further.
pub(crate) async fn require(State(token): State<Token>, request: Request, next: Next) -> Response {
    if token.admits(request.headers()) {
        return next.run(request).await;
    }
    let missing = !request.headers().contains_key(header::AUTHORIZATION);
    let message = if missing {
        "this API needs the server's token: send `Authorization: Bearer TOKEN` (the token \
         `checkpoint serve` printed at start, or its CHECKPOINT_TOKEN)"
    } else {
        "wrong token: the `Authorization: Bearer TOKEN` header does not carry the server's token"
    };
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
        .detail("missing", missing)
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"checkpoint\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn only_the_exact_token_is_admitted() {
        let token = Token::new("abc123").unwrap();
        assert!(token.admits(&headers("Bearer abc123")));
        assert!(token.admits(&headers("bearer abc123")));
        assert!(!token.admits(&headers("Bearer abc12")));
        assert!(!token.admits(&headers("Bearer abc1234")));
        assert!(!token.admits(&headers("Bearer  abc123")));
        assert!(!token.admits(&headers("Basic abc123")));
        assert!(!token.admits(&headers("abc123")));
        assert!(!token.admits(&HeaderMap::new()));
    }

    #[test]
    fn generated_tokens_differ() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_ne!(a, b);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
