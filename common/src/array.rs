//! Job array indices as `allot submit --array` takes them, in Slurm's syntax: `0-999`,
//! `1,3,5`, `0-15:4` (every fourth), combined with commas, and `%N` at the end to run at most
//! N elements at once.

/// At most this many elements in one array.
pub const MAX_ELEMENTS: u64 = 100_000;
/// The largest index (Slurm's default `MaxArraySize` is 1001; allot's limit is the count).
pub const MAX_INDEX: u32 = 9_999_999;

/// Parsed array indices: ranges (first, last, step), in the order given, and the limit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArrayIndices {
    pub ranges: Vec<(u32, u32, u32)>,
    pub max_running: Option<u32>,
}

impl ArrayIndices {
    pub fn parse(text: &str) -> Result<ArrayIndices, String> {
        let bad = |what: String| {
            format!(
                "array {text:?}: {what}; use indices like 0-999, 1,3,5 or 0-15:4, optionally \
                 ending in %N to run at most N at once (0-999%8)"
            )
        };
        let (list, limit) = match text.split_once('%') {
            Some((l, n)) => (l, Some(n)),
            None => (text, None),
        };
        let max_running = match limit {
            None => None,
            Some(n) => match n.trim().parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(bad(format!(
                        "the limit {n:?} is not a whole number above 0"
                    )))
                }
            },
        };
        let num = |s: &str| -> Result<u32, String> {
            match s.trim().parse::<u32>() {
                Ok(n) if n <= MAX_INDEX => Ok(n),
                Ok(_) => Err(bad(format!("index {s} is above the largest, {MAX_INDEX}"))),
                Err(_) => Err(bad(format!("{s:?} is not an index"))),
            }
        };
        let mut ranges = Vec::new();
        let mut total: u64 = 0;
        for part in list.split(',') {
            let (span, step) = match part.split_once(':') {
                Some((r, s)) => match s.trim().parse::<u32>() {
                    Ok(s) if s > 0 => (r, s),
                    _ => return Err(bad(format!("the step {s:?} is not a whole number above 0"))),
                },
                None => (part, 1),
            };
            let (first, last) = match span.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(span)?;
                    (n, n)
                }
            };
            if last < first {
                return Err(bad(format!("the range {span} ends before it begins")));
            }
            total += u64::from((last - first) / step) + 1;
            if total > MAX_ELEMENTS {
                return Err(bad(format!("more than {MAX_ELEMENTS} elements")));
            }
            ranges.push((first, last, step));
        }
        let parsed = ArrayIndices {
            ranges,
            max_running,
        };
        let mut seen = std::collections::BTreeSet::new();
        for i in parsed.iter() {
            if !seen.insert(i) {
                return Err(bad(format!("index {i} is listed twice")));
            }
        }
        Ok(parsed)
    }

    /// The indices, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges
            .iter()
            .flat_map(|&(a, b, s)| (a..=b).step_by(s as usize))
    }

    /// The `k`-th index in order (from 0), without walking the indices before it.
    pub fn nth(&self, mut k: u32) -> Option<u32> {
        for &(a, b, s) in &self.ranges {
            let n = (b - a) / s + 1;
            if k < n {
                return Some(a + k * s);
            }
            k -= n;
        }
        None
    }

    /// Where `index` stands in the order (from 0), if it is one of the indices.
    pub fn position(&self, index: u32) -> Option<u32> {
        let mut before = 0;
        for &(a, b, s) in &self.ranges {
            if (a..=b).contains(&index) && (index - a).is_multiple_of(s) {
                return Some(before + (index - a) / s);
            }
            before += (b - a) / s + 1;
        }
        None
    }

    pub fn len(&self) -> u32 {
        self.ranges.iter().map(|&(a, b, s)| (b - a) / s + 1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// An element's name: the array's name and its index.
pub fn element_name(array: &str, index: u32) -> String {
    format!("{array}-{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_forms_parse() {
        let a = ArrayIndices::parse("0-3,8,10-20:5%2").expect("parses");
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 15, 20]
        );
        assert_eq!((a.len(), a.max_running), (8, Some(2)));
        for (k, i) in a.iter().enumerate() {
            assert_eq!(a.nth(k as u32), Some(i));
            assert_eq!(a.position(i), Some(k as u32));
        }
        assert_eq!(
            (a.nth(8), a.position(4), a.position(11)),
            (None, None, None)
        );
        assert_eq!(ArrayIndices::parse("5").expect("one").len(), 1);
    }

    #[test]
    fn bad_forms_say_what_is_accepted() {
        for (text, says) in [
            ("3-1", "ends before it begins"),
            ("0-9%0", "not a whole number above 0"),
            ("a-b", "is not an index"),
            ("0-9:0", "step"),
            ("1,1", "listed twice"),
            ("0-200000", "more than 100000 elements"),
            ("", "is not an index"),
        ] {
            let e = ArrayIndices::parse(text).expect_err(text);
            assert!(e.contains(says) && e.contains("0-999%8"), "{text}: {e}");
        }
    }
}
