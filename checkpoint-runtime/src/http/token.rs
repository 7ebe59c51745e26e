//! The bearer token every API request carries, and the layer that checks it.

use std::sync::Arc;

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

/// The least strength [`Token::from_env_or_generate`] accepts from the
/// environment, in bits ([`Token::estimated_bits`]): 32 random hex digits.
pub const MIN_TOKEN_BITS: u32 = 128;

/// How long the answer to a wrong token waits, one wrong token at a time
/// across the server: at most 10 guesses a second, whatever the number of
/// connections (measured before: about 1,850 a second on one client).
const WRONG_TOKEN_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

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
    /// error, not a reason to generate one, and so is one weaker than
    /// [`MIN_TOKEN_BITS`] by [`Token::estimated_bits`].
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
            Ok(secret) => {
                let token =
                    Token::new(secret).map_err(|e| TokenError(format!("{TOKEN_ENV}: {e}")))?;
                let bits = token.estimated_bits();
                if bits < MIN_TOKEN_BITS {
                    return Err(TokenError(format!(
                        "{TOKEN_ENV}: the token is too weak to guard the API (about {bits} bits \
                         at most, {MIN_TOKEN_BITS} needed): use 32 or more random hex digits, \
                         such as `openssl rand -hex 32` prints, or leave it unset to have one \
                         generated"
                    )));
                }
                Ok((token, false))
            }
            Err(std::env::VarError::NotPresent) => Token::generate().map(|t| (t, true)),
            Err(std::env::VarError::NotUnicode(_)) => Err(TokenError(format!(
                "{TOKEN_ENV}: the token is not valid UTF-8"
            ))),
        }
    }

    /// An upper bound of the token's strength in bits, as if each character
    /// were drawn at random from the character classes it uses (lowercase
    /// 26, uppercase 26, digits 10, other printable ASCII 32; a hex string
    /// in one case counts 16): a 64-hex-digit generated token has 256. A
    /// word or a pattern is much weaker than this says; a short token is
    /// never stronger.
    ///
    /// ```
    /// use checkpoint_runtime::http::Token;
    /// assert_eq!(Token::generate().unwrap().estimated_bits(), 256);
    /// assert_eq!(Token::new("a").unwrap().estimated_bits(), 4);
    /// assert!(Token::new("from-the-environment").unwrap().estimated_bits() < 128);
    /// ```
    pub fn estimated_bits(&self) -> u32 {
        let b = self.0.as_bytes();
        let one_case_hex = b.iter().all(u8::is_ascii_hexdigit)
            && (b.iter().all(|c| !c.is_ascii_uppercase())
                || b.iter().all(|c| !c.is_ascii_lowercase()));
        let alphabet: u32 = if one_case_hex && !b.iter().all(u8::is_ascii_digit) {
            16
        } else {
            let uses = |class: fn(&u8) -> bool, size: u32| {
                if b.iter().any(class) {
                    size
                } else {
                    0
                }
            };
            uses(u8::is_ascii_lowercase, 26)
                + uses(u8::is_ascii_uppercase, 26)
                + uses(u8::is_ascii_digit, 10)
                + uses(u8::is_ascii_punctuation, 32)
        };
        // At most 512 characters: the product is far below u32::MAX.
        (b.len() as f64 * f64::from(alphabet.max(2)).log2()).floor() as u32
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

/// The token and the turn that answers to wrong tokens wait for.
#[derive(Clone)]
pub(crate) struct Gate {
    token: Token,
    wrong_turn: Arc<tokio::sync::Mutex<()>>,
}

impl Gate {
    pub(crate) fn new(token: Token) -> Gate {
        Gate {
            token,
            wrong_turn: Arc::default(),
        }
    }
}

/// The layer in front of every API route: a request without the token is
/// answered 401 and goes no further. A wrong token's answer waits its turn
/// behind every other wrong token's and then [`WRONG_TOKEN_DELAY`], so that
/// guessing is slow however many connections guess at once (connections are
/// bounded by [`super::ServeOptions::max_connections`], and each waits for
/// its answer before it can guess again).
pub(crate) async fn require(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    if gate.token.admits(request.headers()) {
        return next.run(request).await;
    }
    if request.headers().contains_key(header::AUTHORIZATION) {
        let _turn = gate.wrong_turn.lock().await;
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
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
