//! An ONNX file's `metadata_props`, read straight from its protobuf: the top-level fields are
//! walked and skipped by wire type, so the graph (almost all of the file) is never parsed.

/// `ModelProto.metadata_props` (field 14) holds `StringStringEntryProto { key = 1; value = 2 }`.
const METADATA_PROPS: u64 = 14;

/// The value under `key`, or None when the model has no such entry; Err names what was malformed.
pub fn metadata(bytes: &[u8], key: &str) -> Result<Option<String>, &'static str> {
    for field in Fields::new(bytes) {
        let (number, value) = field?;
        let Value::Bytes(entry) = value else { continue };
        if number != METADATA_PROPS {
            continue;
        }
        let (mut k, mut v) = (None, None);
        for f in Fields::new(entry) {
            match f? {
                (1, Value::Bytes(b)) => k = Some(b),
                (2, Value::Bytes(b)) => v = Some(b),
                _ => {}
            }
        }
        if k == Some(key.as_bytes()) {
            let text = std::str::from_utf8(v.unwrap_or_default())
                .map_err(|_| "metadata value is not UTF-8")?;
            return Ok(Some(text.to_string()));
        }
    }
    Ok(None)
}

enum Value<'a> {
    Int,
    Bytes(&'a [u8]),
}

/// The (field number, value) pairs of one protobuf message, in order.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.rest.split_first().ok_or("truncated varint")?;
            self.rest = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes")
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], &'static str> {
        let n = usize::try_from(n).map_err(|_| "field length out of range")?;
        if n > self.rest.len() {
            return Err("field runs past the end of the file");
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn field(&mut self) -> Result<(u64, Value<'a>), &'static str> {
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => self.varint().map(|_| Value::Int)?,
            1 => self.take(8).map(|_| Value::Int)?,
            2 => {
                let n = self.varint()?;
                Value::Bytes(self.take(n)?)
            }
            5 => self.take(4).map(|_| Value::Int)?,
            _ => return Err("unknown protobuf wire type"),
        };
        Ok((tag >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), &'static str>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let f = self.field();
        if f.is_err() {
            // A malformed field ends the walk: what follows cannot be framed.
            self.rest = &[];
        }
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes_field(number: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    fn entry(key: &str, value: &str) -> Vec<u8> {
        let mut e = vec![];
        bytes_field(1, key.as_bytes(), &mut e);
        bytes_field(2, value.as_bytes(), &mut e);
        e
    }

    #[test]
    fn finds_the_entry_among_other_fields() {
        let mut model = vec![];
        varint(1 << 3, &mut model); // ir_version = 8
        varint(8, &mut model);
        bytes_field(7, &[0xAB; 300], &mut model); // a graph, skipped whole
        bytes_field(14, &entry("shape", "[3,48,320]"), &mut model);
        bytes_field(14, &entry("character", "a\nb\nc"), &mut model);
        model.extend_from_slice(&[5 << 3 | 5, 1, 2, 3, 4]); // a fixed32 field
        assert_eq!(metadata(&model, "character"), Ok(Some("a\nb\nc".into())));
        assert_eq!(metadata(&model, "shape"), Ok(Some("[3,48,320]".into())));
        assert_eq!(metadata(&model, "absent"), Ok(None));
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_miss() {
        let mut model = vec![];
        bytes_field(14, &entry("character", "abc"), &mut model);
        model.truncate(model.len() - 2);
        assert_eq!(
            metadata(&model, "character"),
            Err("field runs past the end of the file")
        );
    }
}
