//! The AWS CLI's input syntax: the shorthand tree, JSON with byte positions, Python's
//! number reading, `file://` parameters, and the shorthand rendering of scalars and rows.

use std::fmt;

use super::model::*;

// ---------------------------------------------------------------------------------------------
// The shorthand syntax: a generic value tree
// ---------------------------------------------------------------------------------------------

/// A syntax or content error in a shorthand string, with the byte offset it is about.
/// `Display` shows the message, the position, and the input line with a caret under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShorthandError {
    /// Byte offset into `input` (at most `input.len()`, which means "at the end").
    pub pos: usize,
    pub message: String,
    pub input: String,
}

impl ShorthandError {
    pub(super) fn new(input: &str, pos: usize, message: impl Into<String>) -> Self {
        ShorthandError {
            pos: pos.min(input.len()),
            message: message.into(),
            input: input.to_string(),
        }
    }

    /// The 1-based line and column (counted in characters) of `pos`.
    pub fn line_and_column(&self) -> (usize, usize) {
        let pos = self.char_boundary();
        let before = &self.input[..pos];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    fn char_boundary(&self) -> usize {
        let mut pos = self.pos.min(self.input.len());
        while !self.input.is_char_boundary(pos) {
            pos -= 1;
        }
        pos
    }
}

impl fmt::Display for ShorthandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pos = self.char_boundary();
        let (line_no, column) = self.line_and_column();
        let line_start = self.input[..pos].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.input[pos..]
            .find('\n')
            .map_or(self.input.len(), |i| pos + i);
        let line = self.input[line_start..line_end].trim_end_matches('\r');
        let pad: String = self.input[line_start..pos]
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        if self.input.contains('\n') {
            write!(
                f,
                "{} (at byte {}, line {line_no}, column {column})",
                self.message, self.pos
            )?;
        } else {
            write!(
                f,
                "{} (at byte {}, column {column})",
                self.message, self.pos
            )?;
        }
        write!(f, "\n  {line}\n  {pad}^")
    }
}

impl std::error::Error for ShorthandError {}

/// A value in the shorthand syntax, with the byte offset where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct ShorthandNode {
    pub pos: usize,
    pub value: ShorthandValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ShorthandValue {
    /// A bare or quoted value (quotes removed, surrounding blanks of a bare value trimmed).
    Scalar(String),
    /// A JSON scalar: typed, as the AWS CLI passes JSON through (`"2"` is a string, `2` a
    /// number; a number is only a number).
    Json(JsonScalar),
    /// `[a,b,...]`.
    List(Vec<ShorthandNode>),
    /// `{Key=Value,...}`, keys unique, in input order.
    Struct(Vec<ShorthandField>),
}

/// A JSON scalar as written.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonScalar {
    Str(String),
    /// The number's text, as written.
    Num(String),
    Bool(bool),
    Null,
}

/// `Key=Value` inside a structure (or at the top level).
#[derive(Clone, Debug, PartialEq)]
pub struct ShorthandField {
    pub key: String,
    pub key_pos: usize,
    pub value: ShorthandNode,
}

/// Nesting deeper than this is refused (it would only be a mistake, and it bounds recursion).
pub(super) const MAX_DEPTH: usize = 32;

/// Parses AWS CLI shorthand as the AWS CLI's own shorthand parser reads it: `Key=Value` pairs
/// separated by commas; a value is a structure `{Key=Value,...}` (a key given twice keeps its
/// last value; a trailing comma is allowed), a list `[v,...]`, a quoted string (`"..."` or
/// `'...'`, backslash escapes the quote and itself), or a bare value (`\,` is a comma in it;
/// trailing blanks dropped; possibly empty). At the top level `Key=a,b` is the list `[a, b]`
/// unless an item is followed by `=` (the next key). Keys are letters, digits and `-_.#/:`;
/// top-level keys are unique.
pub fn parse_shorthand_tree(s: &str) -> Result<Vec<ShorthandField>, ShorthandError> {
    let mut p = Parser {
        src: s,
        pos: 0,
        depth: 0,
    };
    p.parameter()
}

/// What reads `Key@=file://PATH` (and `fileb://`) values: the text of the file, or why not.
pub type ParamFileReader = fn(&str) -> Result<String, String>;

pub(super) static PARAM_FILES: std::sync::OnceLock<ParamFileReader> = std::sync::OnceLock::new();

/// Lets `Key@=file://PATH` values be read, as the AWS CLI reads them, with `reader`. The
/// command line sets it; servers never do, so the cluster reads no file a request names.
pub fn read_param_files_with(reader: ParamFileReader) {
    let _ = PARAM_FILES.set(reader);
}

pub(super) struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

/// Reads an argument that takes a structure as the AWS CLI does: JSON when it starts with `{`
/// (after blanks), else shorthand. (`file://` is read by the command line before this.)
pub fn parse_structure(s: &str) -> Result<Vec<ShorthandField>, ShorthandError> {
    let t = s.trim_start();
    if t.starts_with('{') {
        let mut p = JsonParser {
            src: s,
            pos: s.len() - t.len(),
            depth: 0,
        };
        let node = p.value()?;
        p.skip_blanks();
        if p.pos < s.len() {
            return Err(ShorthandError::new(
                s,
                p.pos,
                "unexpected text after the JSON object",
            ));
        }
        match node.value {
            ShorthandValue::Struct(f) => Ok(f),
            _ => unreachable!("a value starting with '{{' is an object"),
        }
    } else if t.starts_with('[') {
        Err(ShorthandError::new(
            s,
            s.len() - t.len(),
            "expected a structure: a JSON object {...} or Key=Value shorthand, found a list",
        ))
    } else {
        parse_shorthand_tree(s)
    }
}

/// A JSON reader that keeps each value's byte offset, so errors point into the argument as
/// they do for shorthand.
pub(super) struct JsonParser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

impl JsonParser<'_> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
        ShorthandError::new(self.src, pos, format!("invalid JSON: {}", msg.into()))
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn found(&self) -> String {
        describe(self.src.get(self.pos..).and_then(|r| r.chars().next()))
    }

    /// Steps into an object or list that starts at `start`, within the depth limit.
    fn open(&mut self, start: usize) -> Result<(), ShorthandError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(start, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        self.pos += 1;
        Ok(())
    }

    /// After an item of `what`: a ',' (another item follows: false) or `close` (true).
    fn closes(&mut self, close: u8, what: &str) -> Result<bool, ShorthandError> {
        self.skip_blanks();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.err(
                self.pos,
                format!(
                    "expected ',' or '{}' in {what}, found {}",
                    close as char,
                    self.found()
                ),
            )),
        }
    }

    fn value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        self.skip_blanks();
        let start = self.pos;
        let value = match self.peek() {
            Some(b'{') => {
                self.open(start)?;
                let mut fields: Vec<ShorthandField> = Vec::new();
                self.skip_blanks();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                } else {
                    loop {
                        self.skip_blanks();
                        let key_pos = self.pos;
                        if self.peek() != Some(b'"') {
                            return Err(self.err(
                                self.pos,
                                format!(
                                    "expected a \"key\" in double quotes, found {}",
                                    self.found()
                                ),
                            ));
                        }
                        let key = self.string()?;
                        if let Some(prev) = fields.iter().find(|f| f.key == key) {
                            return Err(self.err(
                                key_pos,
                                format!("duplicate key \"{key}\" (first given at byte {}); give each key once", prev.key_pos),
                            ));
                        }
                        self.skip_blanks();
                        if self.peek() != Some(b':') {
                            return Err(self.err(
                                self.pos,
                                format!("expected ':' after key \"{key}\", found {}", self.found()),
                            ));
                        }
                        self.pos += 1;
                        let value = self.value()?;
                        fields.push(ShorthandField {
                            key,
                            key_pos,
                            value,
                        });
                        if self.closes(b'}', "an object")? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                ShorthandValue::Struct(fields)
            }
            Some(b'[') => {
                self.open(start)?;
                let mut items = Vec::new();
                self.skip_blanks();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        items.push(self.value()?);
                        if self.closes(b']', "a list")? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                ShorthandValue::List(items)
            }
            Some(b'"') => ShorthandValue::Json(JsonScalar::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => {
                let rest = &self.src[self.pos..];
                let len = rest
                    .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                    .unwrap_or(rest.len());
                let text = &rest[..len];
                if !json_number(text) {
                    return Err(self.err(start, format!("{text:?} is not a JSON number")));
                }
                self.pos += len;
                ShorthandValue::Json(JsonScalar::Num(text.to_string()))
            }
            _ => {
                let rest = &self.src[self.pos..];
                let (v, len) = if rest.starts_with("true") {
                    (JsonScalar::Bool(true), 4)
                } else if rest.starts_with("false") {
                    (JsonScalar::Bool(false), 5)
                } else if rest.starts_with("null") {
                    (JsonScalar::Null, 4)
                } else {
                    return Err(
                        self.err(start, format!("expected a value, found {}", self.found()))
                    );
                };
                self.pos += len;
                ShorthandValue::Json(v)
            }
        };
        Ok(ShorthandNode { pos: start, value })
    }

    fn string(&mut self) -> Result<String, ShorthandError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.src.get(self.pos..).and_then(|r| r.chars().next()) else {
                return Err(self.err(start, "a string is not closed with '\"'"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.err(start, "a string is not closed with '\"'"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hex = self.src.get(self.pos..self.pos + 4).unwrap_or("");
                            let code = u32::from_str_radix(hex, 16)
                                .map_err(|_| self.err(self.pos - 2, "\\u needs four hex digits"))?;
                            self.pos += 4;
                            // A lone surrogate half is kept as the replacement character.
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        _ => return Err(self.err(self.pos - 2, "unknown escape in a string")),
                    }
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.err(
                        self.pos - 1,
                        "a control character in a string must be escaped",
                    ))
                }
                c => out.push(c),
            }
        }
    }
}

/// JSON's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
pub(super) fn json_number(t: &str) -> bool {
    let b = t.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let s = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > s
    };
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// Where each run of ten Unicode decimal digits (category Nd) starts: Python's `int()` and
/// `float()` read any of them as the ASCII digit of the same value ("٣" is 3, "１_０" is 10).
/// Unicode 14.0, as Python 3.11's `unicodedata` has it (66 runs, 660 digits).
pub(super) const DIGIT_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

/// `s` with the blanks around it stripped (Unicode's White_Space, as `int()` and `float()`
/// strip them; not the ASCII separators `\x1c` to `\x1f` that `str.isspace()` also counts)
/// and every Unicode decimal digit made ASCII; other characters are kept as they are (and
/// refused by the callers).
pub(super) fn python_number_text(s: &str) -> std::borrow::Cow<'_, str> {
    let t = s.trim();
    if t.is_ascii() {
        return t.into();
    }
    t.chars()
        .map(|c| {
            let cp = c as u32;
            let zero = DIGIT_ZEROS.partition_point(|z| *z <= cp).checked_sub(1);
            match zero.map(|i| cp - DIGIT_ZEROS[i]) {
                Some(d @ 0..=9) => char::from(b'0' + d as u8),
                _ => c,
            }
        })
        .collect::<String>()
        .into()
}

/// A number's text without its sign (`-` or `+`), and whether it was `-`.
pub(super) fn split_sign(t: &str) -> (bool, &str) {
    match t.strip_prefix('-') {
        Some(body) => (true, body),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    }
}

/// A whole number as the AWS CLI reads a shorthand integer (Python's `int()`): blanks around,
/// an optional sign, digits (of any script) with single `_` between them.
pub fn python_int(s: &str) -> Option<i128> {
    let text = python_number_text(s);
    let (neg, body) = split_sign(&text);
    if !python_digits(body) {
        return None;
    }
    let v: i128 = body.replace('_', "").parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Digits with single `_` between them (Python's numeric literals).
pub(super) fn python_digits(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// A number as the AWS CLI reads a shorthand float (Python's `float()`): blanks around, a
/// sign, digits (of any script) with an optional point and exponent (`1e1`, `.5`, `5.`,
/// `1_000`), or `inf`, `infinity` and `nan` in any case.
pub fn python_float(s: &str) -> Option<f64> {
    let text = python_number_text(s);
    let (neg, body) = split_sign(&text);
    let lower = body.to_ascii_lowercase();
    let v = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if lower == "nan" {
        f64::NAN
    } else {
        let (mantissa, exp) = match lower.split_once('e') {
            Some((m, e)) => (m, Some(e)),
            None => (lower.as_str(), None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let int_ok = int.is_empty() || python_digits(int);
        let frac_ok = frac.is_empty() || python_digits(frac);
        if !int_ok || !frac_ok || (int.is_empty() && frac.is_empty()) {
            return None;
        }
        if let Some(e) = exp {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !python_digits(e) {
                return None;
            }
        }
        lower.replace('_', "").parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

pub(super) fn describe(c: Option<char>) -> String {
    match c {
        None => "the end of the input".into(),
        Some(c) => format!("{c:?}"),
    }
}

impl Parser<'_> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ShorthandError {
        ShorthandError::new(self.src, pos, msg)
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn peek_char(&self) -> Option<char> {
        self.src.get(self.pos..).and_then(|r| r.chars().next())
    }

    fn at_eof(&self) -> bool {
        self.pos >= self.src.len()
    }

    /// Python's `string.whitespace`, which the AWS CLI skips around `=` and `,`.
    fn skip_blanks(&mut self) {
        while matches!(
            self.peek(),
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
        ) {
            self.pos += 1;
        }
    }

    fn enter(&mut self) -> Result<(), ShorthandError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(
                self.pos,
                format!("structures and lists are nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        Ok(())
    }

    /// `Key@=`: the `@` (consumed) that makes `file://` values the files' text.
    fn at_sign(&mut self) -> bool {
        if self.peek() == Some(b'@') {
            self.pos += 1;
            self.skip_blanks();
            true
        } else {
            false
        }
    }

    /// The value of a `Key@=`: each scalar `file://PATH` or `fileb://PATH` in it (or in its
    /// lists) becomes that file's text; other scalars stay as written, as in the AWS CLI.
    /// (Keys of a structure inside take their own `=` or `@=`.)
    fn read_files(&self, node: &mut ShorthandNode) -> Result<(), ShorthandError> {
        match &mut node.value {
            ShorthandValue::Scalar(v) if v.starts_with("file://") || v.starts_with("fileb://") => {
                let Some(read) = PARAM_FILES.get() else {
                    return Err(self.err(
                        node.pos,
                        "Key@=file://... is read by the allot command line only",
                    ));
                };
                *v = read(v).map_err(|e| self.err(node.pos, e))?;
                Ok(())
            }
            ShorthandValue::List(items) => {
                for i in items {
                    self.read_files(i)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `char` must come next (after blanks when `blanks`).
    fn expect(&mut self, c: u8, blanks: bool, what: &str) -> Result<(), ShorthandError> {
        if blanks {
            self.skip_blanks();
        }
        if self.peek() != Some(c) {
            return Err(self.err(
                self.pos,
                format!(
                    "expected '{}' {what}, found {}",
                    c as char,
                    describe(self.peek_char())
                ),
            ));
        }
        self.pos += 1;
        if blanks {
            self.skip_blanks();
        }
        Ok(())
    }

    /// The top level: `Key=Value` pairs separated by commas, each key once.
    fn parameter(&mut self) -> Result<Vec<ShorthandField>, ShorthandError> {
        let mut fields: Vec<ShorthandField> = Vec::new();
        loop {
            let field = self.keyval(fields.is_empty())?;
            if let Some(prev) = fields.iter().find(|f| f.key == field.key) {
                return Err(self.err(
                    field.key_pos,
                    format!(
                        "duplicate key \"{}\" (first given at byte {}); give each key once (often a ',' where a space was meant)",
                        field.key, prev.key_pos
                    ),
                ));
            }
            fields.push(field);
            // Blanks at the very end are ignored (a file's last newline). The AWS CLI refuses
            // them after a list or structure; allot does not.
            if self.src[self.pos..]
                .trim_start_matches(is_python_blank)
                .is_empty()
            {
                return Ok(fields);
            }
            let key = &fields[fields.len() - 1].key;
            self.expect(b',', true, &format!("after the value of key \"{key}\""))?;
        }
    }

    /// `Key=Value` (the value a csv list at the top level).
    fn keyval(&mut self, first: bool) -> Result<ShorthandField, ShorthandError> {
        let key_pos = self.pos;
        let key = self.key(first)?;
        if key.is_empty() && self.peek() != Some(b'=') {
            let msg = match self.peek_char() {
                None if !first => "expected a key after ','; remove the trailing comma".to_string(),
                None => "expected Key=Value, found an empty argument".to_string(),
                c => format!(
                    "expected a key (letters, digits and -_.#/:) followed by '=', found {}",
                    describe(c)
                ),
            };
            return Err(self.err(self.pos, msg));
        }
        self.skip_blanks();
        let files = self.at_sign();
        self.expect(b'=', true, &format!("after key \"{key}\""))?;
        let mut value = self.values(&key)?;
        if files {
            self.read_files(&mut value)?;
        }
        Ok(ShorthandField {
            key,
            key_pos,
            value,
        })
    }

    /// A key: letters, digits and `-_.#/:` (possibly none, as the AWS CLI allows).
    fn key(&mut self, first: bool) -> Result<String, ShorthandError> {
        let start = self.pos;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b"-_.#/:".contains(&b))
        {
            self.pos += 1;
        }
        if self.pos == start && first && start == 0 && self.peek() == Some(b'{') {
            return Err(self.err(
                start,
                "expected Key=Value, found '{': the shorthand form is Key=Value,Key={...},Key=[...] (JSON starts with '{' and is read as JSON)",
            ));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn values(&mut self, key: &str) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            None => Ok(ShorthandNode {
                pos: self.pos,
                value: ShorthandValue::Scalar(String::new()),
            }),
            Some(b'[') => self.explicit_list(),
            Some(b'{') => self.hash_literal(),
            Some(_) => self.csv_value(key),
        }
    }

    /// `a` is a scalar, `a,b,c` a list, as long as no item is followed by `=` (that is the
    /// next key: the list ends before it).
    fn csv_value(&mut self, key: &str) -> Result<ShorthandNode, ShorthandError> {
        let start = self.pos;
        let first = self.first_value()?;
        self.skip_blanks();
        if self.peek() != Some(b',') {
            return Ok(first);
        }
        let mut comma = self.pos;
        self.pos += 1;
        self.skip_blanks();
        let mut items = vec![first];
        loop {
            match self.second_value() {
                Some(item) => {
                    self.skip_blanks();
                    if self.at_eof() {
                        items.push(item);
                        break;
                    }
                    if self.peek() == Some(b',') {
                        comma = self.pos;
                        self.pos += 1;
                        self.skip_blanks();
                        items.push(item);
                        continue;
                    }
                }
                None if self.at_eof() => {
                    return Err(self.err(
                        self.pos,
                        format!("expected a value after ',' in the value of key \"{key}\", found the end of the input; remove the trailing comma"),
                    ));
                }
                None => {}
            }
            // The next key: back to the comma before it.
            self.pos = comma;
            break;
        }
        if items.len() == 1 {
            return Ok(items.pop().expect("one item"));
        }
        Ok(ShorthandNode {
            pos: start,
            value: ShorthandValue::List(items),
        })
    }

    /// A value of a list item or a structure field: a list, a structure or a scalar.
    fn explicit_value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            Some(b'[') => self.explicit_list(),
            Some(b'{') => self.hash_literal(),
            _ => self.first_value(),
        }
    }

    fn explicit_list(&mut self) -> Result<ShorthandNode, ShorthandError> {
        let open = self.pos;
        self.enter()?;
        self.expect(b'[', true, "")?;
        let mut items = Vec::new();
        while self.peek() != Some(b']') {
            if self.at_eof() {
                return Err(self.err(
                    self.pos,
                    format!(
                        "expected ']' to close the '[' at byte {open}, found the end of the input"
                    ),
                ));
            }
            items.push(self.explicit_value()?);
            self.skip_blanks();
            if self.peek() != Some(b']') {
                if self.at_eof() {
                    return Err(self.err(
                        self.pos,
                        format!("expected ']' to close the '[' at byte {open}, found the end of the input"),
                    ));
                }
                self.expect(b',', false, "or ']' after a list item")?;
                self.skip_blanks();
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(ShorthandNode {
            pos: open,
            value: ShorthandValue::List(items),
        })
    }

    /// `{Key=Value,...}`; a key given twice keeps its last value, as the AWS CLI does.
    fn hash_literal(&mut self) -> Result<ShorthandNode, ShorthandError> {
        let open = self.pos;
        self.enter()?;
        self.expect(b'{', true, "")?;
        let mut fields: Vec<ShorthandField> = Vec::new();
        while self.peek() != Some(b'}') {
            if self.at_eof() {
                return Err(self.err(
                    self.pos,
                    format!("expected '}}' to close the '{{' at byte {open}, found the end of the input"),
                ));
            }
            let key_pos = self.pos;
            let key = self.key(false)?;
            self.skip_blanks();
            let files = self.at_sign();
            if key.is_empty() && self.peek() != Some(b'=') {
                return Err(self.err(
                    self.pos,
                    format!(
                        "expected a key (letters, digits and -_.#/:) followed by '=', found {}",
                        describe(self.peek_char())
                    ),
                ));
            }
            self.expect(b'=', true, &format!("after key \"{key}\""))?;
            let mut value = self.explicit_value()?;
            if files {
                self.read_files(&mut value)?;
            }
            self.skip_blanks();
            if self.peek() != Some(b'}') {
                if self.at_eof() {
                    return Err(self.err(
                        self.pos,
                        format!("expected '}}' to close the '{{' at byte {open}, found the end of the input"),
                    ));
                }
                self.expect(
                    b',',
                    false,
                    &format!("or '}}' after the value of key \"{key}\""),
                )?;
                self.skip_blanks();
            }
            let field = ShorthandField {
                key,
                key_pos,
                value,
            };
            match fields.iter_mut().find(|f| f.key == field.key) {
                Some(f) => *f = field,
                None => fields.push(field),
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(ShorthandNode {
            pos: open,
            value: ShorthandValue::Struct(fields),
        })
    }

    /// A quoted value, or a bare one (possibly empty) as the AWS CLI's first-value pattern
    /// reads it.
    fn first_value(&mut self) -> Result<ShorthandNode, ShorthandError> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.quoted(q as char),
            _ => Ok(self.bare(is_first_follow).unwrap_or_else(|| ShorthandNode {
                pos: self.pos,
                value: ShorthandValue::Scalar(String::new()),
            })),
        }
    }

    /// A later item of a top-level csv list: quoted, or bare by the second-value pattern
    /// (which stops at `=`); `None` when none starts here (nothing consumed).
    fn second_value(&mut self) -> Option<ShorthandNode> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.quoted(q as char).ok(),
            _ => self.bare(is_second_follow),
        }
    }

    /// A quoted value: `\` escapes the quote and itself; other escapes stay as written.
    fn quoted(&mut self, quote: char) -> Result<ShorthandNode, ShorthandError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek_char() else {
                self.pos = start;
                return Err(self.err(
                    self.src.len(),
                    format!("expected a closing {quote} for the quoted value at byte {start}, found the end of the input"),
                ));
            };
            self.pos += c.len_utf8();
            if c == quote {
                break;
            }
            if c == '\\' {
                match self.peek_char() {
                    Some(n) if n == quote || n == '\\' => {
                        out.push(n);
                        self.pos += n.len_utf8();
                    }
                    _ => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        Ok(ShorthandNode {
            pos: start,
            value: ShorthandValue::Scalar(out),
        })
    }

    /// A bare value: a first character that may start a word, then characters `follow`
    /// accepts; `\,` is a comma inside it. Trailing blanks are dropped. `None` (nothing
    /// consumed) when no value starts here.
    fn bare(&mut self, follow: fn(char) -> bool) -> Option<ShorthandNode> {
        let start = self.pos;
        let mut out = String::new();
        let mut first = true;
        while let Some(c) = self.peek_char() {
            if self.src[self.pos..].starts_with("\\,") {
                out.push(',');
                self.pos += 2;
            } else if (first && is_start_word(c)) || (!first && follow(c)) {
                out.push(c);
                self.pos += c.len_utf8();
            } else {
                break;
            }
            first = false;
        }
        if first {
            return None;
        }
        let text = out.trim_end_matches(char::is_whitespace).to_string();
        Some(ShorthandNode {
            pos: start,
            value: ShorthandValue::Scalar(text),
        })
    }
}

pub(super) fn is_python_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// The characters that may begin a bare value (the AWS CLI's shorthand pattern): printable
/// characters up to U+FFFF except space, quotes, `,`, `=`, `[` and `{`.
pub(super) fn is_start_word(c: char) -> bool {
    let u = c as u32;
    matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x3C | 0x3E..=0x5A | 0x5C..=0x7A | 0x7C..=0xFFFF)
}

/// The characters that may follow in a bare value of a structure, a list or the first of a
/// csv list: blanks and printable characters except quotes, `,`, `]` and `}`.
pub(super) fn is_first_follow(c: char) -> bool {
    let u = c as u32;
    c.is_whitespace()
        || matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x5C | 0x5E..=0x7C | 0x7E..=0xFFFF)
}

/// The characters that may follow in a later csv item: blanks and printable characters
/// except quotes, `,` and `=`.
pub(super) fn is_second_follow(c: char) -> bool {
    let u = c as u32;
    c.is_whitespace() || matches!(u, 0x21 | 0x23..=0x26 | 0x28..=0x2B | 0x2D..=0x3C | 0x3E..=0xFFFF)
}

/// A scalar as shorthand: bare when that reads back the same, else double-quoted.
pub(super) fn render_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with(['"', '\'', ' ', '\t', '\n', '\r'])
        && !s.ends_with([' ', '\t', '\n', '\r'])
        && !s.contains([',', '{', '}', '[', ']']);
    if plain {
        s.to_string()
    } else {
        let mut out = String::from("\"");
        for c in s.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

pub(super) fn render_row(r: &ComputeQuotaResource) -> String {
    let mut parts = vec![format!("InstanceType={}", render_scalar(&r.instance_type))];
    if let Some(n) = r.count {
        parts.push(format!("Count={n}"));
    }
    if let Some(n) = r.accelerators {
        parts.push(format!("Accelerators={n}"));
    }
    if let Some(v) = r.vcpu {
        parts.push(format!("VCpu={v}"));
    }
    if let Some(v) = r.memory_in_gib {
        parts.push(format!("MemoryInGiB={v}"));
    }
    if let Some(p) = &r.accelerator_partition {
        parts.push(format!(
            "AcceleratorPartition={{Type={},Count={}}}",
            render_scalar(&p.profile),
            p.count
        ));
    }
    format!("{{{}}}", parts.join(","))
}
