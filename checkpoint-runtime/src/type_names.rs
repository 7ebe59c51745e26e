//! Type names as people read them.

/// `std::any::type_name` without module paths: `Vec<String>` for
/// `alloc::vec::Vec<alloc::string::String>`. Checkpoints store the full
/// name (that is what is compared on resume); messages and listings show
/// this one.
///
/// ```
/// use checkpoint_runtime::readable_type_name;
/// assert_eq!(readable_type_name("alloc::vec::Vec<alloc::string::String>"), "Vec<String>");
/// assert_eq!(
///     readable_type_name("(u32, core::option::Option<app::Approval>)"),
///     "(u32, Option<Approval>)"
/// );
/// assert_eq!(readable_type_name("[u8; 4]"), "[u8; 4]");
/// ```
pub fn readable_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment_start = 0;
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(segment_start);
        } else {
            out.push(c);
            if !(c.is_alphanumeric() || c == '_') {
                segment_start = out.len();
            }
        }
    }
    out
}

/// Two type names for a message: readable, unless that would make them
/// look alike (the same type name in two modules), then in full.
pub(crate) fn readable_pair(a: &str, b: &str) -> (String, String) {
    let (ra, rb) = (readable_type_name(a), readable_type_name(b));
    if ra == rb {
        (a.to_owned(), b.to_owned())
    } else {
        (ra, rb)
    }
}
