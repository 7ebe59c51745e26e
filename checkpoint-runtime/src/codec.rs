//! How saved values become checkpoint bytes and back: postcard, appended to
//! a buffer the caller owns, with `Vec<u8>` written and read as a byte string
//! in one copy (serde would hand it over one byte at a time; postcard
//! encodes both alike).

use postcard::ser_flavors::Flavor;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A postcard flavor appending to a borrowed vector.
struct Append<'a>(&'a mut Vec<u8>);

impl Flavor for Append<'_> {
    type Output = ();

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    #[inline(always)]
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// A byte string, for `serialize_bytes`.
struct AsBytes<'a>(&'a [u8]);

impl Serialize for AsBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// Appends the postcard encoding of `value` to `buf`.
///
/// serde hands a `Vec<u8>` to the serializer one byte at a time (a call and
/// a capacity check per byte: most of a checkpoint's cost for a state of a
/// few KiB of bytes), so one is written here as a byte string, in one copy.
/// postcard encodes both alike (the length as a varint, then the bytes), so
/// the checkpoint is the same and loads back as a `Vec<u8>`.
pub(crate) fn encode_into<T: Serialize>(value: &T, buf: &mut Vec<u8>) -> postcard::Result<()> {
    match castaway::cast!(value, &Vec<u8>) {
        Ok(bytes) => postcard::serialize_with_flavor(&AsBytes(bytes), Append(buf)),
        Err(value) => postcard::serialize_with_flavor(value, Append(buf)),
    }
}

/// A byte string read back by [`decode`].
struct ByteBuf(Vec<u8>);

impl<'de> serde::Deserialize<'de> for ByteBuf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ByteBuf;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v))
            }
        }
        d.deserialize_byte_buf(Visitor)
    }
}

/// Decodes a value of type `T` from the front of `bytes` (postcard); returns
/// it and the bytes after it. A `Vec<u8>` is read as a byte string, in one
/// copy, the counterpart of [`encode_into`].
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> postcard::Result<(T, &[u8])> {
    let mut out: Option<T> = None;
    let rest = match castaway::cast!(&mut out, &mut Option<Vec<u8>>) {
        Ok(bytes_out) => {
            let (ByteBuf(v), rest) = postcard::take_from_bytes::<ByteBuf>(bytes)?;
            *bytes_out = Some(v);
            rest
        }
        Err(out) => {
            let (v, rest) = postcard::take_from_bytes::<T>(bytes)?;
            *out = Some(v);
            rest
        }
    };
    // Both arms above fill `out`.
    out.map(|value| (value, rest))
        .ok_or(postcard::Error::SerdeDeCustom)
}

/// Appends the postcard encoding of `value` to `buf` through serde's
/// generic path (for unsized values; [`encode_into`] for sized ones).
pub(crate) fn append<T: Serialize + ?Sized>(value: &T, buf: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, Append(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `decode` reads a `Vec<u8>` as a byte string: what serde's element by
    /// element encoding wrote comes back, with the bytes after it; a
    /// truncated one is an error, as it is for serde's path.
    #[test]
    fn byte_vectors_decode_as_serde_would() {
        for len in [0usize, 1, 127, 128, 300, 70_000] {
            let v: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let mut bytes = postcard::to_stdvec(&v).unwrap();
            bytes.extend_from_slice(&[9, 9]);
            let (back, rest) = decode::<Vec<u8>>(&bytes).unwrap();
            assert_eq!((back, rest), (v, &[9u8, 9][..]), "{len} bytes");
            if len > 0 {
                let cut = &bytes[..bytes.len() - 3];
                assert!(decode::<Vec<u8>>(cut).is_err(), "{len} bytes, truncated");
                assert!(postcard::take_from_bytes::<Vec<u8>>(cut).is_err());
            }
        }
        let other = (vec![1u8, 2], 7u32, String::from("x"));
        let bytes = postcard::to_stdvec(&other).unwrap();
        assert_eq!(
            decode::<(Vec<u8>, u32, String)>(&bytes).unwrap(),
            (other, &[][..])
        );
    }
}
